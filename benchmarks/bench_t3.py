"""T3 decoding speed, native vs the PyTorch reference, on the same random weights.

    .venv/bin/python benchmarks/bench_t3.py [--variant turbo] [--threads 2] [--tokens 50] [--rounds 3]

Prints ms/token for each quantisation and for the reference (measured in the same run,
same snapshot, same thread count, same prompt), and how many greedy tokens each
quantised model keeps identical to F32 over 100 tokens. Numbers, never assertions. On a
shared machine take more rounds (best of N) and compare builds in one sitting.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # for tests.* (the oracle), after site-packages

import numpy as np  # noqa: E402

import engine_native  # noqa: E402
import engine_native.debug  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402
from tests.reference.cache import snapshot_dir  # noqa: E402
from tests.reference.runner import run_stage  # noqa: E402


def native_ms_per_token(path: Path, text: list[int], tokens: int, threads: int, rounds: int) -> tuple[float, float]:
    """Best step and prompt times over `rounds`: the prompt is the stream's start, the steps are
    timed apart from it (a difference of two generations' times carried the prompt's noise,
    ~0.2 s on the shared machine, into every token's figure)."""
    model = engine_native.ModelFile(str(path), threads=threads)
    t3 = engine_native._core.T3(model)
    t3.generate(text, 2, 0, top_k=1)  # warm-up
    best_step, best_prompt = float("inf"), float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        stream = t3.stream(text, tokens + 2, 0, top_k=1)  # runs the prompt; room for `tokens` more steps
        t1 = time.perf_counter()
        first = stream.next(1)  # drawn from the prompt's logits, then its step (untimed)
        t2 = time.perf_counter()
        n = len(stream.next(tokens)) if first else 0  # a step each; fewer if the stop token comes first
        t_end = time.perf_counter()
        best_prompt = min(best_prompt, t1 - t0)
        if n:
            best_step = min(best_step, (t_end - t2) / n)
    return best_step * 1e3, best_prompt * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="turbo", choices=["turbo", "nano"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--quants", default="f32,f16,q8_0,q4_0")
    ap.add_argument("--rounds", type=int, default=3, help="best of this many timed generations per model")
    args = ap.parse_args()
    text = list(range(1000, 1020))
    quants = args.quants.split(",")

    print(f"T3 {args.variant}, {args.threads} threads, prompt = voice + {len(text)} text tokens, "
          f"{args.tokens} decoded tokens, best of {args.rounds}")
    greedy = {}
    for q in quants:
        path = model_path(args.variant, q)
        step, prompt = native_ms_per_token(path, text, args.tokens, args.threads, args.rounds)
        print(f"  native {q:<5} {step:7.1f} ms/token   prompt pass {prompt:7.0f} ms")
        greedy[q] = engine_native.debug.t3_generate(path, text, n=100)
    ref = run_stage("t3_bench", snapshot_dir(args.variant), text_ids=np.asarray(text, np.int32),
                    tokens=np.asarray(args.tokens), threads=np.asarray(args.threads))
    print(f"  reference (PyTorch) {float(ref['ms_per_token']):7.1f} ms/token   prompt pass "
          f"{float(ref['prompt_ms']):7.0f} ms")
    if "f32" in greedy:
        for q in quants:
            same = greedy[q] == greedy["f32"]
            n_same = int(np.argmin(same)) if not same.all() else len(same)
            print(f"  greedy tokens identical to f32: {q:<5} {n_same}/100")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
