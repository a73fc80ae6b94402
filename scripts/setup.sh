#!/usr/bin/env bash
# Sets up Chatterbox Studio on a fresh Debian/Ubuntu machine.
#   bash scripts/setup.sh app    system packages + .venv with the app
#   bash scripts/setup.sh test   the above + test tools + the PyTorch reference venv (.venv-ref)
# Safe to run again: every step skips what is already done.
set -euo pipefail
mode=${1:-app}
case "$mode" in app|test) ;; *) echo "usage: $0 [app|test]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# --- system packages -------------------------------------------------------
apt_packages=(
  libportaudio2 ffmpeg espeak-ng patch
  # Qt's xcb platform plugin (real windows; screenshots under Xvfb)
  libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0
  libxcb-randr0 libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0 libegl1 libgl1
  libfontconfig1 libdbus-1-3
)
# The fuzz targets' clang-14 is not installed here: their sanitizer build takes an hour on two
# cores, so the test suite runs them only where it exists (docs/FUZZING.md: how to set it up).
# chromium: the server's tests in a real browser (tests/app/server/test_browser.py); strace: the
# hostile-recording audit of every file a decoder opens (tests/voice_lab/test_decode_hostile.py).
[ "$mode" = test ] && apt_packages+=(xvfb xauth imagemagick desktop-file-utils chromium strace)
# A GPU here: the Vulkan backend's build tools too (the build makes the CUDA backend when
# nvcc and cuBLAS are installed, the Vulkan one when these are; CBS_GPU=none|cuda|vulkan
# forces a choice). CPU-only machines build neither, whatever they have installed.
gpu_present=no
if [ -e /dev/nvidia0 ] || [ -e /proc/driver/nvidia/version ] || ls /dev/dri/renderD* >/dev/null 2>&1; then
  gpu_present=yes
fi
if [ "$gpu_present" = yes ] && [ "${CBS_GPU:-auto}" != none ]; then
  apt_packages+=(libvulkan-dev glslc spirv-headers)
fi
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing system packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Without a sound card, an ALSA null device lets playback run for real (tests, CI).
if [ "$mode" = test ] && { [ ! -e /proc/asound/cards ] || grep -q "no soundcards" /proc/asound/cards; } \
   && [ ! -e /etc/asound.conf ]; then
  echo "setup: no sound card; routing ALSA's default device to a null sink"
  printf 'pcm.!default { type null }\n' | { [ "$(id -u)" -eq 0 ] && tee /etc/asound.conf || sudo tee /etc/asound.conf; } >/dev/null
fi

# --- the project environment (never gets torch) ----------------------------
[ -x .venv/bin/python ] || python3 -m venv .venv
extras="[server]"
# Tests also cover Japanese through pykakasi (the GPL `ja` extra: tests only, never in the bundle).
[ "$mode" = test ] && extras="[server,test,package,ja]"
# Built here for this machine: one CPU backend module for this CPU (every x86-64 variant takes
# ~12 more compiler minutes on two cores). Wheels and frozen apps for other machines are built
# with CBS_CPU_ALL_VARIANTS=ON, the build's own default (README, "Building for other machines").
export CBS_CPU_ALL_VARIANTS="${CBS_CPU_ALL_VARIANTS:-OFF}"
echo "setup: building and installing chatterbox-studio$extras into .venv (GPU present: $gpu_present," \
     "CBS_GPU=${CBS_GPU:-auto}, CBS_CPU_ALL_VARIANTS=$CBS_CPU_ALL_VARIANTS)"
.venv/bin/python -m pip install -q ".$extras"
.venv/bin/python -c "import engine_native as e; print('setup: engine devices:', ', '.join(d['id'] for d in e.devices()), '- CPU variant:', e.system_info()['cpu_variant'] or 'one')"

# --- the Perth watermark model (resemble-perth's trained weights, MIT) -------
# The engine marks what it makes as the official chatterbox-tts does; its weights come from
# the resemble-perth wheel on PyPI, converted once into the app's data folder (where the
# engine and `chatterbox-studio detect` look for it; CBS_WATERMARK_MODEL overrides). The wheel
# stays in the cache folder, so a second run converts without the network; an existing
# perth.gguf is kept.
.venv/bin/chatterbox-studio watermark-model

# --- a trained speaker encoder for the Voice Lab (and the tests on real voices) ----
# Resemble AI's GE2E encoder from the PyPI wheel Resemblyzer 0.1.4 (Apache-2.0), converted
# into a 5.5 MB GGUF at the path engine_native.convert.ge2e.default_path() names; `lab`
# tells speakers apart with it when it is there. Nothing of Resemblyzer is installed.
ge2e=$(.venv/bin/python -c "from engine_native.convert.ge2e import default_path; print(default_path())")
if [ ! -f "$ge2e" ]; then
  echo "setup: converting Resemblyzer's GE2E speaker encoder into $ge2e"
  wheel_dir=$(mktemp -d)
  if .venv/bin/python -m pip download -q --no-deps --only-binary :all: -d "$wheel_dir" resemblyzer==0.1.4; then
    .venv/bin/python -m engine_native.convert.ge2e "$wheel_dir"/*.whl "$ge2e"
  else
    echo "setup: could not fetch resemblyzer==0.1.4; the Voice Lab will tell speakers apart with a model's encoder"
  fi
  rm -rf "$wheel_dir"
fi

# --- the PyTorch oracle, in its own venv ------------------------------------
if [ "$mode" = test ]; then
  bash tests/reference/setup_venv.sh
fi
echo "setup: done ($mode)"
