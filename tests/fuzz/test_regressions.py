"""Every input a fuzzer once broke the engine with (tests/fuzz/regressions/TARGET/NAME; the
findings are listed in docs/FUZZING.md) is now refused cleanly:

- Python targets: the target itself, in this process (the refusal its module documents, no
  other exception), within PEAK_BYTES of Python allocations (tracemalloc): a file of a few
  hundred bytes must not make the reader allocate gigabytes before refusing it, and within
  SECONDS (the script inputs took minutes where a pattern backtracked quadratically).
- Native targets: the input through the regular engine_native._core in a child process (an
  abort or a crash there fails the test; an EngineError is the refusal), and through the
  sanitizer build's fuzz target where that is built (no ASan/UBSan report).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]
REGRESSIONS = Path(__file__).resolve().parent / "regressions"
INPUTS = sorted(p for p in REGRESSIONS.glob("*/*") if p.is_file())
BUILD = ROOT / "build" / "sanitize" / "engine_native"
PEAK_BYTES = 256 << 20
SECONDS = 30.0

# The regular engine's reading of a native target's input (exit 0: handled or refused).
NATIVE_CHECK = {
    "model_file": "from tests.fuzz.tiny_model import load_all\n"
                  "from engine_native.errors import EngineError\n"
                  "try:\n    load_all(__import__('pathlib').Path(sys.argv[1]))\nexcept EngineError:\n    pass\n",
    "punc_norm": "from engine_native import _core\n"
                 "t = open(sys.argv[1], 'rb').read().decode('utf-8', 'surrogateescape')\n"
                 "_core.punc_norm(t); _core.punc_norm_mtl(t)\n",
}


@pytest.mark.parametrize("path", INPUTS, ids=[f"{p.parent.name}/{p.name}" for p in INPUTS])
def test_a_former_finding_is_refused_cleanly(path):
    target = path.parent.name
    data = path.read_bytes()
    if target in TARGETS:
        tracemalloc.start()
        t0 = time.perf_counter()
        try:
            TARGETS[target](data)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        seconds = time.perf_counter() - t0
        assert peak < PEAK_BYTES, f"{peak / 2**20:.0f} MB allocated for a {len(data)}-byte input"
        assert seconds < SECONDS, f"{seconds:.0f} s for a {len(data)}-byte input"
        return
    ran = False
    if target in NATIVE_CHECK:
        res = subprocess.run([sys.executable, "-c", "import sys\n" + NATIVE_CHECK[target], str(path)], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        ran = True
    exe = BUILD / f"fuzz_{target}"
    if exe.exists():
        env = dict(os.environ, ASAN_OPTIONS="allocator_may_return_null=1", UBSAN_OPTIONS=f"halt_on_error=1:suppressions={ROOT}/engine_native/fuzz/ubsan.supp")
        res = subprocess.run([str(exe), str(path)], capture_output=True, text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        ran = True
    if not ran:
        pytest.skip(f"{target}: no regular-engine check and the sanitizer build is absent")
