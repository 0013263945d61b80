#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job headless: the simulated grasp with the
# shipped policy (checkpoints/grasp_unet_cd, a one-step consistency student). `dpr bringup`
# starts sim_node, rgbd_sync_node, policy_node and pd_tracker_node as processes talking
# over ROS 2 (on the sim's clock at 0.5x real time: at 1.0 the whole graph overloads the
# 2-core machine, docs/lightdp.md "Through the nodes"), runs 5 held-out
# episodes (seeds 5000-5004; each names one of five objects in words), prints success,
# wrong-object rate, chunk latency and tracker jitter, and writes the summary, node logs
# and per-episode GIFs and plots to build/demo/. Extra arguments go to `dpr bringup`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( $$ % 90 + 10 ))}
export ROS_LOG_DIR=${ROS_LOG_DIR:-"$root/build/ros_log/demo-$$"}
mkdir -p "$ROS_LOG_DIR"
exec .venv/bin/dpr bringup --episodes 5 --seed 5000 --use-sim-time \
  --sim-param real_time_factor:=1.0 --out build/demo "$@"
