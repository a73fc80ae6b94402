"""T3 ms/token on the CPU under each way of threading ggml, on a quiet machine and under an
artificial load (processes burning cores), every setting in a process of its own,
alternating over rounds so that the machine's own load affects every setting alike.

Settings: ggml's thread pool (this tree's build; CBS_THREAD_POLL = how long a waiting
thread spins before it sleeps, in 10 us units) and, given --omp-tree (a PYTHONPATH root
whose engine_native was built with -DCBS_OPENMP=ON), OpenMP's PASSIVE and ACTIVE policies.

    PYTHONPATH=. python benchmarks/bench_threads.py MODEL.gguf [--omp-tree DIR] [--load 2]
        [--tokens 60] [--rounds 2] [--polls 0,5,20]

Check `uptime` before: "quiet" is only as quiet as the machine is.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(model: str, tokens: int, threads: int) -> None:
    import engine_native
    from engine_native.bench import StageWatch
    from engine_native.engine import Engine

    e = Engine(model, threads=threads)
    watch = StageWatch({"t3_prompt", "t3_steps"})
    with e.profile(watch):
        n = len(e.speech_tokens("The quick brown fox jumps over the lazy dog.", seed=0, max_tokens=tokens)[0])
    print(json.dumps({"ms_per_token": watch.ms["t3_steps"] / n, "prompt_ms": watch.ms["t3_prompt"],
                      "module": engine_native.__file__, "cpu": engine_native._core.system_info()["cpu_variant"]}))


def burners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--omp-tree", help="PYTHONPATH root of an engine_native built with -DCBS_OPENMP=ON")
    ap.add_argument("--load", type=int, default=2, help="processes burning a core each in the loaded phase")
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--polls", default="0,2,10", help="CBS_THREAD_POLL values for the thread pool")
    ap.add_argument("--omp-policies", default="PASSIVE,ACTIVE", help="OMP_WAIT_POLICY values for --omp-tree")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.model, a.tokens, a.threads)
        return 0

    here = os.environ.get("PYTHONPATH", str(ROOT))
    settings = {f"pool poll={p}": (here, {"CBS_THREAD_POLL": p}) for p in a.polls.split(",")}
    if a.omp_tree:
        # The tree's own ggml libraries before the build tree a module's RUNPATH may name.
        lib = {"LD_LIBRARY_PATH": str(Path(a.omp_tree) / "engine_native")}
        for pol in a.omp_policies.split(","):
            settings[f"omp {pol}"] = (a.omp_tree, {"OMP_WAIT_POLICY": pol, **lib})
    phases = ["quiet"] + ([f"load {a.load}"] if a.load > 0 else [])
    results = {(ph, k): [] for ph in phases for k in settings}
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for _ in range(a.rounds):
        for ph in phases:
            procs = burners(a.load) if ph != "quiet" else []
            try:
                for name, (path, env) in settings.items():
                    e = {k: v for k, v in os.environ.items()
                         if k not in ("OMP_WAIT_POLICY", "CBS_THREAD_POLL", "LD_LIBRARY_PATH")}
                    e.update(env, PYTHONPATH=path)
                    out = subprocess.run([sys.executable, __file__, a.model, "--child", "--tokens", str(a.tokens),
                                          "--threads", str(a.threads)], env=e, capture_output=True, text=True)
                    if out.returncode != 0:
                        print(out.stderr[-2000:], file=sys.stderr)
                        return 1
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    results[(ph, name)].append(r)
                    print(f"  {ph:<7} {name:<12} {r['ms_per_token']:7.1f} ms/token  prompt {r['prompt_ms']:6.0f} ms"
                          f"  ({Path(r['module']).parent.parent}, cpu module {r['cpu'] or 'single'})", flush=True)
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    for ph in phases:
        med = {k: sorted(r["ms_per_token"] for r in results[(ph, k)])[a.rounds // 2] for k in settings}
        print(f"median ms/token, {ph}: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
