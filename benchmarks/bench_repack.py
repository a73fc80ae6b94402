"""T3 with its quantised weights in the CPU's repack buffer (the default) against the plain
buffer (CBS_CPU_REPACK=0): ms/token, prompt time, and what the repacked kernels change in
the numbers: teacher-forced logits (rel and max_abs against the F32 model, and between
the two), and how many greedy tokens agree over 100. Each setting runs in a process of its
own, alternating over rounds (the variable is read once per process).

    PYTHONPATH=. python benchmarks/bench_repack.py [--variant turbo] [--quant q4_0] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # for tests.helpers.models, after site-packages

import numpy as np  # noqa: E402

TEXT = list(range(1000, 1040))
START_SPEECH = 6561


def child(variant: str, quant: str, tokens: int, threads: int, out: str) -> None:
    import engine_native
    import engine_native.debug as debug
    from tests.helpers.models import model_path

    rng = np.random.default_rng(3)
    speech = np.r_[START_SPEECH, rng.integers(0, 6561, 39)].astype(np.int32)
    logits = debug.t3_logits(model_path(variant, quant), TEXT, speech)
    model = engine_native.ModelFile(str(model_path(variant, quant)), threads=threads)
    t3 = engine_native._core.T3(model)
    t3.generate(TEXT, 2, 0, top_k=1)  # warm-up
    t0 = time.perf_counter()
    t3.generate(TEXT, 1, 0, top_k=1)
    t1 = time.perf_counter()
    greedy = t3.generate(TEXT, tokens + 1, 0, top_k=1)
    t2 = time.perf_counter()
    n = max(len(greedy) - 1, 1)
    np.save(out, logits)
    print(json.dumps({"ms_per_token": ((t2 - t1) - (t1 - t0)) * 1e3 / n, "prompt_ms": (t1 - t0) * 1e3,
                      "greedy": list(map(int, greedy))}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="turbo")
    ap.add_argument("--quant", default="q4_0")
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.variant, a.quant, a.tokens, a.threads, a.child)
        return 0
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    runs = [("f32 plain", "f32", "0")] + [(f"{a.quant} {n}", a.quant, r) for n, r in (("plain", "0"), ("repack", "1"))]
    res: dict[str, list[dict]] = {name: [] for name, _, _ in runs}
    logits: dict[str, np.ndarray] = {}
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for rnd in range(a.rounds):
        for name, quant, repack in runs:
            if rnd and quant == "f32":
                continue  # the reference's numbers need one run
            out = tmp / f"{name.replace(' ', '_')}.npy"
            env = dict(os.environ, CBS_CPU_REPACK=repack)
            p = subprocess.run([sys.executable, __file__, "--variant", a.variant, "--quant", quant, "--tokens",
                                str(a.tokens), "--threads", str(a.threads), "--child", str(out)],
                               env=env, capture_output=True, text=True)
            if p.returncode != 0:
                print(p.stderr[-2000:], file=sys.stderr)
                return 1
            r = json.loads(p.stdout.strip().splitlines()[-1])
            res[name].append(r)
            logits[name] = np.load(out)
            print(f"  {name:<14} {r['ms_per_token']:6.1f} ms/token  prompt {r['prompt_ms']:6.0f} ms", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    ref = logits["f32 plain"]
    for name in logits:
        d = logits[name] - ref
        same = sum(x == y for x, y in zip(res[name][0]["greedy"], res["f32 plain"][0]["greedy"]))
        print(f"{name:<14} logits vs f32: rel {np.linalg.norm(d) / np.linalg.norm(ref):.3e} max_abs "
              f"{np.abs(d).max():.3e}; greedy tokens equal to f32: {same}/{len(res[name][0]['greedy'])}; "
              f"median ms/token {sorted(r['ms_per_token'] for r in res[name])[len(res[name]) // 2]:.1f}")
    a_, b_ = logits[f"{a.quant} repack"], logits[f"{a.quant} plain"]
    same = sum(x == y for x, y in zip(res[f"{a.quant} repack"][0]["greedy"], res[f"{a.quant} plain"][0]["greedy"]))
    print(f"repack vs plain {a.quant}: logits rel {np.linalg.norm(a_ - b_) / np.linalg.norm(b_):.3e} max_abs "
          f"{np.abs(a_ - b_).max():.3e}; greedy tokens equal {same}/{len(res[f'{a.quant} plain'][0]['greedy'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
