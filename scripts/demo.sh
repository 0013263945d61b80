#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job headless: the simulated grasp with the
# shipped policy (checkpoints/grasp_unet_cd32, a one-step consistency student) on its
# static-graph backend. `dpr export --format aotinductor --if-stale --threads 1` compiles
# the policy's graphs for this machine's CPU and policy_node's one torch thread once
# (three to four minutes; skipped while they are current; without a C++ compiler the eager torch
# backend runs instead). `dpr bringup` starts
# sim_node, rgbd_sync_node, policy_node and pd_tracker_node as processes talking over
# ROS 2 (on the sim's clock, asking for real time; the sim slows down when the machine
# cannot keep up, docs/explanation/safety.md), runs 5 held-out episodes (seeds 5000-5004; each names
# one of five objects in words), prints success, wrong-object rate, chunk latency and
# tracker jitter, and writes the summary, node logs and per-episode GIFs and plots to
# build/demo/. Extra arguments go to `dpr bringup`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( $$ % 90 + 10 ))}
export ROS_LOG_DIR=${ROS_LOG_DIR:-"$root/build/ros_log/demo-$$"}
mkdir -p "$ROS_LOG_DIR" build
backend=aotinductor
if ! .venv/bin/dpr export --format aotinductor --if-stale --threads 1 \
    > build/demo_export.log 2>&1; then
  echo "[demo] dpr export --format aotinductor failed (build/demo_export.log): running the" \
    "policy on eager torch" >&2
  backend=torch
fi
exec .venv/bin/dpr bringup --episodes 5 --seed 5000 --use-sim-time \
  --sim-param real_time_factor:=1.0 --policy-param backend:=$backend --out build/demo "$@"
