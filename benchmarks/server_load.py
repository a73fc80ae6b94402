"""The local speech server under sustained load: N clients for a fixed time, every response checked.

    .venv/bin/python benchmarks/server_load.py [--duration 1800] [--clients 8] [-m MODEL.gguf]
                                               [--max-tokens 12] [--json results.json] [--seed 0]

Starts `chatterbox-studio serve` as its own process (a free port on 127.0.0.1, an API key) on
MODEL (default: the tests' random Nano Q4_0), then runs `--clients` client threads until
`--duration` seconds have passed, each from its own loopback address (127.0.0.10, .11, ...),
so the per-client bound sees N clients, not one. Each client draws, with its own
random.Random(seed + i), one of:

- whole:      POST /v1/audio/speech as pcm, wav or mp3, read to its end;
- sse:        the same with stream_format "sse", every event parsed up to `speech.audio.done`;
- disconnect: a good request whose connection is closed after 0-4 KiB of audio (or at once);
- bad:        a request the server must refuse with a known status: malformed JSON (400), an
              unknown voice (404), a bad format or speed or option (400), empty input (400), a
              wrong key (401), a foreign Host (403), a foreign Origin (403), a body or an input
              over the limits (413).

A good response is whole when its chunked body ended properly and its audio is the length
the request asks for: random weights never draw the stop token, so a request of S sentences
is exactly S x (max_tokens + 3) x 2 x 480 samples (pcm and sse exactly; wav: its header, with
the provenance tags, + that; mp3: decoded through ffmpeg, within 2048 samples of padding). With another
model (`--model`), lengths are only checked to be non-zero and whole.

Recorded: requests by kind, errors by kind (anything that is not the client's doing: a 5xx,
a cut or short response, a wrong status for a bad request, a timeout, 429/503), p50/p99 of
time to first byte and of the whole request (good requests), the server's RSS sampled every
`--sample-every` s (start after a warm-up, end, max, the slope over the second half), and the
server's own /health counters and any ERROR lines in its log. Prints a summary and writes all
of it as JSON (`--json`). Numbers, never assertions; the exit status is 1 when an error was
recorded (the CI smoke test, tests/benchmarks/test_server_load.py, relies on it).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # for tests.helpers.models, after site-packages

KEY = "load-test-key"
RATE = 24000
TEXTS = [("Hello there.", 1), ("The weather is fine today.", 1), ("Good morning. How are you?", 2),
         ("She opened the door. Then it was quiet.", 2)]
FORMATS = ("pcm", "wav", "mp3")



def wav_data_start(data: bytes) -> int | None:
    """Where a streamed WAV's samples start: after RIFF/WAVE, fmt and any chunks before data (the
    server's LIST INFO tags); None when the header is not that."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos, seen_fmt = 12, False
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        if cid == b"data":
            return pos + 8 if seen_fmt else None
        seen_fmt |= cid == b"fmt "
        pos += 8 + size + (size & 1)
    return None

def samples_for(max_tokens: int, sentences: int) -> int:
    return sentences * (max_tokens + 3) * 2 * 480


class Server:
    """`chatterbox-studio serve` in its own process."""

    def __init__(self, model: str, threads: int | None, extra: list[str]):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"server_load_{os.getpid()}.log"
        self._log = open(self.log_path, "w")
        self.voices = tempfile.mkdtemp(prefix="server_load_voices_")  # none: the built-in voice only
        cmd = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))", "serve",
               "-m", model, "--port", str(self.port), "--api-key", KEY, "--voices", self.voices, *extra]
        if threads:
            cmd += ["--threads", str(threads)]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=str(ROOT))
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log_path.read_text()[-2000:]}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError("the server did not start in 300 s")

    def get(self, path: str) -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request("GET", path, headers={"Authorization": f"Bearer {KEY}"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def log_errors(self) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        return [ln for ln in text.splitlines() if re.search(r"\bERROR\b", ln) or ln.startswith("Traceback")]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()
        os.rmdir(self.voices)


class Results:
    def __init__(self):
        self.lock = threading.Lock()
        self.kinds = Counter()      # what was sent
        self.outcomes = Counter()   # good / bad_refused / disconnected
        self.errors = Counter()     # anything that is not the client's doing
        self.error_examples: dict[str, str] = {}
        self.ttfb: list[float] = []
        self.total: list[float] = []
        self.audio_seconds = 0.0

    def error(self, kind: str, detail: str) -> None:
        with self.lock:
            self.errors[kind] += 1
            self.error_examples.setdefault(kind, detail[:300])


def mp3_samples(data: bytes) -> int:
    from voice_lab.decode import decode_bytes

    x, _, _ = decode_bytes(data, rate=RATE, channels=1, name="response.mp3")
    return x.shape[0]


class Client(threading.Thread):
    def __init__(self, index: int, port: int, until: float, args, results: Results):
        super().__init__(name=f"client-{index}", daemon=True)
        self.rng = random.Random(args.seed + index)
        self.source = f"127.0.0.{10 + index}"
        self.port, self.until, self.args, self.results = port, until, args, results
        self.exact = args.model is None

    # ------------------------------------------------------------------ one request
    def connect(self, timeout: float = 600) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout, source_address=(self.source, 0))

    def body(self, **kw) -> tuple[dict, int]:
        text, sentences = self.rng.choice(TEXTS)
        body = {"model": "tts-1", "voice": "default", "input": text, "seed": self.rng.randrange(1 << 30),
                "max_tokens": self.args.max_tokens, "prompt_seconds": 1.0, "cfm_steps": 1,
                "first_chunk_tokens": 4, "chunk_tokens": 4, **kw}
        return body, samples_for(self.args.max_tokens, sentences)

    def post(self, conn, body, headers=None, raw: bytes | None = None):
        data = raw if raw is not None else json.dumps(body).encode()
        conn.request("POST", "/v1/audio/speech", body=data, headers={
            "Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **(headers or {})})
        return conn.getresponse()

    def good(self, sse: bool) -> None:
        fmt = "pcm" if sse else self.rng.choice(FORMATS)
        body, expected = self.body(response_format=fmt, **({"stream_format": "sse"} if sse else {}))
        kind = "sse" if sse else f"whole_{fmt}"
        t0 = time.perf_counter()
        first = None
        conn = self.connect()
        try:
            r = self.post(conn, body)
            if r.status != 200:
                self.results.error(f"status_{r.status}" if r.status >= 500 or r.status in (429, 503)
                                   else "unexpected_status", f"{kind}: {r.status} {r.read()[:200]!r}")
                return
            data = bytearray()
            while True:
                piece = r.read1(65536)
                if not piece:
                    break
                if first is None:
                    first = time.perf_counter() - t0
                data += piece
        except http.client.IncompleteRead as e:
            self.results.error("cut_response", f"{kind}: {e!r}")
            return
        except socket.timeout:
            self.results.error("timeout", kind)
            return
        except (OSError, http.client.HTTPException) as e:
            self.results.error("connection_error", f"{kind}: {e!r}")
            return
        finally:
            conn.close()
        total = time.perf_counter() - t0
        got, slack = self.audio_samples(bytes(data), fmt, sse, kind)
        if got is None:
            return
        if (self.exact and not expected <= got <= expected + slack) or got <= 0:
            self.results.error("wrong_length", f"{kind}: {got} samples, expected {expected}")
            return
        with self.results.lock:
            self.results.outcomes["good"] += 1
            self.results.ttfb.append(first or total)
            self.results.total.append(total)
            self.results.audio_seconds += got / RATE

    def audio_samples(self, data: bytes, fmt: str, sse: bool, kind: str):
        """(samples, allowed excess) of a finished response; None after recording an error."""
        if sse:
            audio, done = bytearray(), False
            for block in data.decode("utf-8", "replace").split("\n\n"):
                if not block.startswith("data: "):
                    continue
                event = json.loads(block[6:])
                if event.get("type") == "speech.audio.delta":
                    audio += base64.b64decode(event["audio"])
                elif event.get("type") == "speech.audio.done":
                    done = True
                else:
                    self.results.error("sse_error_event", f"{kind}: {block[:200]}")
                    return None, 0
            if not done:
                self.results.error("cut_response", f"{kind}: no speech.audio.done event")
                return None, 0
            return len(audio) // 2, 0
        if fmt == "pcm":
            return (len(data) // 2, 0) if len(data) % 2 == 0 else (-1, 0)
        if fmt == "wav":
            start = wav_data_start(data)
            if start is None:
                self.results.error("bad_wav_header", f"{kind}: {data[:64]!r}")
                return None, 0
            return (len(data) - start) // 2, 0
        try:
            return mp3_samples(data), 2048
        except Exception as e:  # noqa: BLE001 - any failure to decode is an error to record
            self.results.error("mp3_does_not_decode", f"{kind}: {e}")
            return None, 0

    def disconnect(self) -> None:
        body, _ = self.body(response_format=self.rng.choice(("pcm", "mp3")))
        keep = self.rng.choice((0, 0, 1, 512, 4096))  # 0: gone before the answer starts
        conn = self.connect()
        try:
            if keep:
                self.post(conn, body).read1(keep)
            else:
                conn.request("POST", "/v1/audio/speech", body=json.dumps(body).encode(), headers={
                    "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        except (OSError, http.client.HTTPException) as e:
            self.results.error("connection_error", f"disconnect: {e!r}")
            return
        finally:
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        with self.results.lock:
            self.results.outcomes["disconnected"] += 1

    BAD = ("json", "voice", "format", "speed", "option", "empty", "key", "host", "origin", "body", "input")

    def bad(self) -> None:
        which = self.rng.choice(self.BAD)
        body, _ = self.body(response_format="pcm")
        headers, raw, expect = {}, None, 400
        if which == "json":
            raw = b'{"model": "tts-1", "input": "Hi.", '
        elif which == "voice":
            body["voice"], expect = "nobody-by-that-name", 404
        elif which == "format":
            body["response_format"] = "xyz"
        elif which == "speed":
            body["speed"] = 10
        elif which == "option":
            body["temperature"] = -1
        elif which == "empty":
            body["input"] = "   "
        elif which == "key":
            headers["Authorization"], expect = "Bearer wrong-key", 401
        elif which == "host":
            headers["Host"], expect = f"attacker.example:{self.port}", 403
        elif which == "origin":
            headers["Origin"], headers["Content-Type"], expect = "http://127.0.0.1:5173", "text/plain", 403
        elif which == "input":
            body["input"], expect = "x" * 100_001, 413
        conn = self.connect(timeout=120)
        try:
            if which == "body":  # announced as too large; the server answers before reading it
                expect = 413
                conn.putrequest("POST", "/v1/audio/speech")
                for k, v in (("Authorization", f"Bearer {KEY}"), ("Content-Type", "application/json"),
                             ("Content-Length", str(3 * 1024 * 1024))):
                    conn.putheader(k, v)
                conn.endheaders(b'{"input": "')
                r = conn.getresponse()
            else:
                r = self.post(conn, body, headers, raw)
            status, payload = r.status, r.read()
        except (OSError, http.client.HTTPException) as e:
            self.results.error("connection_error", f"bad {which}: {e!r}")
            return
        finally:
            conn.close()
        error = json.loads(payload).get("error", {}) if payload.startswith(b"{") else {}
        if status != expect or not error.get("message"):
            self.results.error("bad_request_mishandled", f"bad {which}: {status} (expected {expect}) {payload[:200]!r}")
            return
        with self.results.lock:
            self.results.outcomes["bad_refused"] += 1

    def run(self) -> None:
        weights = (("whole", 45), ("sse", 20), ("disconnect", 15), ("bad", 20))
        names, w = zip(*weights)
        while time.time() < self.until:
            kind = self.rng.choices(names, w)[0]
            with self.results.lock:
                self.results.kinds[kind] += 1
            try:
                if kind == "whole":
                    self.good(sse=False)
                elif kind == "sse":
                    self.good(sse=True)
                elif kind == "disconnect":
                    self.disconnect()
                else:
                    self.bad()
            except Exception as e:  # noqa: BLE001 - the client's own bug must not hide the run's figures
                self.results.error("client_exception", f"{kind}: {e!r}")


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def slope_mb_per_hour(samples: list[tuple[float, float]]) -> float:
    if len(samples) < 3:
        return float("nan")
    t = [s[0] for s in samples]
    y = [s[1] for s in samples]
    tm, ym = statistics.fmean(t), statistics.fmean(y)
    den = sum((a - tm) ** 2 for a in t)
    return float("nan") if den == 0 else sum((a - tm) * (b - ym) for a, b in zip(t, y)) / den * 3600


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", help="model .gguf (default: the tests' random Nano Q4_0, lengths checked exactly)")
    ap.add_argument("--duration", type=float, default=1800.0, help="seconds of load (default 1800)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=12, help="speech tokens per sentence")
    ap.add_argument("--threads", type=int, default=None, help="the server's CPU threads")
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds before the 'start' RSS sample (default: 10%% of the duration, at most 120)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra option for `serve` (repeatable)")
    args = ap.parse_args()
    model = args.model
    if model is None:
        from tests.helpers.models import model_path

        model = str(model_path("nano", "q4_0"))
    warmup = args.warmup if args.warmup is not None else min(120.0, 0.1 * args.duration)
    server = Server(model, args.threads, args.serve_arg)
    results = Results()
    rss: list[tuple[float, float]] = []
    try:
        t0 = time.time()
        until = t0 + args.duration
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                rss.append((time.time() - t0, server.rss_mb()))
                stop.wait(args.sample_every)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        clients = [Client(i, server.port, until, args, results) for i in range(args.clients)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        wall = time.time() - t0
        time.sleep(1.0)  # the last cancellations land
        stop.set()
        sampler.join()
        rss.append((time.time() - t0, server.rss_mb()))
        health = json.loads(server.get("/health")[1])
        log_errors = server.log_errors()
    finally:
        server.stop()
    after_warmup = [s for s in rss if s[0] >= warmup] or rss
    half = [s for s in rss if s[0] >= rss[-1][0] / 2]
    summary = {
        "duration_s": round(wall, 1), "clients": args.clients, "model": model, "max_tokens": args.max_tokens,
        "requests": sum(results.kinds.values()), "requests_by_kind": dict(results.kinds),
        "outcomes": dict(results.outcomes), "errors": sum(results.errors.values()),
        "errors_by_kind": dict(results.errors), "error_examples": results.error_examples,
        "latency_s": {"total_p50": percentile(results.total, 50), "total_p99": percentile(results.total, 99),
                      "ttfb_p50": percentile(results.ttfb, 50), "ttfb_p99": percentile(results.ttfb, 99)},
        "audio_seconds_delivered": round(results.audio_seconds, 1),
        "rss_mb": {"first": rss[0][1], "start_after_warmup": after_warmup[0][1], "end": rss[-1][1],
                   "max": max(r for _, r in rss), "slope_second_half_mb_per_hour": slope_mb_per_hour(half),
                   "warmup_s": warmup, "samples": [(round(t, 1), round(r, 1)) for t, r in rss]},
        "server_health": health, "server_log_errors": log_errors[:20],
    }
    lat = summary["latency_s"]
    r = summary["rss_mb"]
    print(f"{summary['requests']} requests in {wall:.0f} s from {args.clients} clients: "
          + ", ".join(f"{k} {v}" for k, v in sorted(results.kinds.items())))
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(results.outcomes.items())))
    print(f"errors: {summary['errors']}" + (" (" + ", ".join(f"{k} {v}" for k, v in results.errors.items()) + ")"
                                            if results.errors else ""))
    for k, v in results.error_examples.items():
        print(f"  {k}: {v}")
    print(f"latency of good requests: whole p50 {lat['total_p50']:.2f} s, p99 {lat['total_p99']:.2f} s; "
          f"first byte p50 {lat['ttfb_p50']:.2f} s, p99 {lat['ttfb_p99']:.2f} s")
    print(f"server RSS: {r['first']:.0f} MB at start, {r['start_after_warmup']:.0f} MB after {warmup:.0f} s warm-up, "
          f"{r['end']:.0f} MB at the end, max {r['max']:.0f} MB; second half slope "
          f"{r['slope_second_half_mb_per_hour']:+.1f} MB/h ({len(rss)} samples)")
    print(f"server: served {health.get('served')}, cancelled {health.get('cancelled')}; "
          f"{len(log_errors)} ERROR lines in its log")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 1 if summary["errors"] or log_errors else 0


if __name__ == "__main__":
    sys.exit(main())
