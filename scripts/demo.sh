#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job headless.
# Until a trained policy ships (README "Shipped policy"): rgbd_sync_node on a
# synthetic 30 Hz Kinect stream over ROS 2. The nodes, dpr bringup and the launch
# files are all there; the main job becomes `dpr bringup --episodes 5 --seed 5000
# --out build/demo` with checkpoints/grasp_unet once that checkpoint grasps.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( $$ % 90 + 10 ))}
export ROS_LOG_DIR=${ROS_LOG_DIR:-"$root/build/ros_log/demo-$$"}
mkdir -p "$ROS_LOG_DIR"
exec .venv/bin/dpr sync-demo "$@"
