"""The speech server on a local Ray cluster, driven by the official `openai` client; one replica killed.

    .venv/bin/python benchmarks/cluster_serve.py [--model M.gguf] [--clients 4] [--requests 3]
        [--replicas 2] [--max-tokens 12]

Starts a real cluster on 127.0.0.1 (a head and `--replicas` worker nodes of one CPU:
tests/helpers/ray_cluster.py), runs `chatterbox-studio serve --cluster ADDRESS --replicas N`
and sends `--clients` concurrent clients of `--requests` streamed requests each
(`client.audio.speech.with_streaming_response.create`, WAV). While the first requests stream,
one replica's process is killed (SIGKILL; its pid comes from the response's
x-chatterbox-replica header). Prints each request's outcome (bytes, seconds, replica, the
error the client saw), that every request ended (none hung), the replicas that answered,
and the error answer for an unknown voice through the cluster (the local server's JSON).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEXT = "The lighthouse keeper counted the ships. A small bell rang twice in the hall."


def start_server(model: str, address: str, replicas: int, port: int, env: dict, voices: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "app", "serve", "-m", model, "--cluster", address, "--replicas", str(replicas),
           "--port", str(port), "--threads", "1", "--voices", voices]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + 600
    for line in p.stderr:
        print(f"  serve: {line.rstrip()}", flush=True)
        if line.startswith("serving"):
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p
        if time.monotonic() > deadline:
            break
    p.kill()
    raise SystemExit("the server did not start")


def stop_server(p: subprocess.Popen) -> None:
    os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)


def run_clients(base_url: str, clients: int, requests: int, max_tokens: int, kill_one: bool) -> list[dict]:
    from openai import OpenAI

    results: list[dict] = []
    lock = threading.Lock()
    killed = threading.Event()

    def client_loop(c: int) -> None:
        client = OpenAI(base_url=base_url, api_key="none", timeout=300.0, max_retries=2)
        for r in range(requests):
            t0 = time.perf_counter()
            out = {"client": c, "request": r, "bytes": 0, "replica": None, "error": None, "killed_here": False}
            try:
                with client.audio.speech.with_streaming_response.create(
                        model="tts-1", voice="default", input=TEXT, response_format="wav",
                        extra_body={"seed": 100 * c + r, "max_tokens": max_tokens}) as resp:
                    out["replica"] = resp.headers.get("x-chatterbox-replica")
                    for chunk in resp.iter_bytes():
                        out["bytes"] += len(chunk)
                        if kill_one and not killed.is_set() and out["replica"]:
                            with lock:
                                if not killed.is_set():
                                    killed.set()
                                    pid = int(out["replica"].split("@")[0])
                                    os.kill(pid, signal.SIGKILL)
                                    out["killed_here"] = True
                                    print(f"  killed replica pid {pid} while it streamed to client {c}", flush=True)
            except Exception as e:  # what the client saw
                out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            out["seconds"] = time.perf_counter() - t0
            with lock:
                results.append(out)

    threads = [threading.Thread(target=client_loop, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=12)
    args = ap.parse_args()
    if args.model is None:
        from tests.helpers.models import model_path

        args.model = str(model_path("nano", "q4_0"))
    import tempfile

    from openai import NotFoundError, OpenAI

    from tests.helpers.ray_cluster import LocalRayCluster, env, free_port

    voices = tempfile.mkdtemp(prefix="voices-")
    with LocalRayCluster(workers=args.replicas) as cluster:
        port = free_port()
        server = start_server(args.model, cluster.address, args.replicas, port, env(), voices)
        base = f"http://127.0.0.1:{port}/v1"
        try:
            t0 = time.perf_counter()
            results = run_clients(base, args.clients, args.requests, args.max_tokens, kill_one=True)
            wall = time.perf_counter() - t0
            try:
                OpenAI(base_url=base, api_key="none", max_retries=0).audio.speech.create(
                    model="tts-1", voice="nobody", input="hello")
                bad = "no error (unexpected)"
            except NotFoundError as e:
                bad = f"{e.status_code} {e.body}"
        finally:
            stop_server(server)
    ok = [r for r in results if r["error"] is None]
    print(f"{len(results)} requests from {args.clients} clients in {wall:.1f} s: {len(ok)} complete, "
          f"{len(results) - len(ok)} failed cleanly, none hung")
    for r in sorted(results, key=lambda r: (r["client"], r["request"])):
        print(f"  client {r['client']} request {r['request']}: {r['bytes']:>7} bytes in {r['seconds']:6.1f} s from "
              f"{r['replica']}" + (f"  ERROR {r['error']}" if r["error"] else "")
              + ("  (replica killed during this request)" if r["killed_here"] else ""))
    print(f"replicas that answered: {sorted({r['replica'] for r in results if r['replica']})}")
    print(f"unknown voice through the cluster: {bad}")
    sizes = {r["bytes"] for r in ok}
    print(f"complete responses' sizes: {sorted(sizes)}")


if __name__ == "__main__":
    main()
