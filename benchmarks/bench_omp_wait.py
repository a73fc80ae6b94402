"""T3 ms/token under OpenMP's wait policies: PASSIVE (threads sleep between graph nodes; the
engine's default), ACTIVE (they spin forever) and bounded spinning (GOMP_SPINCOUNT=N: spin
N iterations, then sleep), each in a process of its own, alternating over rounds so that a
machine's load affects every setting alike.

    PYTHONPATH=. python benchmarks/bench_omp_wait.py MODEL.gguf [--tokens 60] [--rounds 2]

Only meaningful for a build with -DCBS_OPENMP=ON: the default build threads through ggml's
own pool, which these variables do not touch (benchmarks/bench_threads.py compares both).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SETTINGS = {
    "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
    "spin 100k": {"GOMP_SPINCOUNT": "100000"},
    "spin 1M": {"GOMP_SPINCOUNT": "1000000"},
}


def child(model: str, tokens: int, threads: int) -> None:
    import engine_native  # sets OMP_WAIT_POLICY=PASSIVE when unset ...

    if os.environ.get("CBS_BENCH_UNSET_POLICY"):
        del os.environ["OMP_WAIT_POLICY"]  # ... undone before libgomp loads (with the CPU backend)
    from engine_native import _core
    from engine_native.bench import StageWatch
    from engine_native.engine import Engine

    e = Engine(model, threads=threads)
    watch = StageWatch({"t3_steps"})
    with e.profile(watch):
        n = len(e.speech_tokens("The quick brown fox jumps over the lazy dog.", seed=0, max_tokens=tokens)[0])
    print(json.dumps({"ms_per_token": watch.ms["t3_steps"] / n}))
    del _core


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.model, a.tokens, a.threads)
        return 0
    results = {k: [] for k in SETTINGS}
    for _ in range(a.rounds):
        for name, env in SETTINGS.items():
            e = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
            e.update(env)
            if "OMP_WAIT_POLICY" not in env:
                e["CBS_BENCH_UNSET_POLICY"] = "1"
                e["OMP_WAIT_POLICY"] = "PASSIVE"  # placeholder the child removes
            out = subprocess.run([sys.executable, __file__, a.model, "--child", "--tokens", str(a.tokens),
                                  "--threads", str(a.threads)], env=e, capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1])["ms_per_token"])
            print(f"  {name:<10} {results[name][-1]:6.1f} ms/token", flush=True)
    print("median ms/token: " + ", ".join(f"{k} {sorted(v)[len(v) // 2]:.1f}" for k, v in results.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
