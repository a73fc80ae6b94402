#!/usr/bin/env bash
# Smoke test of the frozen app: build it (or reuse a build), then run it the way a user's
# desktop would -- from a clean environment, outside the source tree, with no display:
#   1. it starts offscreen, opens its main window, and exits 0;
#   2. its self-test loads a model, speaks a short text into a WAV, and exits 0;
#   3. that WAV is playable: soundfile reads it, 24 kHz, nonzero length, finite, not silent.
#   bash packaging/smoke_test.sh [--app DIR | --rebuild] [--model MODEL.gguf] [--keep DIR]
# --app DIR     test this built app folder (default: dist/chatterbox-studio, built when missing)
# --rebuild     build it again first (packaging/build.sh)
# --model PATH  the model (default: the tests' random Nano Q4_0, tests/helpers/models.py, made when missing)
# Prints how long each step took; exits non-zero with the failing step's output.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
app_dir="$root/dist/chatterbox-studio"
model=""
rebuild=0
keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --app) app_dir=$2; shift 2 ;;
    --rebuild) rebuild=1; shift ;;
    --model) model=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "smoke_test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
t0=$(date +%s.%N)
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }
fail() { echo "smoke_test.sh: FAILED: $*" >&2; exit 1; }

if [ "$rebuild" = 1 ] || [ ! -x "$app_dir/chatterbox-studio" ]; then
  tb=$(date +%s.%N)
  bash "$root/packaging/build.sh" --python "$python" --dist "$(dirname "$app_dir")"
  echo "smoke_test.sh: build took $(elapsed "$tb") s"
fi
exe="$app_dir/chatterbox-studio"
[ -x "$exe" ] || fail "no app at $app_dir"
echo "smoke_test.sh: app $app_dir ($(du -sh "$app_dir" | cut -f1))"

if [ -z "$model" ]; then
  model=$(cd /tmp && "$python" -c "import sys; sys.path.append(sys.argv[1]); from tests.helpers.models import model_path; \
print(model_path('nano', 'q4_0'))" "$root") || fail "could not make the random test model"
fi
[ -f "$model" ] || fail "no model at $model"

work=${keep:-$(mktemp -d)}
mkdir -p "$work/home"
[ -n "$keep" ] || trap 'rm -rf "$work"' EXIT
# The app runs as on a user's desktop: a fresh HOME, no virtualenv, no PYTHONPATH, the system
# PATH (where ffmpeg is), from a folder outside the source tree; only offscreen Qt differs.
run_app() {
  (cd "$work" && env -i HOME="$work/home" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
      QT_QPA_PLATFORM=offscreen "$exe" "$@")
}

tw=$(date +%s.%N)
run_app selftest --window --screenshot "$work/window.png" > "$work/window.log" 2>&1 \
  || { cat "$work/window.log" >&2; fail "the main window check"; }
cat "$work/window.log"
[ -s "$work/window.png" ] || fail "no screenshot of the main window"
echo "smoke_test.sh: main window opened and closed in $(elapsed "$tw") s"

ts=$(date +%s.%N)
run_app selftest "$model" -o "$work/smoke.wav" --max-tokens 10 > "$work/selftest.log" 2>&1 \
  || { cat "$work/selftest.log" >&2; fail "the self-test"; }
cat "$work/selftest.log"
echo "smoke_test.sh: self-test took $(elapsed "$ts") s"

# Checked by a separate reader (the project's Python), not by the app that wrote it.
"$python" - "$work/smoke.wav" <<'PY' || fail "the WAV is not playable"
import sys

import numpy as np
import soundfile as sf

path = sys.argv[1]
info = sf.info(path)
audio, rate = sf.read(path, dtype="float32")
assert info.format == "WAV", info.format
assert rate == 24000, f"sample rate {rate}, expected 24000"
assert audio.ndim == 1 and audio.size > 0, f"shape {audio.shape}"
assert np.isfinite(audio).all(), "non-finite samples"
assert np.abs(audio).max() > 0, "silent"
print(f"smoke_test.sh: {path}: {info.format} {info.subtype}, {rate} Hz, {audio.size} samples "
      f"({audio.size / rate:.2f} s), peak {np.abs(audio).max():.3f}")
PY
echo "smoke_test.sh: OK in $(elapsed "$t0") s"
