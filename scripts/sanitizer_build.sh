#!/usr/bin/env bash
# Builds the engine with AddressSanitizer + UndefinedBehaviorSanitizer (clang-14) into
# build/sanitize: ggml, engine_native._core and the libFuzzer targets (docs/FUZZING.md).
#   bash scripts/sanitizer_build.sh [NINJA TARGETS...]   (default: _core_sanitized fuzz_targets)
# The ggml source is the one a pip build of this checkout kept (build/*/_ggml/sdist), else the
# pinned sdist is downloaded (engine_native/cmake/ggml_source.cmake). GGML_SOURCE_DIR overrides.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${PYTHON:-$root/.venv/bin/python}
build=$root/build/sanitize
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(_core_sanitized fuzz_targets)
mkdir -p "$root/build"
if [ ! -f "$build/build.ninja" ]; then
  src=${GGML_SOURCE_DIR:-}
  if [ -z "$src" ]; then
    for d in "$root"/build/*/_ggml/sdist/libggml_python-* /work/main/build/*/_ggml/sdist/libggml_python-*; do
      [ -f "$d/ggml/include/ggml.h" ] && { src=$d; break; }
    done
  fi
  # -O1 and line tables: the usual sanitizer build (reports name file and line; runs at a
  # usable speed; compiles in a fraction of -O2 -g's time).
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
    -DCBS_SANITIZE=address,undefined -DCBS_FUZZ=ON -DCBS_CPU_ALL_VARIANTS=OFF -DCBS_GPU=none \
    ${src:+-DGGML_SOURCE_DIR="$src"} -DPython_EXECUTABLE="$py" -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" \
    -DSKBUILD_PROJECT_VERSION=0.1.0 >"$build.configure.log" 2>&1 \
    || { tail -20 "$build.configure.log" >&2; exit 1; }
fi
nice -n "${CBS_FUZZ_NICE:-10}" cmake --build "$build" --target "${targets[@]}" -- -j"${CBS_FUZZ_JOBS:-2}" \
  | grep -v "^\[" || true
test "${PIPESTATUS[0]}" -eq 0
