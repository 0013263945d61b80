#!/usr/bin/env bash
# One set-up step for a fresh machine: Debian packages (when root), a local
# .venv with every Python dependency (ROS 2 Kilted wheels, torch CPU, MuJoCo,
# open3d, ...), this project installed editable and, where ../shared/ros2-tools
# exists, the upstream launch / launch_ros / ros2 CLI. Safe to re-run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Debian packages: libusb for open3d, OSMesa/EGL for headless MuJoCo rendering.
debs=(libusb-1.0-0 libosmesa6 libegl1 libgl1 libglib2.0-0)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[setup] installing Debian packages: ${missing[*]}"
    (apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1) || {
      apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
  else
    echo "[setup] WARNING: missing Debian packages: ${missing[*]}" >&2
    echo "[setup]          install them with: sudo apt-get install ${missing[*]}" >&2
  fi
fi

py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($py --version)"
  "$py" -m venv .venv
fi
stamp=.venv/.dpr-installed
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ setup.py -nt "$stamp" ]; then
  echo "[setup] installing Python dependencies (first time: a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  .venv/bin/python -m pip install -q --no-deps -e .
  touch "$stamp"
fi

# The upstream ROS 2 tools (ros2 launch/topic/run/param, launch, launch_ros), offline
# wheels beside this checkout: the launch files and the `ros2` CLI are then tested for
# real. Without the folder (and without a system ROS 2) those tests skip with the reason.
tools=$root/../shared/ros2-tools
tools_stamp=.venv/.dpr-ros2-tools
if [ -f "$tools/install.sh" ]; then
  if [ ! -f "$tools_stamp" ] || [ "$tools/install.sh" -nt "$tools_stamp" ] \
      || [ "$tools/wheels" -nt "$tools_stamp" ] || [ "$stamp" -nt "$tools_stamp" ]; then
    echo "[setup] installing the ROS 2 tools from $tools"
    bash "$tools/install.sh" .venv
    touch "$tools_stamp"
  fi
else
  echo "[setup] no $tools: launch files and the ros2 CLI tests skip unless ROS 2 provides them"
fi
echo "[setup] ready: $root/.venv"
