"""A script rendered locally and through a local Ray cluster; equality, a killed worker, overhead.

    .venv/bin/python benchmarks/cluster_render.py [--model M.gguf] [--sentences 40] [--max-tokens 12]
        [--workers 2] [--no-kill] [--out DIR]

Starts a real cluster on 127.0.0.1 (a head without CPUs and `--workers` worker nodes of one CPU
each: tests/helpers/ray_cluster.py), then runs the real command line three times on the same
text, voice (the model's own) and seed:

1. `say -f SCRIPT -o local.wav --threads W` (the local render on the same W cores);
2. `say ... --cluster ADDRESS --workers W --threads 1` -> cluster.wav;
3. the same again, and once a few pieces are done, SIGKILL of one worker process (its pid
   from the command's own log) -> killed.wav; the command's summary says how many pieces
   were sent again.

It prints whether each output equals the local one sample for sample (np.array_equal on the
decoded float32 WAV), the wall times (cluster vs local: the scheduler's price on the same
cores), and the cluster's per-piece dispatch and return latencies (medians, from the command's
summary line). Benchmarks print numbers, never assert; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("The lighthouse keeper counted the ships that passed before the storm came in",
         "A small bell rang twice in the empty hall",
         "Nobody expected the river to rise so quickly that spring",
         "She folded the map and put it back in her coat",
         "The train was late again, and the platform was cold")


# The scheduler's floor: an empty actor call's round trip from a driver (a worker node's actor).
PING = """
import statistics, sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
@ray.remote(num_cpus=1)
class Echo:
    def ping(self, x=None):
        return x
a = Echo.remote()
ray.get(a.ping.remote())
times = []
for _ in range(200):
    t = time.perf_counter(); ray.get(a.ping.remote()); times.append(time.perf_counter() - t)
blob = b"x" * (24000 * 4 * 5)      # a 5-second piece of float32 audio
t = time.perf_counter(); [ray.get(a.ping.remote(blob)) for _ in range(20)]; big = (time.perf_counter() - t) / 20
print(f"empty actor call round trip median {1000 * statistics.median(times):.2f} ms, p90 "
      f"{1000 * sorted(times)[179]:.2f} ms; with a 5 s piece of audio there and back {1000 * big:.2f} ms")
"""


def script(sentences: int) -> str:
    lines, para = [], []
    for i in range(sentences):
        para.append(f"{WORDS[i % len(WORDS)]}, number {i + 1}.")
        if len(para) == 4:
            lines.append(" ".join(para))
            para = []
    if para:
        lines.append(" ".join(para))
    return "\n\n".join(lines) + "\n"


def say(args, text_file: str, out: str, extra: list[str], env: dict, kill_after: int | None = None):
    cmd = [sys.executable, "-m", "app", "say", "-f", text_file, "-o", out, "-m", args.model, "--seed", "11",
           "--max-tokens", str(args.max_tokens), "--progress", "lines", *extra]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    pids, done, killed, lines = [], 0, None, []
    for line in p.stderr:
        lines.append(line.rstrip())
        m = re.search(r"ready on .* \(pid (\d+)", line)
        if m:
            pids.append(int(m.group(1)))
        m = re.match(r"progress\s+(\d+)/", line)
        if m:
            done = int(m.group(1))
        if kill_after is not None and killed is None and done >= kill_after and pids:
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
            lines.append(f"[benchmark] SIGKILL worker pid {killed} after {done} pieces")
    rc = p.wait()
    wall = time.perf_counter() - t0
    summary = next((ln for ln in reversed(lines) if ln.startswith("cluster   ") and "pieces on" in ln), "")
    said = next((ln for ln in reversed(lines) if ln.startswith("said")), "")
    if rc != 0:
        print("\n".join(lines[-20:]))
        raise SystemExit(f"say failed ({rc})")
    return {"wall": wall, "summary": summary, "said": said, "killed": killed, "log": lines}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="default: the tests' Nano q4_0 model")
    ap.add_argument("--sentences", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-kill", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.model is None:
        from tests.helpers.models import model_path

        args.model = str(model_path("nano", "q4_0"))
    import numpy as np
    import soundfile as sf

    from tests.helpers.ray_cluster import LocalRayCluster, env

    out = Path(args.out or tempfile.mkdtemp(prefix="cluster-render-"))
    out.mkdir(parents=True, exist_ok=True)
    text_file = out / "script.txt"
    text_file.write_text(script(args.sentences))
    print(f"model {args.model}; {args.sentences} sentences, max_tokens {args.max_tokens}, {args.workers} workers; "
          f"files in {out}; load {os.getloadavg()[0]:.1f}", flush=True)
    e = env()
    local = say(args, str(text_file), str(out / "local.wav"), ["--threads", str(args.workers)], e)
    print(f"local    {local['wall']:.1f} s  {local['said']}", flush=True)
    t0 = time.perf_counter()
    with LocalRayCluster(workers=args.workers) as cluster:
        print(f"cluster  started in {time.perf_counter() - t0:.1f} s at {cluster.address}", flush=True)
        flags = ["--cluster", cluster.address, "--workers", str(args.workers), "--threads", "1"]
        runs = {"cluster": say(args, str(text_file), str(out / "cluster.wav"), flags, e)}
        if not args.no_kill:
            runs["killed"] = say(args, str(text_file), str(out / "killed.wav"), flags, e,
                                 kill_after=max(2, args.sentences // 4))
        ping = subprocess.run([sys.executable, "-c", PING, cluster.address], capture_output=True, text=True, env=e)
        print(f"ray      {ping.stdout.strip() or ping.stderr.strip()[-300:]}", flush=True)
    ref, _ = sf.read(str(out / "local.wav"), dtype="float32")
    for name, r in runs.items():
        got, _ = sf.read(str(out / f"{name}.wav"), dtype="float32")
        same = got.shape == ref.shape and np.array_equal(got, ref)
        print(f"{name:<8} {r['wall']:.1f} s ({r['wall'] / local['wall']:.2f} x local)  equal to local: {same}  "
              f"({got.size} vs {ref.size} samples)" + (f"  killed pid {r['killed']}" if r["killed"] else ""))
        print(f"         {r['summary']}")
        print(f"         {r['said']}")


if __name__ == "__main__":
    main()
