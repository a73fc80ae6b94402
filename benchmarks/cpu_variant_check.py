"""Which CPU backend a build loads on an older x86-64 CPU, and that it computes the same there.

    python benchmarks/cpu_variant_check.py ENGINE_PARENT [MODEL.gguf]

ENGINE_PARENT: the folder that holds `engine_native/` with its modules (an unpacked wheel, or
a tree with the built `_core`, `libggml*.so` and `libggml-cpu-<variant>.so` copied in). For
the host and each CPU model in CPUS, a child Python runs under `qemu-x86_64 -cpu MODEL`
(qemu-user emulates that CPU's instruction set and its CPUID), imports the engine, prints
the CPU variant it loaded (the best-scoring module for the CPUID it sees) and computes T3's
logits for a short prompt on MODEL.gguf (default: the cached random Turbo of the tests); the
logits are compared with the host's own run. A module the emulated CPU cannot execute would
die there with SIGILL, so a run that completes with close logits shows the variant chosen
really runs on that CPU. Needs qemu-user (Debian: `apt-get install qemu-user`; a tool of
this check only, never shipped). Slow: minutes per CPU model (emulation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# qemu CPU model -> what it has (qemu 7.2's TCG emulates up to AVX2/FMA/F16C, no AVX-512).
CPUS = [("Nehalem", "SSE4.2, no AVX"), ("SandyBridge", "AVX, no AVX2"), ("Haswell", "AVX2, FMA, F16C, BMI2")]

CHILD = r"""
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from engine_native import _core
s = _core.system_info()
mf = _core.ModelFile(sys.argv[2], device="cpu")
t3 = _core.T3(mf)
text = list(range(1000, 1012))
speech = [mf.get_int("chatterbox.t3.start_speech_token")] + list(range(100, 110))
logits = t3.logits(text, speech)
np.save(sys.argv[3], np.asarray(logits, np.float32))
print(json.dumps({"variant": s["cpu_variant"], "dir": s["backend_dir"]}))
"""


def run(prefix: list[str], parent: str, model: str, out: str) -> dict:
    # A build tree's modules carry the build folder as RUNPATH: the copies beside _core come first.
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(parent) / "engine_native"))
    r = subprocess.run([*prefix, sys.executable, "-c", CHILD, parent, model, out],
                       capture_output=True, text=True, timeout=3600, env=env)
    if r.returncode != 0:
        return {"error": f"exit {r.returncode}: {r.stderr.strip()[-600:]}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    parent = str(Path(sys.argv[1]).resolve())
    if len(sys.argv) > 2:
        model = sys.argv[2]
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.helpers.models import model_path
        model = str(model_path("turbo", "f32"))
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    import numpy as np

    host = run([], parent, model, str(tmp / "cbs-variant-host.npy"))
    print(f"host: variant {host.get('variant')} from {host.get('dir')} {host.get('error', '')}")
    ref = np.load(tmp / "cbs-variant-host.npy")
    for cpu, what in CPUS:
        out = tmp / f"cbs-variant-{cpu}.npy"
        got = run(["qemu-x86_64", "-cpu", cpu], parent, model, str(out))
        if "error" in got:
            print(f"{cpu:12s} ({what}): FAILED {got['error'][-300:]}")
            continue
        a = np.load(out)
        rel = float(np.linalg.norm(a - ref) / np.linalg.norm(ref))
        print(f"{cpu:12s} ({what}): variant {got['variant']:<12s} logits {a.shape} rel to the host {rel:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
