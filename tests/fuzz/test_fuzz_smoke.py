"""CI's short run of every fuzz target (docs/FUZZING.md): each native libFuzzer target for a
few seconds on its corpus (where the sanitizer build exists), each native target's entry
points on the regular engine with mutated seeds (everywhere: CI has no clang), each Python
target for a few hundred atheris inputs. A finding fails the test with the fuzzer's report. The campaigns
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


# Each native target's entry points on the regular engine (what its fuzz_*.cpp calls), in a
# child process so that a crash fails the test; argv: target, data folder, seed files...
_REGULAR = r"""
import random, sys, tempfile
from pathlib import Path
from engine_native import _core
from engine_native.errors import EngineError
from tests.fuzz.tiny_model import load_all

target, data = sys.argv[1], Path(sys.argv[2])
seeds = [Path(p).read_bytes() for p in sys.argv[3:]]
rng = random.Random(1)
if target == "bpe":
    tok = _core.Gpt2Tokenizer(str(data / "bpe.gguf"))
elif target == "grapheme":
    tok = _core.GraphemeTokenizer(str(data / "grapheme.gguf"))
    langs = ["", "en", "fr", "ja", "zh", "zZ"]
scratch = Path(tempfile.mkdtemp()) / "input.gguf"

def mutate(b):
    b = bytearray(b)
    for _ in range(rng.randint(1, 4)):
        k = rng.randrange(3)
        if k == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif k == 1 and b:
            del b[rng.randrange(len(b)):]
        else:
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(b)

n = 0
for i in range(RUNS):
    data_in = seeds[i % len(seeds)] if i < len(seeds) else mutate(rng.choice(seeds))
    text = data_in.decode("utf-8", "replace")  # the engine passes these functions Python text
    if target == "model_file":
        scratch.write_bytes(data_in)
        try:
            load_all(scratch)
        except EngineError:
            pass
    elif target == "punc_norm":
        _core.punc_norm(text); _core.punc_norm_mtl(text)
    elif target == "bpe":
        ids = tok.encode(text)
        tok.decode(ids)
    else:
        try:
            lang = langs[i % len(langs)]
            tok.encode(tok.normalize(text, lang), lang)
        except EngineError:
            pass
    n += 1
print("executed", n)
"""
REGULAR_RUNS = {"model_file": 60, "punc_norm": 2000, "bpe": 2000, "grapheme": 2000}


@pytest.mark.parametrize("target", NATIVE)
def test_native_target_entry_points_survive_mutated_seeds_on_the_regular_engine(target, fuzz_data):
    seeds = sorted(p for p in (ROOT / "tests" / "fuzz" / "corpus" / target).glob("*") if p.is_file())
    if target == "model_file":
        seeds += sorted(fuzz_data["model_file"].glob("*.gguf"))
    assert seeds, target
    data = fuzz_data["bpe"].parent
    code = _REGULAR.replace("RUNS", str(REGULAR_RUNS[target]))
    res = subprocess.run([sys.executable, "-c", code, target, str(data), *map(str, seeds)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"executed {REGULAR_RUNS[target]}" in res.stdout, res.stdout[-2000:]


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
