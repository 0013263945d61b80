#!/usr/bin/env bash
# Reproduce the shipped policy from nothing on a CPU machine: its teacher
# (checkpoints/grasp_unet) and the one-step student distilled from it
# (checkpoints/grasp_unet_cd32, the default of every command).
# Teacher, three stages: collect 1200 expert demonstrations and 400 with a switched
# instruction (the expert goes for another object first and turns when told), train 3500
# steps on the 1200 (config/train_grasp.yaml), 2000 more from there on all 1600
# (config/train_grasp_warm.yaml); then the DAgger-style third stage: 400 more switched
# demonstrations and 600 recoveries (the second-stage policy drives, the expert takes
# over from wherever it left the arm; half of them with a switched instruction) and
# 2500 more steps on everything (config/train_grasp_recover.yaml).
# Student: consistency distillation of the teacher on the 1200 + 400 demonstrations
# (config/distill_shipped.yaml). Both are evaluated on the 100 held-out seeds, the
# learned policy alone.
# About 6 hours on the 2-core dev machine: collection ~15 + 6 + 6 + 2 x 16 min, training
# 65 + 34 + 40 min, the teacher's evaluation ~25 min, distillation ~60 min, the student's
# evaluation ~15 min. A step whose output exists is skipped, so an interrupted run picks
# up where it stopped (a training run resumes from its last checkpoint).
# Output: data/demos, data/demos_switch, data/demos_switch2, data/demos_recover,
# data/demos_recover_switch; runs/grasp_unet, runs/grasp_unet_switch,
# runs/grasp_unet_recover (the teacher: runs/grasp_unet_recover/checkpoint, eval.json
# beside it) and runs/grasp_unet_cd32 (the student: checkpoint/ and eval.json).
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
[ -f runs/grasp_unet_recover/eval.json ] ||
  $dpr eval --checkpoint runs/grasp_unet_recover/checkpoint --episodes 100 --seed 5000 \
    --report runs/grasp_unet_recover/eval.json
finished runs/grasp_unet_cd32 ||
  $dpr distill --teacher runs/grasp_unet_recover/checkpoint --data data/demos \
    data/demos_switch --distill-config config/distill_shipped.yaml --out runs/grasp_unet_cd32
[ -f runs/grasp_unet_cd32/eval.json ] ||
  $dpr eval --checkpoint runs/grasp_unet_cd32/checkpoint --episodes 100 --seed 5000 \
    --report runs/grasp_unet_cd32/eval.json
