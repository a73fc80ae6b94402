"""CI's short run of every fuzz target (docs/FUZZING.md): each native libFuzzer target for a
few seconds on its corpus (where the sanitizer build exists), each Python target for a few
hundred atheris inputs. A finding fails the test with the fuzzer's report. The campaigns
themselves are `bash scripts/fuzz.sh TARGET SECONDS`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "sanitize" / "engine_native"
UBSAN_SUPP = ROOT / "engine_native" / "fuzz" / "ubsan.supp"
NATIVE = ("model_file", "bpe", "grapheme", "punc_norm")
PYTHON = ("lexicon", "script", "pickle", "voice", "wav")
NATIVE_SECONDS = 3
PYTHON_RUNS = 300


@pytest.fixture(scope="module")
def fuzz_data(tmp_path_factory):
    from tests.fuzz.fuzz_data import prepare

    return prepare(tmp_path_factory.mktemp("fuzz-data"))


def executed(output: str) -> int:
    m = re.findall(r"stat::number_of_executed_units:\s*(\d+)", output) or re.findall(r"#(\d+)\s+DONE", output)
    return int(m[-1]) if m else 0


def native_exe(target: str) -> Path:
    if shutil.which("clang++-14") is None:
        pytest.skip("clang-14 is not installed (docs/FUZZING.md: apt-get install clang-14 libclang-rt-14-dev llvm-14)")
    exe = BUILD / f"fuzz_{target}"
    if not exe.exists():
        pytest.skip(f"{exe.relative_to(ROOT)} is not built: bash scripts/sanitizer_build.sh fuzz_targets")
    return exe


def native_env(fuzz_data) -> dict:
    return dict(os.environ, ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1",
                UBSAN_OPTIONS=f"halt_on_error=1:print_stacktrace=1:suppressions={UBSAN_SUPP}", CBS_FUZZ_BPE_GGUF=str(fuzz_data["bpe"]),
                CBS_FUZZ_GRAPHEME_GGUF=str(fuzz_data["grapheme"]))


@pytest.mark.parametrize("target", NATIVE)
def test_native_target_finds_nothing_in_a_short_run(target, request, tmp_path):
    exe = native_exe(target)  # before the data: a machine without the build skips at once
    fuzz_data = request.getfixturevalue("fuzz_data")
    seeds = [str(ROOT / "tests" / "fuzz" / "corpus" / target)]
    if target in fuzz_data and fuzz_data[target].is_dir():  # generated seeds (model_file)
        seeds.append(str(fuzz_data[target]))
    res = subprocess.run([str(exe), f"-max_total_time={NATIVE_SECONDS}", "-print_final_stats=1",
                          f"-artifact_prefix={tmp_path}/", str(tmp_path), *seeds],
                         capture_output=True, text=True, env=native_env(fuzz_data), timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert executed(out) > 0, out[-2000:]


@pytest.mark.parametrize("target", PYTHON)
def test_python_target_finds_nothing_in_a_short_run(target, tmp_path):
    pytest.importorskip("atheris", reason="atheris is a test dependency (pip install '.[test]')")
    res = subprocess.run([sys.executable, "-m", "tests.fuzz.run_python", target, f"-runs={PYTHON_RUNS}", "-seed=1",
                          f"-artifact_prefix={tmp_path}/", str(tmp_path),
                          str(ROOT / "tests" / "fuzz" / "corpus" / target)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert executed(out) >= PYTHON_RUNS, out[-2000:]
