#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the test suite, lint included: every test but the
# end-to-end ones marked `slow` (about 15 min on two cores); `--all` runs those too.
# Other arguments go to pytest (a `-m` of yours replaces the default selection).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh

# ROS 2 isolation: discovery stays on this machine, each run gets its own
# domain and a log dir inside build/.
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( $$ % 90 + 10 ))}
export ROS_LOG_DIR="$root/build/ros_log/run-$(date +%Y%m%d-%H%M%S)-$$"
export MUJOCO_GL=${MUJOCO_GL:-egl}
export HF_HUB_OFFLINE=1
mkdir -p "$ROS_LOG_DIR"
echo "[test] ROS_DOMAIN_ID=$ROS_DOMAIN_ID ROS_LOG_DIR=$ROS_LOG_DIR"

select=(-m "not slow")
if [ "${1:-}" = "--all" ]; then
  select=()
  shift
fi
set +e
.venv/bin/python -m pytest "${select[@]}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
