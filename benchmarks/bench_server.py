"""The local speech server under load: time to first byte and throughput, 1 and 8 clients.

    .venv/bin/python benchmarks/bench_server.py [-m MODEL.gguf] [--url http://127.0.0.1:8000/v1 --api-key K]
                                                [--max-tokens 24] [--requests 3] [--format pcm] [--parallel 1]

Without --url it starts the server in this process (its own thread, a free port on
127.0.0.1) on MODEL (default: the tests' random Nano Q4_0). Clients are the official
`openai` package, streaming (`with_streaming_response`). Random weights run every sentence to
--max-tokens, so the audio length is fixed. Throughput is seconds of audio delivered per
second of wall time (x real time), over all clients. Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # for tests.helpers.models, after site-packages

import openai  # noqa: E402

TEXT = "Hello there. How are you today?"


def one_request(url: str, key: str, body: dict, fmt: str) -> tuple[float, float, int]:
    """(time to first byte, total time, bytes)."""
    client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=1800)
    t0 = time.perf_counter()
    first, n = None, 0
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="default", input=TEXT,
                                                            response_format=fmt, extra_body=body) as r:
        for piece in r.iter_bytes():
            if piece and first is None:
                first = time.perf_counter() - t0
            n += len(piece)
    return first or 0.0, time.perf_counter() - t0, n


def run(url: str, key: str, body: dict, fmt: str, clients: int, rounds: int) -> None:
    ttfb, totals, nbytes = [], [], 0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for res in pool.map(lambda _i: one_request(url, key, body, fmt), range(clients * rounds)):
            ttfb.append(res[0])
            totals.append(res[1])
            nbytes += res[2]
    wall = time.perf_counter() - t0
    audio_s = nbytes / 2 / 24000 if fmt == "pcm" else float("nan")
    print(f"{clients} client(s) x {rounds} request(s): time to first byte median {statistics.median(ttfb):.2f} s "
          f"(min {min(ttfb):.2f}, max {max(ttfb):.2f}); request median {statistics.median(totals):.2f} s; "
          f"{audio_s:.1f} s of audio in {wall:.1f} s wall = {audio_s / wall:.2f}x real time, "
          f"{len(ttfb) / wall * 60:.1f} requests/min", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", help="model .gguf (default: the tests' random Nano Q4_0)")
    ap.add_argument("--url", help="an already running server (default: start one here)")
    ap.add_argument("--api-key", default="bench")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=24, help="speech tokens per sentence (2 sentences a request)")
    ap.add_argument("--preset", default="low-latency", choices=["quality", "low-latency"])
    ap.add_argument("--parallel", type=int, default=1, help="the server's --parallel (generations advanced in turn)")
    ap.add_argument("--requests", type=int, default=3, help="requests per client")
    ap.add_argument("--format", default="pcm", choices=["pcm", "wav", "mp3", "opus", "aac", "flac"])
    args = ap.parse_args()
    body = {"seed": 1, "max_tokens": args.max_tokens, "preset": args.preset}
    handle = None
    url = args.url
    if url is None:
        from app.server import ServerConfig, ServerHandle

        model = args.model
        if model is None:
            from tests.helpers.models import model_path

            model = str(model_path("nano", "q4_0"))
        handle = ServerHandle(ServerConfig(model=model, port=0, api_key=args.api_key, threads=args.threads,
                                           voices_dir=None, queue=64, parallel=args.parallel)).start()
        if not handle.wait_ready(300):
            print(f"the server did not start: {handle.error}", file=sys.stderr)
            return 1
        url = handle.url
        print(f"server {url} on {Path(model).name}, parallel {args.parallel}")
    print(f"request: 2 sentences x {args.max_tokens} tokens ({2 * (args.max_tokens + 3) * 0.04:.2f} s of audio), "
          f"preset {args.preset}, {args.format}")
    try:
        one_request(url, args.api_key, {**body, "max_tokens": 4}, args.format)  # warm-up
        run(url, args.api_key, body, args.format, 1, args.requests)
        run(url, args.api_key, body, args.format, 8, 1)
    finally:
        if handle is not None:
            handle.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
