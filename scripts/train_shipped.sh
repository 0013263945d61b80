#!/usr/bin/env bash
# Reproduce the shipped policy (checkpoints/grasp_unet) from nothing on a CPU machine:
# collect 1200 expert demonstrations and 400 with a switched instruction (the expert goes
# for another object first and turns when told), train 3500 steps on the 1200
# (config/train_grasp.yaml), 2000 more from there on all 1600
# (config/train_grasp_warm.yaml); then the DAgger-style third stage: 400 more switched
# demonstrations and 600 recoveries (the second-stage policy drives, the expert takes
# over from wherever it left the arm; half of them with a switched instruction) and
# 2500 more steps on everything (config/train_grasp_recover.yaml); evaluate on the 100
# held-out seeds. About 4.5 hours on the 2-core dev machine: collection ~15 + 6 + 6 +
# 2 x 16 min, training 65 + 34 + 40 min, evaluation ~25 min in one process. A step whose
# output exists is skipped, so an interrupted run picks up where it stopped (a training
# run resumes from its last checkpoint).
# Output: data/demos, data/demos_switch, data/demos_switch2, data/demos_recover,
# data/demos_recover_switch, runs/grasp_unet, runs/grasp_unet_switch,
# runs/grasp_unet_recover (the shipped checkpoint is runs/grasp_unet_recover/checkpoint)
# and runs/grasp_unet_recover/eval.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
dpr=.venv/bin/dpr
finished() { grep -q '"final": true' "$1/checkpoint/metadata.json" 2>/dev/null; }

[ -d data/demos ] || $dpr collect --episodes 1200 --out data/demos --seed 1000
finished runs/grasp_unet ||
  $dpr train --data data/demos --config config/policy_unet.yaml \
    --train-config config/train_grasp.yaml --out runs/grasp_unet --resume
[ -d data/demos_switch ] ||
  $dpr collect --episodes 400 --out data/demos_switch --seed 40000 --switches
finished runs/grasp_unet_switch ||
  $dpr train --data data/demos data/demos_switch --config config/policy_unet.yaml \
    --train-config config/train_grasp_warm.yaml --out runs/grasp_unet_switch --resume
[ -d data/demos_switch2 ] ||
  $dpr collect --episodes 400 --out data/demos_switch2 --seed 40400 --switches
[ -d data/demos_recover ] ||
  $dpr collect --episodes 300 --out data/demos_recover --seed 61000 \
    --recover-from runs/grasp_unet_switch/checkpoint
[ -d data/demos_recover_switch ] ||
  $dpr collect --episodes 300 --out data/demos_recover_switch --seed 62000 --switches \
    --recover-from runs/grasp_unet_switch/checkpoint
finished runs/grasp_unet_recover ||
  $dpr train --data data/demos data/demos_switch data/demos_switch2 data/demos_recover \
    data/demos_recover_switch --config config/policy_unet.yaml \
    --train-config config/train_grasp_recover.yaml --out runs/grasp_unet_recover --resume
$dpr eval --checkpoint runs/grasp_unet_recover/checkpoint --episodes 100 --seed 5000 \
  --report runs/grasp_unet_recover/eval.json
