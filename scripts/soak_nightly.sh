#!/usr/bin/env bash
# The long runs, for a quiet machine at night (CI runs the short ones):
#   - the app's GUI soak (tests/app/qt/test_main_window_soak.py) with ACTIONS actions after its
#     warm-up (CI: 150): no exception, no GUI-thread stall, RSS growth under 5 %;
#   - the speech server under 8 clients for SERVER_MINUTES minutes (benchmarks/server_load.py):
#     errors by kind, p50/p99 latency, the server's RSS sampled.
#
#   scripts/soak_nightly.sh [ACTIONS] [SERVER_MINUTES]    (defaults 1000 and 30; 0 skips a run)
#
# Logs and the load run's JSON go to $CBS_SOAK_OUT (default soak-DATE/ in the current folder);
# the exit status is non-zero when either run failed. PYTHON overrides the interpreter.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
actions=${1:-1000}
minutes=${2:-30}
out=${CBS_SOAK_OUT:-$PWD/soak-$(date +%Y%m%d-%H%M)}
mkdir -p "$out"
status=0

if [ "$actions" -gt 0 ]; then
  echo "== GUI soak: $actions actions (log: $out/gui_soak.log)"
  (cd "$root" && CBS_SOAK_ACTIONS=$actions QT_QPA_PLATFORM=offscreen \
    "$python" -m pytest -q -s -p no:cacheprovider tests/app/qt/test_main_window_soak.py) >"$out/gui_soak.log" 2>&1
  rc=$?
  grep -E "^GUI soak:|^  stall|passed|failed|Error" "$out/gui_soak.log" | tail -20
  echo "GUI soak exit status $rc"
  [ $rc -eq 0 ] || status=1
fi

if [ "$minutes" != 0 ]; then
  echo "== server load: 8 clients, $minutes min (log: $out/server_load.log, figures: $out/server_load.json)"
  (cd "$root" && "$python" benchmarks/server_load.py --duration "$(( minutes * 60 ))" --clients 8 \
    --json "$out/server_load.json") >"$out/server_load.log" 2>&1
  rc=$?
  cat "$out/server_load.log"
  echo "server load exit status $rc"
  [ $rc -eq 0 ] || status=1
fi
exit $status
