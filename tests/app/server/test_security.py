"""What keeps web pages and greedy clients off the local server (app/server/security.py), against
a real uvicorn server on 127.0.0.1 (its own thread, a free port) with the random Nano Q4_0 model.

Requests are raw HTTP (http.client, sockets), so every header is the one a browser or an
attacker would send: a foreign Host (DNS rebinding), a cross-site text/plain POST (no CORS
preflight), preflights from a listed origin, bodies that never end.
"""

from __future__ import annotations

import hmac
import http.client
import json
import socket
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from engine_native import Engine  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402

KEY = "s3cret-key"
FAST = {"seed": 7, "max_tokens": 8, "prompt_seconds": 1.0, "cfm_steps": 1, "first_chunk_tokens": 4, "chunk_tokens": 4}
OTHER_PORT = 5173  # where a "page on another local port" comes from


@pytest.fixture(scope="module")
def engine():
    return Engine(model_path("nano", "q4_0"))


def start(engine, **kw):
    from app.server import ServerConfig, ServerHandle

    handle = ServerHandle(ServerConfig(model=str(engine.path), host="127.0.0.1", port=0, voices_dir=None, **kw),
                          engine=engine)
    handle.start()
    assert handle.wait_ready(120), handle.error
    return handle


@pytest.fixture(scope="module")
def server(engine):
    handle = start(engine, api_key=KEY)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def open_server(engine):
    """No key; one listed origin, one extra host name, small limits."""
    handle = start(engine, cors_origins=[f"http://127.0.0.1:{OTHER_PORT}"], allowed_hosts=["studio.lan"],
                   max_client_requests=2, max_body_bytes=4096, max_audio_seconds=0.5)
    yield handle
    handle.stop()


def request(handle, method, path, body=None, headers=None, host=None):
    """(status, headers dict with lower-case names, body bytes); Host as given."""
    conn = http.client.HTTPConnection("127.0.0.1", handle.port, timeout=300)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host if host is not None else f"127.0.0.1:{handle.port}")
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if data is not None:
            conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def read_response(s: socket.socket) -> bytes:
    """One whole HTTP response with a Content-Length from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    lengths = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    length = int(lengths[0])
    while len(rest) < length:
        rest += s.recv(65536)
    return head + b"\r\n\r\n" + rest


def error_code(body: bytes) -> str:
    return json.loads(body)["error"]["code"]


def speech_body(**kw) -> dict:
    return {"model": "tts-1", "voice": "default", "input": "Hello there.", "response_format": "pcm", **FAST, **kw}


AUTH = {"Authorization": f"Bearer {KEY}"}


# ---------------------------------------------------------------- Host (DNS rebinding)


def test_a_foreign_host_is_refused(server):
    for host in ("attacker.example", f"attacker.example:{server.port}", f"127.0.0.1.nip.io:{server.port}",
                 f"localhost.attacker.example:{server.port}", f"127.0.0.1:{server.port + 1}", "", "a:b:c"):
        status, _, body = request(server, "GET", "/v1/models", headers=AUTH, host=host)
        assert status == 403 and error_code(body) == "host_not_allowed", host
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", f"[::1]:{server.port}", "localhost",
                 f"LOCALHOST:{server.port}", f"192.168.1.20:{server.port}"):
        status, _, _ = request(server, "GET", "/v1/models", headers=AUTH, host=host)
        assert status == 200, host


def test_a_foreign_host_cannot_make_speech(server):
    served = server.service.worker.served
    status, _, body = request(server, "POST", "/v1/audio/speech", speech_body(),
                              headers={**AUTH, "Content-Type": "application/json"},
                              host=f"attacker.example:{server.port}")
    assert status == 403 and error_code(body) == "host_not_allowed"
    assert server.service.worker.served == served


def test_configured_host_names_are_allowed(open_server):
    for host in ("studio.lan", f"studio.lan:{open_server.port}", "studio.lan:443"):
        assert request(open_server, "GET", "/v1/models", host=host)[0] == 200, host
    assert request(open_server, "GET", "/v1/models", host="other.lan")[0] == 403


# ---------------------------------------------------------------- Origin and CORS


def test_a_cross_origin_text_plain_post_is_refused(server):
    """A page on another local port posts JSON as text/plain (no preflight): refused, unspoken."""
    served = server.service.worker.served
    for origin in (f"http://127.0.0.1:{OTHER_PORT}", "http://attacker.example", "null"):
        status, headers, body = request(
            server, "POST", "/v1/audio/speech", json.dumps(speech_body()).encode(),
            headers={**AUTH, "Content-Type": "text/plain;charset=UTF-8", "Origin": origin,
                     "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"})
        assert status == 403 and error_code(body) == "origin_not_allowed", origin
        assert "access-control-allow-origin" not in headers
    # a navigation or an <img>/<audio> request from another site carries no Origin, only Sec-Fetch-Site
    status, _, body = request(server, "GET", "/v1/audio/voices", headers={**AUTH, "Sec-Fetch-Site": "same-site",
                                                                       "Sec-Fetch-Mode": "no-cors"})
    assert status == 403 and error_code(body) == "origin_not_allowed"
    # following a link to the server's own page is a navigation the user sees: allowed
    status, _, _ = request(server, "GET", "/docs",
                           headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"})
    assert status == 200
    time.sleep(0.2)
    assert server.service.worker.served == served


def test_a_preflight_from_an_unlisted_origin_gets_no_cors(server):
    status, headers, _ = request(server, "OPTIONS", "/v1/audio/speech", headers={
        "Origin": f"http://127.0.0.1:{OTHER_PORT}", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert status == 403 and "access-control-allow-origin" not in headers


def test_the_servers_own_pages_may_call_it(server):
    """Same origin (the /docs page's "Try it out"): allowed."""
    status, _, body = request(server, "POST", "/v1/audio/speech", speech_body(),
                              headers={**AUTH, "Content-Type": "application/json",
                                       "Origin": f"http://127.0.0.1:{server.port}", "Sec-Fetch-Site": "same-origin"})
    assert status == 200 and len(body) == 2 * (8 + 3) * 2 * 480


def test_a_listed_origin_gets_cors_headers(open_server):
    origin = f"http://127.0.0.1:{OTHER_PORT}"
    status, headers, _ = request(open_server, "OPTIONS", "/v1/audio/speech", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
    assert status == 204
    assert headers["access-control-allow-origin"] == origin and "POST" in headers["access-control-allow-methods"]
    assert "content-type" in headers["access-control-allow-headers"].lower()
    status, headers, body = request(open_server, "POST", "/v1/audio/speech", speech_body(),
                                    headers={"Content-Type": "application/json", "Origin": origin,
                                             "Sec-Fetch-Site": "same-site"})
    assert status == 200 and headers["access-control-allow-origin"] == origin and headers["vary"] == "Origin"
    assert "x-chatterbox-seed" in headers["access-control-expose-headers"].lower()
    status, headers, _ = request(open_server, "GET", "/v1/models", headers={"Origin": "http://127.0.0.1:8080"})
    assert status == 403 and "access-control-allow-origin" not in headers


# ---------------------------------------------------------------- the API key


def test_the_key_is_checked(server, monkeypatch):
    import app.server.security as security

    compared = []
    real = hmac.compare_digest

    def spy(a, b):
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    assert error_code(request(server, "GET", "/v1/models")[2]) == "missing_api_key"
    for wrong in ("s", "s3cret-kez", KEY + "x" * 100):
        status, _, body = request(server, "GET", "/v1/models", headers={"Authorization": f"Bearer {wrong}"})
        assert status == 401 and error_code(body) == "invalid_api_key"
    assert request(server, "GET", "/v1/models", headers={"X-Api-Key": KEY})[0] == 200
    assert request(server, "GET", "/v1/models", headers=AUTH)[0] == 200
    # digests of equal length whatever the keys' lengths: the timing shows neither
    assert compared and all(c == (32, 32) for c in compared)
    assert request(server, "GET", "/health")[0] == 200  # outside /v1: no key


# ---------------------------------------------------------------- limits


def test_a_large_body_is_refused(open_server):
    big = speech_body(input="x" * 5000)
    status, _, body = request(open_server, "POST", "/v1/audio/speech", big,
                              headers={"Content-Type": "application/json"})
    assert status == 413 and error_code(body) == "request_too_large"
    # chunked, no Content-Length: counted as it arrives
    s = socket.create_connection(("127.0.0.1", open_server.port), timeout=60)
    try:
        s.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1:{open_server.port}\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        for _ in range(3):
            s.sendall(b"800\r\n" + b" " * 2048 + b"\r\n")
        s.sendall(b"0\r\n\r\n")
        reply = read_response(s).decode("latin-1")
    finally:
        s.close()
    assert reply.startswith("HTTP/1.1 413") and "request_too_large" in reply


def test_text_length_is_limited(engine):
    handle = start(engine, max_input_chars=20)
    try:
        status, _, body = request(handle, "POST", "/v1/audio/speech",
                                  speech_body(input="A sentence longer than twenty."),
                                  headers={"Content-Type": "application/json"})
        assert status == 413 and error_code(body) == "input_too_long"
    finally:
        handle.stop()


def test_audio_stops_whole_at_its_limit(open_server):
    """max_audio_seconds 0.5: a request for ~1.7 s ends at exactly 0.5 s, as a whole response."""
    status, _, pcm = request(open_server, "POST", "/v1/audio/speech", speech_body(max_tokens=40),
                             headers={"Content-Type": "application/json"})
    assert status == 200 and len(pcm) == 2 * 12000
    status, _, wav = request(open_server, "POST", "/v1/audio/speech", speech_body(max_tokens=40, response_format="wav"),
                             headers={"Content-Type": "application/json"})
    data = wav.index(b"data") + 8   # after the header (and its LIST INFO chunk: the provenance)
    assert status == 200 and wav[:4] == b"RIFF" and len(wav) == data + 2 * 12000
    assert wav[data:] == pcm  # the same seed, the same first half second


def _hold_open(port: int, source: str) -> socket.socket:
    """A POST whose body never finishes: its request stays in flight."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
              "Content-Length: 1000\r\n\r\n{".encode())
    return s


def test_one_client_gets_a_bounded_number_of_requests(open_server):
    held = [_hold_open(open_server.port, "127.0.0.1") for _ in range(2)]
    try:
        time.sleep(0.5)
        status, headers, body = request(open_server, "POST", "/v1/audio/speech", speech_body(),
                                        headers={"Content-Type": "application/json"})
        assert status == 429 and error_code(body) == "rate_limit_exceeded" and headers["retry-after"] == "1"
        assert request(open_server, "GET", "/v1/models")[0] == 200  # reading is never bounded
        # another client address (all of 127/8 is this machine) has its own bound
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", open_server.port))
        data = json.dumps(speech_body()).encode()
        s.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1:{open_server.port}\r\nContent-Type: "
                  f"application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
        s.close()
        assert reply.startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()
    deadline = time.time() + 30
    while time.time() < deadline and request(open_server, "POST", "/v1/audio/speech", speech_body(),
                                             headers={"Content-Type": "application/json"})[0] == 429:
        time.sleep(0.2)
    assert request(open_server, "POST", "/v1/audio/speech", speech_body(),
                   headers={"Content-Type": "application/json"})[0] == 200
