#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job headless.
# Today: rgbd_sync_node on a synthetic 30 Hz Kinect stream over ROS 2; it
# becomes the simulated grasp with the shipped policy once those land.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( $$ % 90 + 10 ))}
export ROS_LOG_DIR=${ROS_LOG_DIR:-"$root/build/ros_log/demo-$$"}
mkdir -p "$ROS_LOG_DIR"
exec .venv/bin/dpr sync-demo "$@"
