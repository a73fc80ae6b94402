"""Running the server: in the foreground (`serve_forever`, the CLI) or on its own thread
(`ServerHandle`, the desktop app and the tests).

The listening socket is bound before uvicorn starts, so "port in use" is reported at once
and port 0 gives a free port that `ServerHandle.port` then names.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

from app.server.config import ServerConfig

log = logging.getLogger("chatterbox.server")


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def load_engine(config: ServerConfig):
    from engine_native import Engine

    return Engine(config.model, threads=config.threads, device=config.device, watermark=config.watermark,
                  decoder=config.decoder)


def load_replicas(config: ServerConfig) -> list:
    """The engines beside the first one that `config.replicas` asks for (api.WorkerPool)."""
    return [load_engine(config) for _ in range(max(1, config.replicas) - 1)]


def _uvicorn_server(app, config: ServerConfig):
    import uvicorn

    ucfg = uvicorn.Config(app, log_level=config.log_level, access_log=config.log_level in ("info", "debug"),
                          timeout_graceful_shutdown=2, lifespan="off")
    return uvicorn.Server(ucfg)


def serve_forever(config: ServerConfig, engine=None, on_ready=None) -> None:
    """Serve until Ctrl-C (uvicorn's signal handling; call from the main thread)."""
    from app.server.api import SpeechService, create_app

    engine = engine or load_engine(config)
    sock = bind(config.host, config.port)
    config.port = sock.getsockname()[1]
    service = SpeechService(engine, config, replicas=load_replicas(config))
    try:
        server = _uvicorn_server(create_app(service), config)
        if on_ready:
            on_ready(config, service)
        server.run(sockets=[sock])
    finally:
        service.close()
        sock.close()


class ServerHandle:
    """The server on a background thread. `start()` returns at once; `state` goes
    "starting" -> "running" -> "stopped", or "failed" with `error` set. `on_state(state, detail)`
    is called from the server's thread on each change (a GUI marshals it to its own thread)."""

    def __init__(self, config: ServerConfig, engine=None, on_state=None):
        self.config = config
        self.engine = engine
        self.on_state = on_state
        self.state = "stopped"
        self.error = ""
        self.service = None
        self._server = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop_requested = False

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def url(self) -> str:
        return self.config.url

    def _set(self, state: str, detail: str = "") -> None:
        self.state = state
        if state == "failed":
            self.error = detail
        if self.on_state:
            try:
                self.on_state(state, detail)
            except Exception:
                log.exception("on_state callback failed")

    def start(self) -> "ServerHandle":
        if self._thread and self._thread.is_alive():
            return self
        self._ready.clear()
        self._stop_requested = False
        self.error = ""
        self._set("starting", "loading the model")
        self._thread = threading.Thread(target=self._run, name="api-server", daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """True once serving; False on failure or timeout."""
        self._ready.wait(timeout)
        return self.state == "running"

    def _run(self) -> None:
        from app.server.api import SpeechService, create_app

        sock = None
        try:
            engine = self.engine or load_engine(self.config)
            if self._stop_requested:
                return
            sock = bind(self.config.host, self.config.port)
            self.config.port = sock.getsockname()[1]
            self.service = SpeechService(engine, self.config, replicas=load_replicas(self.config))
            self._server = _uvicorn_server(create_app(self.service), self.config)
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)

            async def serve():
                task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
                while not self._server.started and not task.done():
                    await asyncio.sleep(0.02)
                if self._server.started:
                    self._set("running", self.url)
                    self._ready.set()
                await task

            try:
                loop.run_until_complete(serve())
            finally:
                loop.close()
            if self.state != "running" and not self._stop_requested:
                raise RuntimeError("the server did not start")
            self._set("stopped")
        except Exception as e:  # the model, the port, anything: reported, never raised into the app
            log.exception("the speech server failed")
            self._set("failed", str(e) or type(e).__name__)
        finally:
            if self.service is not None:
                self.service.close()
                self.service = None
            if sock is not None:
                sock.close()
            self._ready.set()
            if self.state not in ("stopped", "failed"):
                self._set("stopped")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (running generations are cancelled); waits at most `timeout` s."""
        self._stop_requested = True
        if self._server is not None:
            self._server.should_exit = True
        if self.service is not None:
            self.service.worker.stop(timeout=0)  # cancel running and waiting generations at once
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self.state == "running"


# glibc gives each thread that allocates its own arena (up to 8 per core) and keeps what they
# free, so a long-running server's RSS creeps up under load; with 2 arenas it stays flat (the
# figures: docs/CPU.md, "Measurements behind the code"). MALLOC_ARENA_MAX in the environment wins.
SERVER_MALLOC_ARENAS = 2


def limit_malloc_arenas(n: int = SERVER_MALLOC_ARENAS) -> bool:
    """mallopt(M_ARENA_MAX, n) on glibc (a no-op elsewhere or when MALLOC_ARENA_MAX is set);
    True when applied. Call it before the server's threads start."""
    import ctypes
    import os
    import sys

    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-8, n))  # M_ARENA_MAX
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
