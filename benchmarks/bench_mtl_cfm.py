"""The Multilingual standard CFM's speed (10 Euler steps, classifier-free guidance inside):
native with the guidance rows as one batch-of-two evaluation vs two evaluations per step,
beside the PyTorch reference on the same weights.

    .venv/bin/python benchmarks/bench_mtl_cfm.py [--tokens 50] [--threads 2] [--size small|full]

Fixed workload: `--tokens` random speech tokens after the built-in voice's 250 prompt tokens
(S3Gen is the real size in both snapshot sizes). Best of `--repeat` warm runs each; the
reference is measured in the same run with torch.set_num_threads(threads). Prints numbers,
asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.* (the oracle), after site-packages

import numpy as np  # noqa: E402

from engine_native import _core  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402
from tests.reference.cache import snapshot_dir  # noqa: E402
from tests.reference.runner import run_stage  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", default="small", choices=("small", "full"))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-reference", action="store_true")
    args = ap.parse_args()
    speech = np.random.default_rng(0).integers(0, 6561, args.tokens).astype(np.int32)
    mf = _core.ModelFile(str(model_path("mtl", size=args.size)), "cpu", args.threads)
    enc, cfm = _core.S3GenEncoder(mf), _core.S3GenCfm(mf)
    prompt = mf.tensor_f32("voice.prompt_token").astype(np.int32)
    mu = enc.encode(np.concatenate([prompt, speech]).tolist())
    feat, emb = mf.tensor_f32("voice.prompt_feat").reshape(-1, mu.shape[0]), mf.tensor_f32("voice.embedding")
    x0 = np.random.default_rng(1).standard_normal(mu.shape, dtype=np.float32)
    print(f"MTL CFM ({args.size}, F32): {args.tokens} speech tokens after {prompt.size} prompt tokens "
          f"({mu.shape[1]} frames), {args.steps} steps, {args.threads} threads, best of {args.repeat}")
    # Wall time and this process's CPU time (all threads): on a shared machine the CPU time
    # is the steadier measure of the work.
    best = {False: [float("inf")] * 2, True: [float("inf")] * 2}
    for _ in range(args.repeat):       # interleaved, so that load changes hit both alike
        for batched in best:
            cfm.guidance_batched = batched
            t0, c0 = time.perf_counter(), time.process_time()
            cfm.sample(mu, feat, emb, x0, args.steps)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            best[batched] = [min(best[batched][0], wall), min(best[batched][1], cpu)]
    (w2, c2), (w1, c1) = best[False], best[True]
    print(f"  native two evaluations per step  {w2 * 1e3:8.0f} ms wall  {c2 * 1e3:8.0f} ms CPU")
    print(f"  native one batch of two per step {w1 * 1e3:8.0f} ms wall  {c1 * 1e3:8.0f} ms CPU   "
          f"(batch / two: wall {w1 / w2:.2f}x, CPU {c1 / c2:.2f}x)")
    if not args.no_reference:
        ref = run_stage("mtl_cfm_bench", snapshot_dir("mtl", size=args.size), speech_ids=speech,
                        threads=np.asarray(args.threads), repeat=np.asarray(args.repeat),
                        n_steps=np.asarray(args.steps))
        print(f"  reference (batch of two)         {float(ref['cfm_ms']):8.0f} ms wall  "
              f"{float(ref['cfm_cpu_ms']):8.0f} ms CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
