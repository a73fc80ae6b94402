#!/usr/bin/env bash
# Fuzzes one target (or all, one after another) for SECONDS each (docs/FUZZING.md).
#   bash scripts/fuzz.sh TARGET SECONDS [extra libFuzzer options]
# Native targets (libFuzzer, ASan + UBSan; built here into build/sanitize with clang-14):
#   model_file bpe grapheme punc_norm
# Python targets (atheris): lexicon script pickle voice wav
# The corpus grows in build/fuzz/corpus/TARGET (seeds: tests/fuzz/corpus/TARGET and generated
# ones); a finding is written to build/fuzz/crashes/ and the run stops with its report. Each
# run's log is build/fuzz/logs/TARGET.log; its last lines hold executions and coverage.
# Environment: CBS_FUZZ_NICE (default 19), CBS_FUZZ_JOBS (build jobs, default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
native="model_file bpe grapheme punc_norm"
python_targets="lexicon script pickle voice wav"
target=${1:-}
seconds=${2:-}
if [ -z "$target" ] || [ -z "$seconds" ]; then
  echo "usage: $0 TARGET|all SECONDS [libFuzzer options]   targets: $native $python_targets" >&2
  exit 2
fi
shift 2
py=${PYTHON:-$root/.venv/bin/python}
build=$root/build/sanitize
work=$root/build/fuzz
nice_level=${CBS_FUZZ_NICE:-19}

build_native() {
  if ! command -v clang++-14 >/dev/null; then
    echo "fuzz: clang-14 is missing (apt-get install clang-14 libclang-rt-14-dev llvm-14)" >&2
    exit 3
  fi
  bash scripts/sanitizer_build.sh fuzz_targets
}

prepare_data() {
  [ -f "$work/data/bpe.gguf" ] && [ -f "$work/data/grapheme.gguf" ] && [ -f "$work/data/seeds/model_file/tiny-nano.gguf" ] \
    || "$py" -m tests.fuzz.fuzz_data "$work/data" >/dev/null
}

run_one() {
  local t=$1
  shift
  mkdir -p "$work/corpus/$t" "$work/crashes" "$work/logs"
  local seeds=("tests/fuzz/corpus/$t")
  [ -d "$work/data/seeds/$t" ] && seeds+=("$work/data/seeds/$t")
  local opts=(-max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/crashes/$t-" "$@")
  echo "fuzz: $t for $seconds s (log: $work/logs/$t.log)"
  if [[ " $native " == *" $t "* ]]; then
    # halt_on_error: UBSan's report is a finding, as ASan's is; leaks of the process-wide
    # backend registry at exit are not inputs' faults (detect_leaks stays on per input).
    ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$root/engine_native/fuzz/ubsan.supp} \
    CBS_FUZZ_BPE_GGUF=$work/data/bpe.gguf CBS_FUZZ_GRAPHEME_GGUF=$work/data/grapheme.gguf \
      nice -n "$nice_level" "$build/engine_native/fuzz_$t" "${opts[@]}" "$work/corpus/$t" "${seeds[@]}" \
      >"$work/logs/$t.log" 2>&1
  else
    PYTHONUNBUFFERED=1 nice -n "$nice_level" "$py" -m tests.fuzz.run_python "$t" "${opts[@]}" \
      "$work/corpus/$t" "${seeds[@]}" >"$work/logs/$t.log" 2>&1
  fi
  local rc=$?
  grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|cov:" "$work/logs/$t.log" | tail -2 || true
  return $rc
}

case "$target" in
  all) todo="$native $python_targets" ;;
  *) todo=$target ;;
esac
for t in $todo; do
  if [[ " $native " == *" $t "* ]]; then build_native; prepare_data
  elif [[ " $python_targets " == *" $t "* ]]; then :
  else echo "fuzz: unknown target $t (one of: $native $python_targets)" >&2; exit 2
  fi
done
status=0
for t in $todo; do
  run_one "$t" "$@" || status=$?
done
exit $status
