"""A quantised model's fast mode against its exact mode, both models: how far the S3Gen mel
moves (rel, max_abs) and what that does to the sound (the log-mel distance of the HiFT
waveforms: the mean absolute difference of S3Gen's own 80-band natural-log mel over the
sentence), for a short, a medium and a long sentence's speech tokens, with each mode's S3Gen
seconds beside them.

Modes, each in a process of its own (the engine reads its switches once): "fast" (the CPU's
best: AMX tiles, else int16), "fast-avx2" (the int16 products' AVX2 form, as every AVX2 CPU
runs them: CBS_AMX=0 CBS_VNNI=avx2), "exact" (OpenBLAS's f32 sgemm: CBS_AMX=0 CBS_VNNI=0), and
"exact-avx2" (OpenBLAS's Haswell kernels, an AVX2 CPU's exact mode); every difference is
taken against "exact".
The same speech tokens, initial noise and HiFT noise in every mode, so the only difference is
the products'. The yardstick: two exact waveforms from one mel with two HiFT noise draws
(what resampling the excitation alone changes).

    PYTHONPATH=. python benchmarks/bench_fast_vs_exact.py [--models turbo mtl] [--tokens 25 100 250]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

MODES = {"fast": {}, "exact": {"CBS_AMX": "0", "CBS_VNNI": "0"},
         "fast-avx2": {"CBS_AMX": "0", "CBS_VNNI": "avx2", "CBS_OPENBLAS_CORETYPE": "Haswell"},
         "exact-avx2": {"CBS_AMX": "0", "CBS_VNNI": "0", "CBS_OPENBLAS_CORETYPE": "Haswell"}}

CHILD = r"""
import sys, time, numpy as np
from engine_native import debug
model, out, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
lengths = [int(n) for n in sys.argv[4].split(",")]
mf = debug._component(model, "ModelFile")
mf.set_threads(threads)
n_prompt = int(mf.tensor_f32("voice.prompt_token").size)
res = {}
for n in lengths:
    rng = np.random.default_rng(n)
    speech = rng.integers(0, 6561, n).astype(np.int32)
    x0 = rng.standard_normal((80, 2 * (n_prompt + n)), dtype=np.float32)
    debug.s3gen_mel(model, speech[:5], None, x0[:, :2 * (n_prompt + 5)])  # warm: the first graph's buffers
    t = time.perf_counter()
    mel = debug.s3gen_mel(model, speech, None, x0)
    res[f"s3gen_s_{n}"] = time.perf_counter() - t
    res[f"mel_{n}"] = mel
    res[f"wav_{n}"] = debug.hift_inference(model, mel, seed=1)
    res[f"wav2_{n}"] = debug.hift_inference(model, mel, seed=2)
np.savez(out, **res)
"""


def run_mode(model: Path, mode: str, lengths: list[int], threads: int, folder: Path) -> dict:
    out = folder / f"{model.stem}-{mode}.npz"
    env = dict(os.environ, **MODES[mode])
    res = subprocess.run([sys.executable, "-c", CHILD, str(model), str(out), str(threads), ",".join(map(str, lengths))],
                         env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{mode} on {model.name} failed: {res.stderr[-2000:]}")
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def log_mel_distance(model: Path, a: np.ndarray, b: np.ndarray) -> float:
    from engine_native import debug

    ma, mb = debug.mel_24k(model, a), debug.mel_24k(model, b)
    n = min(len(ma), len(mb))
    return float(np.mean(np.abs(ma[:n] - mb[:n])))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["turbo", "mtl"])
    ap.add_argument("--tokens", nargs="+", type=int, default=[25, 100, 250],
                    help="speech tokens of the short, medium and long sentence (25 a second)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    args = ap.parse_args(argv)
    from engine_native import system_info
    from tests.helpers.models import model_path

    s = system_info()
    print(f"CPU {s['devices'][0]['description']}: {' '.join(s['cpu_features'])}; {args.threads} threads")
    with tempfile.TemporaryDirectory(prefix="cbs-fast-") as td:
        for variant in args.models:
            model = model_path(variant, "q4_0")
            runs = {mode: run_mode(model, mode, args.tokens, args.threads, Path(td)) for mode in args.modes}
            exact = runs["exact"]
            print(f"\n{variant} q4_0 (S3Gen: encoder + CFM; HiFT on each mel, the same noise)")
            print(f"  {'tokens':>6} {'mode':<10} {'S3Gen s':>8} {'mel rel':>9} {'max_abs':>9} {'wav rel':>9} "
                  f"{'log-mel':>9} {'HiFT noise':>10}")
            for n in args.tokens:
                noise = log_mel_distance(model, exact[f"wav_{n}"], exact[f"wav2_{n}"])
                for mode, r in runs.items():
                    mel, wav = r[f"mel_{n}"], r[f"wav_{n}"]
                    rel = np.linalg.norm(mel - exact[f"mel_{n}"]) / np.linalg.norm(exact[f"mel_{n}"])
                    wrel = np.linalg.norm(wav - exact[f"wav_{n}"]) / np.linalg.norm(exact[f"wav_{n}"])
                    print(f"  {n:>6} {mode:<10} {r[f's3gen_s_{n}']:>8.2f} {rel:>9.2e} "
                          f"{np.abs(mel - exact[f'mel_{n}']).max():>9.2e} {wrel:>9.2e} "
                          f"{log_mel_distance(model, wav, exact[f'wav_{n}']):>9.2e} {noise:>10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
