#!/usr/bin/env bash
# Screenshots of the real app window for the README, taken under Xvfb with Qt's xcb plugin.
#   scripts/screenshots.sh MODEL.gguf [OUT_DIR]     (default OUT_DIR: docs/screenshots)
#   scripts/screenshots.sh --first-hour [OUT_DIR]   the welcome dialog and the model manager, from a
#                                                   new user's first hour (scripts/first_hour.py)
#   scripts/screenshots.sh --book MODEL.gguf [OUT_DIR]  making an audiobook: the review and the render
#                                                   (scripts/screenshot_book.py)
# Needs xvfb-run (apt: xvfb xauth), espeak-ng and ffmpeg; PYTHON overrides the interpreter.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 MODEL.gguf [OUT_DIR]" >&2; exit 2; }
python=${PYTHON:-$root/.venv/bin/python}
out=${2:-$root/docs/screenshots}
export QT_QPA_PLATFORM=xcb
cd "$root"
if [ "$1" = --first-hour ]; then
  exec xvfb-run -a -s "-screen 0 1600x1000x24 -dpi 96" "$python" "$root/scripts/first_hour.py" --out "$out"
fi
if [ "$1" = --book ]; then
  exec xvfb-run -a -s "-screen 0 1600x1000x24 -dpi 96" "$python" "$root/scripts/screenshot_book.py" --model "$2" \
    --out "${3:-$root/docs/screenshots}"
fi
xvfb-run -a -s "-screen 0 1600x1000x24 -dpi 96" "$python" "$root/scripts/screenshots.py" --model "$1" --out "$out"
