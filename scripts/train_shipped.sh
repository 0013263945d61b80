#!/usr/bin/env bash
# Reproduce the shipped policy (checkpoints/grasp_unet) from nothing on a CPU machine:
# collect 1200 expert demonstrations, train 3500 steps (config/train_grasp.yaml), train
# 2000 more from there (config/train_grasp_warm.yaml), evaluate on the 100 held-out
# seeds. About 2.5 hours on the 2-core dev machine: collection ~15 min, training 65 +
# 37 min, evaluation ~25 min in one process. A step whose output exists is skipped, so
# an interrupted run picks up where it stopped (a training run resumes from its last checkpoint).
# Output: data/demos, runs/grasp_unet, runs/grasp_unet_cont (the shipped checkpoint is
# runs/grasp_unet_cont/checkpoint) and runs/grasp_unet_cont/eval.json.
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
finished runs/grasp_unet_cont ||
  $dpr train --data data/demos --config config/policy_unet.yaml \
    --train-config config/train_grasp_warm.yaml --out runs/grasp_unet_cont --resume
$dpr eval --checkpoint runs/grasp_unet_cont/checkpoint --episodes 100 --seed 5000 \
  --report runs/grasp_unet_cont/eval.json
