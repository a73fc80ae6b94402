"""Many concurrent streams of one model on one device: throughput and latency.

    .venv/bin/python benchmarks/bench_streams.py -m MODEL.gguf [--device cuda:0] [--streams 1,4,16,32]
                                                 [--max-tokens 250] [--batch auto|on|off] [--replicas K]
                                                 [--json out.json]
    .venv/bin/python benchmarks/bench_streams.py -m MODEL.gguf --server --parallel 16 --clients 16 [...]

In-process (default): for each N of --streams, N streams of one sentence each are submitted at
once to the server's EngineWorker (app/server/worker.py) with `parallel` N, as the server runs
them: one thread advances every active stream a chunk at a time, and where batching is on
(--batch auto: t3_batch.batching_pays, a GPU; on / off force it through CBS_T3_BATCH) their T3
steps are taken together (T3Sessions.batch_streams); --replicas K loads the model K times and spreads
the streams over K such workers (the server's --replicas). Random weights never draw the stop
token, so every stream runs to --max-tokens (250 tokens: 10 s of audio).

--server: starts `chatterbox-studio serve --parallel N` as its own process on a free port and
drives it with --clients `openai` clients at once (streaming pcm), the same sentence each.

Reported per N: aggregate seconds of audio per second of wall time (all streams, first
submit to last end), per-stream RTF (its wall time / its audio; min / median / max), first
audio p50 / p99 (submit to the first chunk or byte), and the batcher's rounds and largest
batch. Numbers, never assertions; the machine should be quiet.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # for tests.helpers.models, after site-packages

TEXT = "The quick brown fox jumps over the lazy dog near the river bank."
KEY = "bench-streams-key"


def _pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def summary(n: int, wall: float, audio: list[float], ends: list[float], firsts: list[float], extra: dict) -> dict:
    rtf = [e / a for e, a in zip(ends, audio) if a > 0]
    return {"streams": n, "wall_s": wall, "audio_s": sum(audio), "aggregate_x": sum(audio) / wall,
            "rtf_min": min(rtf), "rtf_median": statistics.median(rtf), "rtf_max": max(rtf),
            "first_audio_p50_ms": 1e3 * _pct(firsts, 0.5), "first_audio_p99_ms": 1e3 * _pct(firsts, 0.99), **extra}


def show(r: dict, label: str) -> None:
    print(f"{label} N={r['streams']:>3}: {r['audio_s']:.1f} s audio in {r['wall_s']:.2f} s = "
          f"{r['aggregate_x']:.2f} s audio/s; per-stream RTF {r['rtf_min']:.3f} / {r['rtf_median']:.3f} / "
          f"{r['rtf_max']:.3f} (min/median/max); first audio p50 {r['first_audio_p50_ms']:.0f} ms, "
          f"p99 {r['first_audio_p99_ms']:.0f} ms" + (f"; batcher {r['rounds']} rounds, largest {r['largest']}"
                                                  if r.get("rounds") is not None else ""), flush=True)


def run_in_process(engines: list, n: int, options: dict) -> dict:
    from app.server.worker import Job, WorkerPool

    pool = WorkerPool(engines, queue_size=n, parallel=n)
    rate = engines[0].sample_rate
    lock = threading.Lock()
    first, audio, ends = [None] * n, [0.0] * n, [None] * n
    errors = []
    jobs = []
    t0 = time.perf_counter()
    for i in range(n):
        def on_chunk(chunk, i=i):
            with lock:
                if first[i] is None:
                    first[i] = time.perf_counter()
                audio[i] += chunk.samples.size / rate

        def on_end(i=i):
            ends[i] = time.perf_counter()

        def on_error(e, i=i):
            errors.append(e)
            ends[i] = time.perf_counter()

        worker = pool.pick()
        job = Job(worker.engine.stream(TEXT, seed=i, **options), on_chunk, on_end, on_error, label=str(i))
        job.submitted = time.perf_counter()
        jobs.append(job)
        worker.submit(job)
    for job in jobs:
        job.done.wait()
    wall = time.perf_counter() - t0
    batchers = [e.stages.t3.batcher for e in engines if e.stages.t3.batcher]
    extra = {"rounds": sum(b.rounds for b in batchers) if batchers else None,
             "largest": max(b.largest for b in batchers) if batchers else None,
             "batched": pool.batching, "replicas": len(engines)}
    pool.stop()
    if errors:
        raise RuntimeError(f"{len(errors)} stream(s) failed: {errors[0]!r}")
    return summary(n, wall, audio, [e - j.submitted for e, j in zip(ends, jobs)],
                   [f - j.submitted for f, j in zip(first, jobs)], extra)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_server(model: str, device: str, parallel: int, replicas: int, clients: int, options: dict,
               log_path: str) -> dict:
    import openai

    port = _free_port()
    cli = [sys.executable, "-c", "import sys; from app.cli.main import main; sys.exit(main(sys.argv[1:]))"]
    cmd = cli + ["serve", "-m", model, "--device", device, "--port", str(port), "--parallel", str(parallel),
                 "--replicas", str(replicas),
                 "--queue", str(max(clients, 4)), "--api-key", KEY, "--max-client-requests", str(clients + 1)]
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=1800)
        deadline = time.time() + 300
        while True:
            try:
                client.models.list()
                break
            except Exception:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the server did not start (log: {log_path})") from None
                time.sleep(0.5)
        body = {k: v for k, v in options.items()}
        results = [None] * clients

        def one(i: int) -> None:
            c = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=1800)
            s = time.perf_counter()
            first, n = None, 0
            with c.audio.speech.with_streaming_response.create(model="tts-1", voice="default", input=TEXT,
                                                                response_format="pcm",
                                                                extra_body={**body, "seed": i}) as r:
                for piece in r.iter_bytes():
                    if piece and first is None:
                        first = time.perf_counter() - s
                    n += len(piece)
            results[i] = (first or 0.0, time.perf_counter() - s, n / 2 / 24000)

        warm = [threading.Thread(target=one, args=(i,)) for i in range(min(replicas, clients))]
        for t in warm:  # warm-up, one request a replica at once: the first request pays the graphs' first builds
            t.start()
        for t in warm:
            t.join()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        health = client.get("/health", cast_to=object) if hasattr(client, "get") else {}
        return summary(clients, wall, [r[2] for r in results], [r[1] for r in results], [r[0] for r in results],
                       {"parallel": parallel, "replicas": replicas, "health": health})
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", help="the model .gguf (default: the tests' random Nano Q4_0)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--streams", default="1,4,16,32", help="comma-separated N (in-process)")
    ap.add_argument("--max-tokens", type=int, default=250, help="speech tokens per stream (250: 10 s)")
    ap.add_argument("--batch", choices=("auto", "on", "off"), default="auto",
                    help="batch the streams' T3 steps (auto: on a GPU)")
    ap.add_argument("--server", action="store_true", help="drive `chatterbox-studio serve` with openai clients")
    ap.add_argument("--parallel", type=int, default=16, help="--server: the server's --parallel")
    ap.add_argument("--replicas", type=int, default=1,
                    help="copies of the model, each with its own worker thread (the server's --replicas)")
    ap.add_argument("--clients", type=int, default=16, help="--server: concurrent clients")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.batch != "auto":
        os.environ["CBS_T3_BATCH"] = "1" if args.batch == "on" else "0"
    if not args.model:
        from tests.helpers.models import model_path
        args.model = str(model_path("nano", "q4_0"))
    options = {"max_tokens": args.max_tokens}
    results = []
    if args.server:
        r = run_server(args.model, args.device, args.parallel, args.replicas, args.clients, options,
                       os.environ.get("BENCH_SERVER_LOG", "/tmp/bench_streams_server.log"))
        show(r, f"server --parallel {args.parallel} --replicas {args.replicas}, clients")
        print(f"server /health after the run: {r['health']}", flush=True)
        results.append(r)
    else:
        from engine_native import Engine

        engines = [Engine(args.model, device=args.device) for _ in range(max(1, args.replicas))]
        print(f"model {Path(args.model).name} on {engines[0].device}; batch {args.batch}; replicas {len(engines)}",
              flush=True)
        run_in_process(engines, len(engines), options)  # warm-up: each replica's graphs built, caches allocated
        for n in [int(x) for x in args.streams.split(",")]:
            r = run_in_process(engines, n, options)
            show(r, "in-process")
            results.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
