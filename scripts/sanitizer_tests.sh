#!/usr/bin/env bash
# Runs engine tests against engine_native._core built with AddressSanitizer +
# UndefinedBehaviorSanitizer (docs/FUZZING.md).
#   bash scripts/sanitizer_tests.sh [PYTEST ARGS...]     (default: the subset below)
# Builds build/sanitize (scripts/sanitizer_build.sh: _core over the fuzz targets' sanitized
# objects, engine_native/fuzz/CMakeLists.txt), lays out build/sanitize/pkg/engine_native
# (this checkout's Python sources, linked, beside the sanitized libraries) first on sys.path,
# and runs pytest with the ASan runtime preloaded (Python itself is not instrumented; the
# runtime must be loaded before any instrumented library). Python's own allocations are not
# ours to leak-check (detect_leaks=0); a UBSan report fails the run (halt_on_error=1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${PYTHON:-$root/.venv/bin/python}
bash scripts/sanitizer_build.sh _core_sanitized
build=$root/build/sanitize
pkg=$build/pkg/engine_native
rm -rf "$build/pkg"
mkdir -p "$pkg"
for f in engine_native/*; do
  case $f in *.so) ;; *) ln -s "$root/$f" "$pkg/$(basename "$f")" ;; esac
done
cp "$build"/engine_native/libggml*.so "$build"/sanitized_core/_core*.so "$pkg/"
# First on sys.path, ahead of the checkout's own engine_native (the working directory, a
# development .pth): sitecustomize runs after the .pth files.
printf 'import sys\nsys.path.insert(0, %s)\n' "'$build/pkg'" >"$build/pkg/sitecustomize.py"
runtime=$(clang-14 -print-file-name=libclang_rt.asan-x86_64.so)
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  # What reads files and user input, and each native component once (Nano, the small MTL).
  tests=(tests/engine_native/src/core/test_model_file.py tests/engine_native/src/text
         tests/engine_native/test_text_mtl.py tests/engine_native/test_voice.py
         tests/engine_native/src/cloning/test_audio_features.py tests/engine_native/src/core/test_fft.py
         tests/engine_native/src/t3/test_sampler.py tests/engine_native/test_engine_reliability.py)
fi
# PYTHONSAFEPATH (Python 3.11+): the working directory, this checkout, is not put first.
export PYTHONPATH="$build/pkg${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1 LD_PRELOAD="$runtime" QT_QPA_PLATFORM=offscreen
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$root/engine_native/fuzz/ubsan.supp}
"$py" -c "import engine_native._core as c; assert c.__file__.startswith('$build/'), c.__file__"
echo "sanitizer tests: ${tests[*]}"
"$py" -m pytest -q -p no:cacheprovider "${tests[@]}"
