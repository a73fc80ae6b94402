"""The OpenAI-compatible speech server on a Ray cluster: one Ray Serve deployment of N replicas.

    serve_on_cluster(ServerConfig(model=..., port=8000), "HEAD:6379", replicas=4, threads=1)

Each replica (`SpeechReplica`) is the whole local server: its own Engine and EngineWorker
(app.server.api's SpeechService) and the same FastAPI app, RequestGuard included, so the
routes, streaming (chunked audio and SSE), limits and error answers are the local server's.
Ray Serve's HTTP proxy on the head node listens on the configured host and port and spreads
requests over the replicas (each replica takes up to queue + parallel requests; more wait at
the proxy, up to MAX_QUEUED per replica, then 503). Every response names its replica in
REPLICA_HEADER (process id and node).

A replica that dies is replaced by Serve's controller (on another node when its node is
gone). A request it held fails cleanly: one not yet answered gets a 5xx from the proxy (the
openai client retries those by itself); one whose audio had started streaming ends with a
cut connection, which the client reports as an error. Neither waits forever: Ray notices a
dead worker process at once and a lost node within its health-check period.
"""

from __future__ import annotations

import os
import socket
import time

from app.cluster import ClusterError, connect
from app.server.config import ServerConfig

APP_NAME = "chatterbox-speech"
REPLICA_HEADER = "x-chatterbox-replica"
MAX_QUEUED = 16                # requests per replica waiting at the proxy before 503
HEALTH_CHECK_PERIOD_S = 2.0


class ReplicaHeader:
    """ASGI middleware: every response says which replica answered."""

    def __init__(self, app):
        self.app = app
        self.value = f"{os.getpid()}@{socket.gethostname()}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def tagged(message):
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + [(REPLICA_HEADER.encode(), self.value)]
            await send(message)

        return await self.app(scope, receive, tagged)


class SpeechReplica:
    """One replica: the engine loaded once, the local server's app built on it."""

    def __init__(self, config: ServerConfig):
        from app.server.api import SpeechService
        from app.server.runner import load_engine

        self.service = SpeechService(load_engine(config), config)

    def __serve_build_asgi_app__(self):
        from app.server.api import create_app

        app = create_app(self.service)
        app.add_middleware(ReplicaHeader)
        return app

    def __del__(self):
        service = getattr(self, "service", None)
        if service is not None:
            service.close()


def speech_deployment(config: ServerConfig, replicas: int, threads: int):
    """The bound Serve application (needs `ray` joined)."""
    from ray import serve

    cls = serve.ingress()(SpeechReplica)
    gpu = str(config.device).startswith(("cuda", "vulkan"))
    return serve.deployment(
        cls, name="SpeechReplica", num_replicas=replicas,
        ray_actor_options={"num_cpus": 0 if gpu else threads, "num_gpus": 1 if gpu else 0},
        max_ongoing_requests=config.queue + config.parallel, max_queued_requests=MAX_QUEUED * replicas,
        health_check_period_s=HEALTH_CHECK_PERIOD_S, graceful_shutdown_timeout_s=5,
    ).bind(config)


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_on_cluster(config: ServerConfig, address: str, *, replicas: int, threads: int = 1) -> None:
    """Deploys the server (returns once every replica is up); `config.port` 0 takes a free port."""
    ray = connect(address)
    import logging

    from ray import serve

    logging.getLogger("ray.serve").setLevel(logging.WARNING)   # the command's own lines say what runs

    if config.port == 0:
        config.port = free_port(config.host)
    if config.threads is None:
        config.threads = threads
    try:
        serve.start(proxy_location="HeadOnly",
                    http_options={"host": config.host, "port": config.port, "keep_alive_timeout_s": 5})
        serve.run(speech_deployment(config, replicas, threads), name=APP_NAME, route_prefix="/", blocking=False)
    except (RuntimeError, ValueError, ray.exceptions.RayError) as e:
        raise ClusterError(f"cannot deploy the server on the cluster: {str(e).splitlines()[0]}") from None


def stop_on_cluster() -> None:
    """Removes the server's application (and Serve itself when nothing else runs on it)."""
    from ray import serve

    try:
        serve.delete(APP_NAME)
        if not serve.status().applications:
            serve.shutdown()
    except Exception:  # the cluster is gone already
        pass


def serve_on_cluster(config: ServerConfig, address: str, *, replicas: int, threads: int = 1, on_ready=None) -> None:
    """Deploys, calls `on_ready(config)`, serves until Ctrl-C, then removes the deployment."""
    start_on_cluster(config, address, replicas=replicas, threads=threads)
    try:
        if on_ready:
            on_ready(config)
        while True:
            time.sleep(1.0)
    finally:
        stop_on_cluster()
