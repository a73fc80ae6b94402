"""S3Gen encoder + CFM speed, peak RSS and mel drift for the ways a quantised model's S3Gen
matrices can be served, each in a fresh process, interleaved round by round in one run.

    .venv/bin/python benchmarks/bench_s3gen_quant.py [--tokens 250] [--rounds 3]
        [--baseline DIR] [--quants q4_0,f16,f32] [--fast] [--int16 avx2,avxvnni] [--cpu avx2]
        [--variant turbo|mtl]

Configurations (per quant in --quants, with this tree's engine_native):
  <quant> OpenBLAS     CBS_BLAS_QUANT=1 (default): S3Gen's quantised/f16 weights converted to
                       f32 row panels inside the product, then OpenBLAS sgemm
  <quant> ggml kernel  CBS_BLAS_QUANT=0: ggml's own quantised kernel (quantised quants only)
  baseline <quant>     --baseline DIR: DIR/engine_native (e.g. main's build) on the same file
  <quant> fast         --fast: the engine's default for a quantised model (AMX tiles, else
                       int16 products; the rows above then run with CBS_AMX=0 CBS_VNNI=0)
  <quant> int16 <form> --int16 FORMS: the int16 products in that form (CBS_AMX=0
                       CBS_VNNI=<form>: avx512, avx2, avxvnni; the rows above as with --fast)
`--variant mtl` times the Multilingual model's guided CFM (10 steps, two rows) instead of
Turbo's meanflow one.
`--cpu avx2` runs every process with `bench --cpu avx2`'s switches (the AVX2 kernels: int16
products in their AVX2 form, OpenBLAS's Haswell sgemm) on any x86-64 host.
Fixed workload as bench_s3gen.py: `--tokens` random speech tokens after the built-in voice's
prompt, 2 meanflow steps, `--threads` threads, the same x0. Each process loads the model, runs
one warm-up and one timed synthesis; the table gives the best and median over rounds of wall
and CPU seconds, the process's peak RSS, and the mel's rel (L2) / max_abs against this tree's
F32 model and, for the fast rows, against the same quant's OpenBLAS row. Prints numbers,
asserts nothing; on a loaded machine compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(model: str, tokens: int, threads: int, mel_out: str) -> None:
    import numpy as np

    from engine_native import Engine

    speech = np.random.default_rng(0).integers(0, 6561, tokens).astype(np.int32)
    e = Engine(model, threads=threads)
    v = e.builtin_voice
    ids = np.concatenate([v.prompt_token, speech]).tolist()
    for _ in range(2):  # the first warms up (first touch of weights, allocators)
        w0, c0 = time.perf_counter(), time.process_time()
        mu = e.stages.flow.token_encoder.encode(ids)
        w1, c1 = time.perf_counter(), time.process_time()
        x0 = np.random.default_rng(0).standard_normal(mu.shape, dtype=np.float32)
        mel = e.stages.flow.cfm.sample(mu, v.prompt_feat, v.embedding, x0)
        w2, c2 = time.perf_counter(), time.process_time()
    np.save(mel_out, mel)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"enc": w1 - w0, "cfm": w2 - w1, "cpu": (c2 - c0), "rss": rss, "engine": e.__module__}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quants", default="q4_0,f16,f32")
    ap.add_argument("--baseline", help="a directory holding another build's engine_native package")
    ap.add_argument("--fast", action="store_true", help="add each quant's fast products (AMX or int16)")
    ap.add_argument("--int16", default="", help="int16 forms to add, e.g. avx2,avxvnni")
    ap.add_argument("--cpu", choices=("native", "avx2"), default="native")
    ap.add_argument("--variant", choices=("turbo", "mtl"), default="turbo")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.tokens, args.threads, args.worker[1])
        return 0

    sys.path.append(str(ROOT))
    from tests.helpers.models import model_path

    import numpy as np

    from app.cli.bench import AVX2_ENV

    base = dict(AVX2_ENV) if args.cpu == "avx2" else {}
    forms = [f for f in args.int16.split(",") if f]
    exact = {**base, "CBS_AMX": "0", "CBS_VNNI": "0"} if args.fast or forms else base
    configs = []  # (name, PYTHONPATH, environment, model)
    for q in args.quants.split(","):
        path = str(model_path(args.variant, q))
        if args.baseline:
            configs.append((f"baseline {q}", args.baseline, {**exact, "CBS_BLAS_QUANT": "1"}, path))
        if q not in ("f32", "f16"):
            configs.append((f"{q} ggml kernel", str(ROOT), {**exact, "CBS_BLAS_QUANT": "0"}, path))
        configs.append((f"{q} OpenBLAS" if q != "f32" else "f32", str(ROOT), {**exact, "CBS_BLAS_QUANT": "1"}, path))
        if args.fast and q != "f32":
            configs.append((f"{q} fast", str(ROOT), {**base, "CBS_BLAS_QUANT": "1"}, path))
        for form in forms if q != "f32" else []:
            configs.append((f"{q} int16 {form}", str(ROOT),
                            {**base, "CBS_AMX": "0", "CBS_VNNI": "" if form == "avx512" else form}, path))
    res: dict[str, list] = {c[0]: [] for c in configs}
    mels = {}
    tmp = Path(tempfile.mkdtemp())
    for r in range(args.rounds):
        for name, pypath, switches, model in configs:
            out = tmp / f"{len(mels)}.npy"
            env = dict(os.environ, PYTHONPATH=pypath, **switches)
            p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--tokens", str(args.tokens),
                                "--threads", str(args.threads), "--worker", model, str(out)],
                               env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
            if p.returncode:
                raise SystemExit(f"{name}: {p.stderr[-2000:]}")
            res[name].append(json.loads(p.stdout.strip().splitlines()[-1]))
            mels[name] = np.load(out)
            print(f"round {r} {name}: {res[name][-1]}", flush=True)
    ref = mels["f32"] if "f32" in mels else None
    print(f"\nS3Gen {args.variant} encoder + CFM, {args.tokens} speech tokens after the voice's prompt, {args.threads} threads, "
          f"{args.rounds} interleaved rounds, a process each (seconds best / median; peak RSS of the process)"
          f"{'; forced AVX2 (--cpu avx2)' if args.cpu == 'avx2' else ''}")
    for name, _, _, model in configs:
        t = res[name]
        wall = [x["enc"] + x["cfm"] for x in t]
        cpu = [x["cpu"] for x in t]
        line = (f"  {name:<18} enc {min(x['enc'] for x in t):5.2f}  cfm {min(x['cfm'] for x in t):5.2f}  "
                f"wall {min(wall):5.2f} / {statistics.median(wall):5.2f}  cpu {min(cpu):5.2f} / {statistics.median(cpu):5.2f}  "
                f"RSS {max(x['rss'] for x in t):5.0f} MiB  file {Path(model).stat().st_size / 2**20:5.0f} MiB")
        if ref is not None:
            d = mels[name] - ref
            line += f"  mel vs f32 rel {np.linalg.norm(d) / np.linalg.norm(ref):.2e} max_abs {np.abs(d).max():.2e}"
        q = name.split()[0]
        exact_row = mels.get(f"{q} OpenBLAS") if name.endswith(" fast") or " int16 " in name else None
        if exact_row is not None:
            d = mels[name] - exact_row
            line += f"  vs OpenBLAS rel {np.linalg.norm(d) / np.linalg.norm(exact_row):.2e} max_abs {np.abs(d).max():.2e}"
        print(line)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
