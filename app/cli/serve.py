"""`chatterbox-studio serve`: the local OpenAI-compatible speech server (see app/server)."""

from __future__ import annotations

import argparse
import logging
import os
import time

from app.cli.common import WATERMARK_NOTE, add_decoder_argument, log
from app.server.config import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_QUEUE,
    MAX_AUDIO_SECONDS,
    MAX_BODY_BYTES,
    MAX_CLIENT_REQUESTS,
    MAX_INPUT_CHARS,
    MAX_SOURCE_SECONDS,
    MAX_UPLOAD_BYTES,
    ServerConfig,
    library_dir,
)


def _cmd_serve(args: argparse.Namespace) -> int:
    import importlib.util

    if not all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn")):
        log("chatterbox-studio: error: serve needs FastAPI and uvicorn: pip install 'chatterbox-studio[server]' "
            "(or: pip install fastapi uvicorn)")
        return 1
    if not os.path.isfile(args.model) and not args.cluster:  # on a cluster, the path is the workers'
        log(f"chatterbox-studio: error: model file not found: {args.model}")
        return 1
    if args.voices and not os.path.isdir(args.voices):
        log(f"chatterbox-studio: error: voice folder not found: {args.voices}")
        return 1
    if not 0 <= args.port <= 65535:
        log(f"chatterbox-studio: error: --port must be 0-65535; got {args.port}")
        return 1
    if not 1 <= args.parallel <= 64:
        log(f"chatterbox-studio: error: --parallel must be 1-64; got {args.parallel}")
        return 1
    if args.replicas is not None and not 1 <= args.replicas <= 16:
        log(f"chatterbox-studio: error: --replicas must be 1-16; got {args.replicas}")
        return 1
    if args.queue < 1:
        log(f"chatterbox-studio: error: --queue must be at least 1; got {args.queue}")
        return 1
    for flag, value in (("--max-client-requests", args.max_client_requests), ("--max-input-chars", args.max_input_chars),
                        ("--max-body-bytes", args.max_body_bytes), ("--max-audio-seconds", args.max_audio_seconds),
                        ("--max-upload-bytes", args.max_upload_bytes), ("--max-source-seconds", args.max_source_seconds)):
        if not value > 0:
            log(f"chatterbox-studio: error: {flag} must be positive; got {value}")
            return 1
    from app.server.security import split_host

    for name in args.allowed_hosts:
        if split_host(name) is None:
            log(f"chatterbox-studio: error: --allowed-host takes NAME or NAME:PORT; got {name!r}")
            return 1
    for origin in args.cors_origins:
        if not origin.startswith(("http://", "https://")) or origin.count("/") != 2:
            log(f"chatterbox-studio: error: --cors-origin takes an origin such as http://localhost:3000 (scheme, host "
                f"and port, no path); got {origin!r}")
            return 1
    api_key = args.api_key or os.environ.get("CHATTERBOX_API_KEY") or None
    if args.cluster and args.decoder:
        log("chatterbox-studio: error: --decoder is not offered with --cluster (the cluster's servers load the model "
            "alone)")
        return 1
    config = ServerConfig(model=args.model, decoder=args.decoder, host=args.host, port=args.port, api_key=api_key,
                          voices_dir=args.voices or library_dir(), threads=args.threads, device=args.device, queue=args.queue,
                          parallel=args.parallel, replicas=args.replicas or 1, max_input_chars=args.max_input_chars,
                          max_body_bytes=args.max_body_bytes, max_audio_seconds=args.max_audio_seconds,
                          max_upload_bytes=args.max_upload_bytes, max_source_seconds=args.max_source_seconds,
                          max_client_requests=args.max_client_requests, allowed_hosts=list(args.allowed_hosts),
                          cors_origins=list(args.cors_origins),
                          log_level="info" if args.verbose else "warning", watermark=not args.no_watermark)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.cluster:
        return _serve_on_cluster(args, config)
    from app.server.runner import limit_malloc_arenas, load_engine, serve_forever
    from engine_native import EngineError

    limit_malloc_arenas()  # before any thread starts
    t0 = time.perf_counter()
    try:
        engine = load_engine(config)
    except EngineError as e:
        log(f"chatterbox-studio: error: {e}")
        return 1
    log(f"model     {args.model} ({engine.variant} {engine.info['quantization']}, loaded in "
        f"{time.perf_counter() - t0:.1f} s)" + ("" if engine.watermark else "; not watermarking (--no-watermark)"))

    def ready(cfg, service) -> None:
        voices = [e.id for e in service.catalog.entries()]
        log(f"voices    {', '.join(voices)} (from {cfg.voices_dir})")
        if cfg.host not in ("127.0.0.1", "localhost", "::1"):
            log(f"warning   listening on {cfg.host}: other machines can reach this server"
                + ("" if cfg.api_key else " and no --api-key is set")
                + "; requests by host name need --allowed-host NAME")
        log(f"serving   {cfg.url}  (POST /audio/speech, GET /models, GET /audio/voices; Ctrl-C stops)")

    try:
        serve_forever(config, engine, on_ready=ready)
    except OSError as e:
        log(f"chatterbox-studio: error: {e.strerror or e}")
        return 1
    except KeyboardInterrupt:  # uvicorn shut down gracefully, then re-raised the Ctrl-C
        pass
    log("stopped")
    return 0


def _serve_on_cluster(args, config) -> int:
    from app.cluster import ClusterError
    from app.cluster.serve import serve_on_cluster

    replicas = args.replicas or 2

    def ready(cfg) -> None:
        log(f"cluster   {args.cluster}: {replicas} replicas of {cfg.model}, each with its own engine")
        log(f"serving   {cfg.url}  (Ray Serve's proxy; POST /audio/speech, GET /models, GET /audio/voices; "
            "Ctrl-C stops and removes the replicas)")

    try:
        serve_on_cluster(config, args.cluster, replicas=replicas, threads=args.threads or 1, on_ready=ready)
    except ClusterError as e:
        log(f"chatterbox-studio: error: {e}")
        return 1
    except KeyboardInterrupt:
        pass
    log("stopped")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="a local OpenAI-compatible speech server (/v1/audio/speech, streaming)",
                       description="Serve the OpenAI speech API (POST /v1/audio/speech, GET /v1/models, "
                       "GET /v1/audio/voices) on this machine, with the voices of a library folder. "
                       "Needs the 'server' extra (FastAPI, uvicorn).")
    p.add_argument("-m", "--model", required=True, help="the model .gguf")
    add_decoder_argument(p)
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--api-key", dest="api_key", metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (default: $CHATTERBOX_API_KEY, else no key)")
    p.add_argument("--voices", metavar="DIR",
                   help=f"folder of .voice.gguf files to offer (default: the app's library, {library_dir()})")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--device", default="auto", help="the engine's device: auto (the fastest present), cpu, cuda:0, "
                   "vulkan:0, ... (`chatterbox-studio info` lists them; one not present is refused naming those that are)")
    p.add_argument("--queue", type=int, default=DEFAULT_QUEUE,
                   help=f"requests that may wait for the engine; more get 503 (default {DEFAULT_QUEUE})")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="generate up to N requests at once, a chunk of each in turn, so every client hears "
                   "audio early (default 1: one request at a time, first come first served)")
    p.add_argument("--replicas", type=int, default=None, metavar="K",
                   help="K copies of the model, each with its own engine: on this machine, one server whose "
                   "--parallel requests are spread over them (for a GPU serving many clients: one copy's passes "
                   "run one at a time, K copies run K at once: docs/GPU.md has figures; each copy costs the "
                   "model's memory again; default 1); with --cluster, "
                   "K servers on the cluster (default 2)")
    p.add_argument("--allowed-host", dest="allowed_hosts", action="append", default=[], metavar="NAME[:PORT]",
                   help="a host name requests may be addressed to besides localhost and IP addresses, e.g. "
                   "host.docker.internal or this machine's name (repeat for more); others get 403 (DNS rebinding)")
    p.add_argument("--cors-origin", dest="cors_origins", action="append", default=[], metavar="ORIGIN",
                   help="let web pages of this origin (e.g. http://localhost:3000) call the API from a browser "
                   "(repeat for more); by default every request from another origin's page gets 403")
    p.add_argument("--max-client-requests", type=int, default=MAX_CLIENT_REQUESTS, metavar="N",
                   help="requests one client address may have in progress; more get 429 "
                   f"(default {MAX_CLIENT_REQUESTS})")
    p.add_argument("--max-input-chars", type=int, default=MAX_INPUT_CHARS, metavar="N",
                   help=f"longest 'input' text; longer gets 413 (default {MAX_INPUT_CHARS:,})")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, metavar="N",
                   help=f"largest request body; larger gets 413 (default {MAX_BODY_BYTES:,})")
    p.add_argument("--max-upload-bytes", type=int, default=MAX_UPLOAD_BYTES, metavar="N",
                   help=f"largest upload to /v1/audio/voice-conversion; larger gets 413 (default {MAX_UPLOAD_BYTES:,})")
    p.add_argument("--max-source-seconds", type=float, default=MAX_SOURCE_SECONDS, metavar="S",
                   help=f"longest recording to re-voice; longer gets 413 (default {MAX_SOURCE_SECONDS:g})")
    p.add_argument("--max-audio-seconds", type=float, default=MAX_AUDIO_SECONDS, metavar="S",
                   help=f"a response's audio ends here, whole but cut short (default {MAX_AUDIO_SECONDS:g})")
    p.add_argument("--no-watermark", action="store_true",
                   help=f"do not watermark the speech ({WATERMARK_NOTE}); requests cannot turn it off themselves")
    p.add_argument("-v", "--verbose", action="store_true", help="log every request")
    from app.cli.cluster_cli import add_cluster_arguments

    add_cluster_arguments(p, serve=True)
    p.epilog = ("Requests whose Host is not this server's (localhost, an IP address, an --allowed-host) and requests "
                "from web pages of other origins (unless --cors-origin) get 403.")
    p.set_defaults(func=_cmd_serve)
