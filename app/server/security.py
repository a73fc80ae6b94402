"""What keeps web pages and greedy clients off the local server: one ASGI middleware in front of
every route (`RequestGuard`) and a cap on each response's audio (`AudioCap`).

The threat: a server on 127.0.0.1 is reachable from any web page the user opens. A page can
(1) send "simple" cross-site requests (a text/plain POST needs no CORS preflight, so it runs
even though the page cannot read the answer), and (2) rebind its own DNS name to 127.0.0.1 and
then talk to the server as if it were its own origin. So, in this order:

- Host: the request's Host header must name this server: localhost, an IP address (which no
  attacker can rebind) or a name given in `allowed_hosts`; with a port, the port we listen on
  (a configured "name:port" pins that port, a bare name allows any). Else 403 host_not_allowed.
- Origin: a request from a web page carries `Origin` (every POST does) and `Sec-Fetch-Site`.
  It passes only from a page this server serves itself (same origin: /docs) or from an
  origin listed in `cors_origins` (or when it is a link followed to one of our pages, a GET
  navigation); else 403 origin_not_allowed. Listed origins get CORS
  headers (and their preflights an answer); no `Access-Control-Allow-Origin` is ever sent
  otherwise.
- The API key (when set), for /v1 routes: compared as SHA-256 digests with
  hmac.compare_digest, so neither its content nor its length shows in the timing.
- Limits: a body over `max_body_bytes` (an upload to one of UPLOAD_PATHS: `max_upload_bytes`)
  is 413 (Content-Length checked before reading, a chunked body counted as it comes); a client address with `max_client_requests` POSTs in
  flight (waiting or generating) gets 429 for the next. The text length is checked by the
  route (413), the audio length by `AudioCap`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import threading

from starlette.datastructures import Headers

from app.server.config import ServerConfig
from app.server.errors import error_response

log = logging.getLogger("chatterbox.server")

# Routes whose body is an uploaded recording (multipart), bounded by max_upload_bytes.
UPLOAD_PATHS = ("/v1/audio/voice-conversion",)

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
CORS_ALLOW_HEADERS = "Authorization, Content-Type, X-Api-Key"
CORS_EXPOSE_HEADERS = "X-Chatterbox-Seed, X-Chatterbox-Voice, Retry-After"
CORS_MAX_AGE = "600"
BODY_METHODS = ("POST", "PUT", "PATCH")


def split_host(value: str) -> tuple[str, int | None] | None:
    """'Name:port' -> ('name', port); '[::1]:80' -> ('[::1]', 80). None when malformed."""
    value = value.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else None
    else:
        name, _, port = value.partition(":")
        port = port if _ else None
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        return None
    return name.rstrip("."), None if port is None else int(port)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name[1:-1] if name.startswith("[") else name)
    except ValueError:
        return False
    return True


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Policy:
    """The checks, read from the config at each request (the port is known only once bound)."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self._key = _digest(config.api_key) if config.api_key else None
        self._named = {}
        for entry in config.allowed_hosts:
            parsed = split_host(entry)
            if parsed:
                self._named.setdefault(parsed[0], set()).add(parsed[1])
        self._origins = {o.strip().lower().rstrip("/") for o in config.cors_origins if o.strip()}

    def host_allowed(self, value: str | None) -> bool:
        parsed = split_host(value or "")
        if parsed is None:
            return False
        name, port = parsed
        ports = self._named.get(name)
        if ports is not None and (None in ports or port in ports):
            return True
        bound = (self.config.host or "").lower()
        ours = name in LOOPBACK_NAMES or _is_ip(name) or name in (bound, f"[{bound}]")
        return ours and port in (None, self.config.port)

    def origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.strip().lower().rstrip("/")
        return origin in self._origins or origin == f"http://{host.strip().lower()}"

    def listed_origin(self, origin: str | None) -> str | None:
        """The origin to echo in CORS headers (only a configured one)."""
        if origin and origin.strip().lower().rstrip("/") in self._origins:
            return origin.strip()
        return None

    def key_refusal(self, headers: Headers):
        if self._key is None:
            return None
        given = headers.get("authorization", "")
        token = given[7:].strip() if given[:7].lower() == "bearer " else headers.get("x-api-key", "")
        if not token:
            return error_response(401, "missing API key: send it as 'Authorization: Bearer KEY' (this server was "
                                  "started with --api-key)", code="missing_api_key")
        if not hmac.compare_digest(_digest(token), self._key):
            return error_response(401, "incorrect API key provided", code="invalid_api_key")
        return None


class ClientSlots:
    """Requests in flight per client address."""

    def __init__(self):
        self._count: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, client: str, limit: int) -> bool:
        with self._lock:
            n = self._count.get(client, 0)
            if n >= limit:
                return False
            self._count[client] = n + 1
            return True

    def give(self, client: str) -> None:
        with self._lock:
            n = self._count.get(client, 1) - 1
            if n > 0:
                self._count[client] = n
            else:
                self._count.pop(client, None)

    def __len__(self) -> int:
        return sum(self._count.values())


class RequestGuard:
    """ASGI middleware: `app.add_middleware(RequestGuard, config=config)`."""

    def __init__(self, app, config: ServerConfig):
        self.app = app
        self.config = config
        self.policy = Policy(config)
        self.slots = ClientSlots()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        method = scope["method"]
        host = headers.get("host")
        if not self.policy.host_allowed(host):
            log.warning("refused a request for host %r (not this server's name)", host)
            return await error_response(
                403, f"host {host!r} is not allowed: this server answers to localhost, its IP addresses and the "
                "names given with --allowed-host", code="host_not_allowed")(scope, receive, send)
        origin = headers.get("origin")
        fetch_site = headers.get("sec-fetch-site", "")
        # A link followed to a page of ours (a GET navigation, no Origin) shows the page to the
        # user and nothing to the page that linked it; any other request from a page is refused.
        navigation = origin is None and method in ("GET", "HEAD") and headers.get("sec-fetch-mode") == "navigate"
        cross = origin is not None or (fetch_site in ("cross-site", "same-site") and not navigation)
        if cross and not (origin is not None and self.policy.origin_allowed(origin, host)):
            log.warning("refused a request from origin %r (%s)", origin, fetch_site or "no Sec-Fetch-Site")
            return await error_response(
                403, f"requests from web pages of origin {origin or 'another site'!r} are not allowed; start the "
                "server with --cors-origin ORIGIN to let a page call it", code="origin_not_allowed")(
                scope, receive, send)
        cors = self.policy.listed_origin(origin)
        if method == "OPTIONS" and "access-control-request-method" in headers:
            return await self._preflight(cors, scope, receive, send)
        if cors:
            send = self._with_cors(send, cors)
        if scope["path"].startswith("/v1"):
            refusal = self.policy.key_refusal(headers)
            if refusal is not None:
                return await refusal(scope, receive, send)
        if method not in BODY_METHODS:
            return await self.app(scope, receive, send)
        client = (scope.get("client") or ("unknown", 0))[0]
        if not self.slots.take(client, self.config.max_client_requests):
            return await error_response(
                429, f"this client already has {self.config.max_client_requests} requests in progress; wait for "
                "one to finish", type_="requests", code="rate_limit_exceeded",
                headers={"Retry-After": "1"})(scope, receive, send)
        try:
            limit = self.config.max_upload_bytes if scope["path"] in UPLOAD_PATHS else self.config.max_body_bytes
            body = await self._read_body(headers, receive, limit)
            if body is None:
                return await error_response(
                    413, f"the request body is larger than {limit:,} bytes",
                    code="request_too_large")(scope, receive, send)
            return await self.app(scope, self._replay(body, receive), send)
        finally:
            self.slots.give(client)

    async def _read_body(self, headers: Headers, receive, limit: int) -> bytes | None:
        """The whole body, or None once it passes `limit` bytes (nothing more is read)."""
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    @staticmethod
    def _replay(body: bytes, receive):
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then the client's disconnect, as the route listens for it

        return replay

    @staticmethod
    def _with_cors(send, origin: str):
        async def wrapped(message):
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + [
                    (b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
                    (b"access-control-expose-headers", CORS_EXPOSE_HEADERS.encode())]
            await send(message)

        return wrapped

    @staticmethod
    async def _preflight(origin: str | None, scope, receive, send):
        if origin is None:  # a same-origin page never preflights; nothing to allow
            return await error_response(403, "no cross-origin access is configured",
                                        code="origin_not_allowed")(scope, receive, send)
        from starlette.responses import Response

        await Response(status_code=204, headers={
            "Access-Control-Allow-Origin": origin, "Vary": "Origin",
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
            "Access-Control-Allow-Headers": CORS_ALLOW_HEADERS, "Access-Control-Max-Age": CORS_MAX_AGE,
        })(scope, receive, send)


class AudioCap:
    """A response's audio budget: `take(samples)` passes what still fits and, once the budget is
    spent, calls `stop()` (the stream then ends at its next chunk, and the response ends whole)."""

    def __init__(self, seconds: float, rate: int, stop):
        self.left = max(0, int(seconds * rate))
        self.stop = stop
        self.reached = False

    def take(self, samples):
        if self.reached:
            return samples[:0]
        if len(samples) >= self.left:
            samples = samples[: self.left]
            self.left = 0
            self.reached = True
            self.stop()
        else:
            self.left -= len(samples)
        return samples
