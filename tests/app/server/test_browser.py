"""The local server against a real browser (Debian's chromium, headless): what a web page the
user opens can do to it.

- A page served from another local port posts a speech request as text/plain (a "simple"
  request: no CORS preflight, the attack that makes a server on 127.0.0.1 reachable from any
  site). The server refuses it (403, its log names the page's origin) and speaks nothing; the
  same page, same browser, succeeds once its origin is listed with --cors-origin (the control:
  the browser did send the request).
- DNS rebinding: a name that resolves to 127.0.0.1 (chromium's --host-resolver-rules) reaches
  the server with a foreign Host header: refused, while 127.0.0.1 itself is served.

The real server (uvicorn, its own thread) with the random Nano Q4_0 model, no API key: origin
and Host are the only defence tested here (test_security.py sends the same headers by hand).
"""

from __future__ import annotations

import http.server
import json
import logging
import shutil
import subprocess
import tempfile
import threading

import pytest

from tests.app.server.test_security import FAST, start

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh test installs it)")

# A page that posts JSON as text/plain to the server with a synchronous XHR (it finishes before
# the load event, so the DOM chromium dumps holds its outcome) and writes what it saw.
PAGE = """<!doctype html><html><head><title>page</title></head><body><pre id="out">pending</pre><script>
var out = document.getElementById("out");
try {
  var x = new XMLHttpRequest();
  x.open("POST", "%(target)s/v1/audio/speech", false);
  x.setRequestHeader("Content-Type", "text/plain;charset=UTF-8");
  x.send(%(body)s);
  out.textContent = "status " + x.status + " bytes " + (x.responseText || "").length;
} catch (e) {
  out.textContent = "blocked " + e.name;
}
</script></body></html>"""


def chromium_dom(url: str, *extra: str) -> str:
    """The page's DOM after its scripts ran (headless chromium, its own throwaway profile)."""
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-dev-shm-usage", f"--user-data-dir={profile}", *extra, "--dump-dom", url],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.fixture(scope="module")
def engine():
    from engine_native import Engine
    from tests.helpers.models import model_path

    return Engine(model_path("nano", "q4_0"))


class _Page(http.server.BaseHTTPRequestHandler):
    html = b""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.html)))
        self.end_headers()
        self.wfile.write(self.html)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def page_server():
    """A page on another local port (as a web site the user has open would be)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()


def _serve_page(page_server, server) -> str:
    body = json.dumps(json.dumps({"model": "tts-1", "voice": "default", "input": "Hello there.",
                                  "response_format": "pcm", **FAST}))
    _Page.html = (PAGE % {"target": f"http://127.0.0.1:{server.port}", "body": body}).encode()
    return f"http://127.0.0.1:{page_server.server_address[1]}/"


def test_a_page_on_another_port_cannot_make_speech(engine, page_server, caplog):
    server = start(engine)
    try:
        url = _serve_page(page_server, server)
        served = server.service.worker.served
        with caplog.at_level(logging.WARNING, logger="chatterbox.server"):
            dom = chromium_dom(url)
        print(dom[dom.find('<pre'):dom.find('</pre>') + 6])
        assert "blocked" in dom, dom
        page_origin = url.rstrip("/")
        refused = [r.getMessage() for r in caplog.records if "refused a request from origin" in r.getMessage()]
        assert any(page_origin in m for m in refused), (refused, dom)  # the browser sent it; the server said no
        assert server.service.worker.served == served
    finally:
        server.stop()


def test_the_same_page_is_served_once_its_origin_is_listed(engine, page_server):
    """The control: the browser does send the page's request, and a listed origin is answered."""
    origin = f"http://127.0.0.1:{page_server.server_address[1]}"
    server = start(engine, cors_origins=[origin])
    try:
        served = server.service.worker.served
        dom = chromium_dom(_serve_page(page_server, server))
        assert "status 200" in dom, dom
        assert server.service.worker.served == served + 1
    finally:
        server.stop()


def test_dns_rebinding_gets_no_answer(engine, caplog):
    server = start(engine)
    try:
        rebound = f"http://attacker.example:{server.port}/v1/audio/voices"
        with caplog.at_level(logging.WARNING, logger="chatterbox.server"):
            dom = chromium_dom(rebound, "--host-resolver-rules=MAP attacker.example 127.0.0.1")
        assert "host_not_allowed" in dom, dom
        assert any("attacker.example" in r.getMessage() for r in caplog.records)
        own = chromium_dom(f"http://127.0.0.1:{server.port}/v1/audio/voices")
        assert "host_not_allowed" not in own and "default" in own, own
    finally:
        server.stop()
