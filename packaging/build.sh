#!/usr/bin/env bash
# Builds the one-folder Chatterbox Studio app with PyInstaller: dist/chatterbox-studio/.
#   bash packaging/build.sh [--python PATH] [--dist DIR]
# It packs the chatterbox-studio INSTALLED in the Python environment (default: .venv),
# so run `pip install .` after changing the sources. Installs PyInstaller when missing.
# Prints the build time and the app's size. Work files go to build/pyinstaller/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
dist="$root/dist"
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python=$2; shift 2 ;;
    --dist) dist=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$python" ] || { echo "build.sh: no Python at $python (run scripts/setup.sh app first)" >&2; exit 1; }

if ! "$python" -c "import PyInstaller" 2>/dev/null; then
  echo "build.sh: installing PyInstaller"
  "$python" -m pip install -q "pyinstaller>=6.0"
fi

# Warn when the installed package is older than the sources it will be built from.
site=$(cd /tmp && "$python" -c "import app, os; print(os.path.dirname(os.path.dirname(app.__file__)))")
if [ -z "${CBS_PACKAGE_PATH:-}" ]; then
  stale=$(for pkg in app voice_lab engine_native; do
            (cd "$root" && find "$pkg" -name '*.py' -not -path '*/tools/*') | while read -r f; do
              cmp -s "$root/$f" "$site/$f" || echo "$f"
            done
          done)
  if [ -n "$stale" ]; then
    echo "build.sh: warning: the installed chatterbox-studio differs from the sources in:" >&2
    echo "$stale" | sed 's/^/  /' >&2
    echo "build.sh: (the app is built from the installed copy; run \`pip install .\` to pack the sources)" >&2
  fi
fi

start=$(date +%s)
# Run from outside the tree, so the uncompiled sources can't shadow the installed package.
(cd /tmp && "$python" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$dist" --workpath "$root/build/pyinstaller" \
    "$root/packaging/chatterbox-studio.spec")
took=$(( $(date +%s) - start ))

app="$dist/chatterbox-studio"
[ -x "$app/chatterbox-studio" ] || { echo "build.sh: the build produced no $app/chatterbox-studio" >&2; exit 1; }
size=$(du -sh "$app" | cut -f1)
files=$(find "$app" -type f | wc -l)
echo "build.sh: built $app in ${took} s: ${size} in ${files} files"
echo "build.sh: run it: $app/chatterbox-studio   (self-test: $app/chatterbox-studio selftest MODEL.gguf -o out.wav)"
