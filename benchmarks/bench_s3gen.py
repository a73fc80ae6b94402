"""S3Gen speed (encoder, CFM, HiFT) native vs the PyTorch reference on the same weights.

    .venv/bin/python benchmarks/bench_s3gen.py [--tokens 250] [--threads 2] [--quants f32,q4_0]

Fixed workload: `--tokens` random speech tokens after the built-in voice's 250 prompt
tokens (250 tokens = 10 s of audio), 2 meanflow steps. Best of 3 warm runs each,
reference measured in the same run with torch.set_num_threads(threads). Prints numbers,
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.* (the oracle), after site-packages

import numpy as np  # noqa: E402

from engine_native import Engine  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402
from tests.reference.cache import snapshot_dir  # noqa: E402
from tests.reference.runner import run_stage  # noqa: E402


def best_of(n, fn):
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quants", default="f32,f16,q8_0,q4_0")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    speech = np.random.default_rng(0).integers(0, 6561, args.tokens).astype(np.int32)
    import engine_native

    blas = "OpenBLAS" if engine_native.system_info().get("blas") else "ggml's kernels"
    print(f"S3Gen Turbo: {args.tokens} speech tokens ({args.tokens * 0.04:.2f} s of audio) after the voice's prompt, "
          f"{args.threads} threads, best of {args.repeat}; the CPU's f32 products on {blas}")
    for q in args.quants.split(","):
        e = Engine(model_path("turbo", q), threads=args.threads)
        v = e.builtin_voice
        tokens = np.concatenate([v.prompt_token, speech]).tolist()
        enc_ms, mu = best_of(args.repeat, lambda: e.stages.flow.token_encoder.encode(tokens))
        x0 = np.random.default_rng(0).standard_normal(mu.shape, dtype=np.float32)
        cfm_ms, mel = best_of(args.repeat, lambda: e.stages.flow.cfm.sample(mu, v.prompt_feat, v.embedding, x0))
        hift_ms, _ = best_of(args.repeat, lambda: e.stages.vocoder.hift.inference(mel, 0))
        print(f"  native {q:<5} encoder {enc_ms:7.0f} ms   CFM {cfm_ms:7.0f} ms   HiFT {hift_ms:7.0f} ms")
    ref = run_stage("s3gen_bench", snapshot_dir("turbo"), speech_ids=speech, threads=np.asarray(args.threads),
                    repeat=np.asarray(args.repeat))
    print(f"  reference    encoder {float(ref['encoder_ms']):7.0f} ms   CFM {float(ref['cfm_ms']):7.0f} ms   "
          f"HiFT {float(ref['hift_ms']):7.0f} ms")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
