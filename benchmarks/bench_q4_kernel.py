"""T3's Q4_0 kernel alone (cpu/q4_matmul.cpp): milliseconds per product of a weight streamed
from memory (as a decoding step reads T3's weights), for one activation column (Turbo's step)
and two (a guided Multilingual step's two rows: the kernel takes them one after the other over
each group of rows, the second finding the group's weights in the cache), and the read rate that
makes (the weight's bytes over the time), best of a few processes.

    .venv/bin/python benchmarks/bench_q4_kernel.py [--threads 2] [--rounds 3] [--mb 66]

Prints numbers, never assertions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

ONE_RUN = """
import json, sys, numpy as np
from engine_native import _core
threads, n, k = int(sys.argv[1]), int(sys.argv[2]), 1024
rng = np.random.default_rng(0)
w = rng.standard_normal((n, k)).astype(np.float32) * 0.05
out = {}
for m in (1, 2, 4):
    x = rng.standard_normal((m, k)).astype(np.float32)
    out[m] = min(_core.q4_kernel_ms(w, x, threads=threads, repeat=5) for _ in range(3))
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=float, default=66, help="the weight's size in MB (beyond the caches: the default)")
    args = ap.parse_args()
    n = max(8, int(args.mb * 1e6 / (1024 * 18 / 32)) // 8 * 8)
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        done = subprocess.run([sys.executable, "-c", ONE_RUN, str(args.threads), str(n)], capture_output=True, text=True,
                              check=True)
        for m, ms in json.loads(done.stdout.strip().splitlines()[-1]).items():
            best[m] = min(ms, best.get(m, ms))
    mb = n * 1024 * 18 / 32 / 1e6
    print(f"Q4_0 kernel, a {mb:.0f} MB weight [{n} x 1024], {args.threads} threads, best of {args.rounds} processes:")
    for m, ms in best.items():
        print(f"  {m} column(s): {ms:7.3f} ms per product ({mb / ms:.1f} GB/s of weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
