#!/usr/bin/env bash
# The whole test suite next to CPU-burning processes (two per core by default), as a
# robot computer is never idle: `scripts/test_loaded.sh [pytest args]`.
# BURNERS=N sets how many. The burners are this script's own children, stopped by PID.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
burners=${BURNERS:-$(( 2 * $(nproc) ))}
pids=()
stop_burners() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap stop_burners EXIT
for _ in $(seq "$burners"); do
  python3 -c 'while True: pass' &
  pids+=($!)
done
echo "[test_loaded] $burners CPU burners next to the suite (pids ${pids[*]})"
set +e
bash scripts/test.sh "$@"
rc=$?
set -e
echo "[test_loaded] suite exit status $rc with $burners burners on $(nproc) cores"
exit "$rc"
