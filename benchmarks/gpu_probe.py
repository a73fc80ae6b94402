"""Per-stage device timings the full bench does not split out (the device tool's run):
T3 ms/token (greedy and with the default sampler), HiFT on the device (f0 + excitation +
decode) against the CPU kernels, 500 mel frames (10 s). Prints numbers, asserts nothing.

    python benchmarks/gpu_probe.py MODEL.gguf cuda:0
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from engine_native import _core


def t3_ms_per_token(t3, text, n=101, **kw) -> float:
    t3.generate(text, 2, 0, **kw)
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        t3.generate(text, 1, 0, **kw)
        t1 = time.perf_counter()
        got = len(t3.generate(text, n, 0, **kw)) - 1
        t2 = time.perf_counter()
        best = min(best, ((t2 - t1) - (t1 - t0)) / max(got, 1))
    return best * 1e3


def median_ms(f, reps=5) -> float:
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def main() -> None:
    path, dev = sys.argv[1], sys.argv[2]
    mf = _core.ModelFile(path, device=dev)
    t3 = _core.T3(mf)
    text = list(range(1000, 1040))
    print(f"probe {path} on {dev}")
    print(f"  T3 ms/token greedy          {t3_ms_per_token(t3, text, top_k=1):7.2f}")
    print(f"  T3 ms/token default sampler {t3_ms_per_token(t3, text):7.2f}")
    mel = np.random.default_rng(0).standard_normal((80, 500), dtype=np.float32) * 0.5 - 5
    h, ref = _core.HiFT(mf), _core.HiFT(mf, on_device=False)
    f0 = ref.f0(mel)
    src = ref.excitation_continue(f0, ref.source_state(0))
    for name, x in (("device " + h.device, h), ("CPU kernels", ref)):
        print(f"  HiFT {name:22s} f0 {median_ms(lambda x=x: x.f0(mel)):7.1f} ms  decode {median_ms(lambda x=x: x.decode(mel, src)):7.1f} ms"
              f"  inference {median_ms(lambda x=x: x.inference(mel, 0)):7.1f} ms")
    d, r = h.decode(mel, src), ref.decode(mel, src)
    print(f"  HiFT decode 500 frames, device vs CPU kernels: rel {np.linalg.norm(d - r) / np.linalg.norm(r):.2e}, "
          f"max_abs {np.abs(d - r).max():.2e}")


if __name__ == "__main__":
    main()
