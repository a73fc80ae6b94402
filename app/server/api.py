"""The HTTP API (FastAPI): OpenAI's speech endpoint, a models and a voices listing.

    POST /v1/audio/speech    {"model", "input", "voice", "response_format", "speed", "instructions",
                              "stream_format": "audio"|"sse", + ours: "seed", "temperature", "top_k",
                              "top_p", "repetition_penalty", "min_p", "cfm_steps", "max_tokens",
                              "prompt_seconds", "first_chunk_tokens", "chunk_tokens", "preset"}
    POST /v1/audio/voice-conversion   multipart: file (a recording), voice, response_format, + ours:
                              seed, cfm_steps, prompt_seconds (app.server.conversion)
    GET  /v1/models, /v1/audio/models, /v1/voices, /v1/audio/voices

Audio always streams (chunked transfer) as the engine makes it, watermarked unless the server
runs with --no-watermark (a request's `"watermark": false` is refused otherwise), with its
provenance in the format's tags; `stream_format="sse"` sends
`speech.audio.delta` events (base64 audio of the response format) and a `speech.audio.done`
event. Errors are OpenAI's error JSON: 400 bad input, 401 bad key, 404 unknown voice,
413 input too long, 503 queue full.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import itertools
import json
import logging
import math
import os
import secrets
import time
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.core.provenance import Provenance
from app.server.config import ServerConfig
from app.server.encode import FORMATS, MEDIA_TYPES, EncoderError, ffmpeg_available, make_encoder, needs_ffmpeg
from app.server.errors import error_response
from app.server.security import AudioCap, RequestGuard
from app.server.voices import VoiceCatalog
from app.server.worker import Busy, Job, WorkerPool
from engine_native.options import random_seed

log = logging.getLogger("chatterbox.server")

SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty", "min_p", "cfm_steps", "max_tokens",
                   "prompt_seconds", "first_chunk_tokens", "chunk_tokens")
OPENAI_FIELDS = ("model", "input", "voice", "response_format", "speed", "instructions", "stream_format")
MULTILINGUAL_FIELDS = ("language", "exaggeration", "cfg_weight")  # a Multilingual model's; others refuse them
OUR_FIELDS = ("seed", "preset", "watermark") + MULTILINGUAL_FIELDS + SAMPLING_FIELDS
MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")
        self.headers = headers

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, param=self.param, code=self.code, type_=self.type,
                              headers=self.headers)


def _param_of(message: str) -> str | None:
    """The option a ParameterError names (its message starts with the option's name)."""
    for name in ("seed",) + SAMPLING_FIELDS + MULTILINGUAL_FIELDS:
        if message.startswith(name + " ") or message.startswith(f"unknown option(s): {name}"):
            return name
    return None


@contextmanager
def refusals(voice_name: str):
    """The engine's refusals of a request (its options, its text or recording, its voice) as
    ApiErrors."""
    from engine_native import EmptyTextError, EngineError, ParameterError, SourceError, VoiceError

    try:
        yield
    except ParameterError as e:
        raise ApiError(400, str(e), param=_param_of(str(e)), code="invalid_parameter") from None
    except EmptyTextError as e:
        raise ApiError(400, str(e), param="input", code="empty_input") from None
    except SourceError as e:
        raise ApiError(400, str(e), param="file", code="invalid_file") from None
    except VoiceError as e:
        raise ApiError(400, f"voice {voice_name!r} cannot be used: {e}", param="voice", code="invalid_voice") from None
    except OSError as e:
        raise ApiError(404, f"voice {voice_name!r} cannot be read: {e}", param="voice",
                       code="voice_not_found") from None
    except EngineError as e:
        raise ApiError(500, f"the engine refused the request: {e}") from None


class SpeechService:
    """The engine (and its replicas), their workers and the voice catalog behind the routes."""

    def __init__(self, engine, config: ServerConfig, replicas=()):
        self.engine, self.config = engine, config
        self.presets = engine.presets
        self.catalog = VoiceCatalog(config.voices_dir, config.exposed_voices, config.expose_builtin)
        self.worker = WorkerPool([engine, *replicas], config.queue, parallel=config.parallel)
        self.model_id = f"chatterbox-{engine.variant}"
        self.created = int(os.path.getmtime(engine.path)) if os.path.exists(engine.path) else int(time.time())
        self._ids = itertools.count(1)
        self.provenance = Provenance.of(engine)   # the model's part of every response's tags

    def close(self) -> None:
        self.worker.stop()

    # ---------------------------------------------------------------- request -> job
    def parse(self, body) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        text = body.get("input")
        if text is None:
            raise ApiError(400, "'input' is required: the text to speak", param="input", code="missing_required_parameter")
        if not isinstance(text, str):
            raise ApiError(400, f"'input' must be a string; got {type(text).__name__}", param="input")
        limit = self.config.max_input_chars
        if len(text) > limit:
            raise ApiError(413, f"'input' is {len(text):,} characters long; this server accepts at most {limit:,} "
                           "characters per request. Split the text into several requests.",
                           param="input", code="input_too_long")
        if not text.strip():
            raise ApiError(400, "'input' is empty: there is nothing to say", param="input", code="empty_input")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise ApiError(400, "'model' must be a string", param="model")
        voice = body.get("voice")
        if isinstance(voice, dict):
            voice = voice.get("id")
        if voice is None:
            raise ApiError(400, "'voice' is required: a voice name from GET /v1/audio/voices, or 'default'",
                           param="voice", code="missing_required_parameter")
        if not isinstance(voice, str):
            raise ApiError(400, "'voice' must be a string (a voice name) or {\"id\": name}", param="voice")
        fmt = body.get("response_format") or "mp3"
        if fmt not in FORMATS:
            raise ApiError(400, f"response_format must be one of {', '.join(FORMATS)}; got {fmt!r}",
                           param="response_format")
        stream_format = body.get("stream_format") or "audio"
        if stream_format not in ("audio", "sse"):
            raise ApiError(400, f"stream_format must be 'audio' or 'sse'; got {stream_format!r}", param="stream_format")
        speed = body.get("speed", 1.0)
        if speed is None:
            speed = 1.0
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed) \
                or not 0.25 <= speed <= 4.0:
            raise ApiError(400, f"speed must be a number from 0.25 to 4.0; got {speed!r}", param="speed")
        speed = float(speed)
        if needs_ffmpeg(fmt, speed) and not ffmpeg_available():
            what = f"speed {speed:g}" if speed != 1.0 else f"response_format {fmt!r}"
            raise ApiError(400, f"{what} needs ffmpeg, which is not installed on this server; use wav or pcm "
                           "at speed 1.0", param="speed" if speed != 1.0 else "response_format")
        preset = body.get("preset") or "quality"
        if preset not in self.presets:
            raise ApiError(400, f"preset must be one of {', '.join(self.presets)}; got {preset!r}", param="preset")
        options = dict(self.presets[preset])
        options.update({k: body[k] for k in SAMPLING_FIELDS + MULTILINGUAL_FIELDS if body.get(k) is not None})
        unknown = sorted(k for k in body if k not in OPENAI_FIELDS + OUR_FIELDS)
        if unknown:
            log.info("ignoring unknown request field(s): %s", ", ".join(unknown))
        mark = body.get("watermark")
        if mark is not None and not isinstance(mark, bool):
            raise ApiError(400, f"watermark must be true or false; got {mark!r}", param="watermark")
        if mark is False and self.engine.watermark:
            raise ApiError(400, "this server watermarks all its speech (Resemble AI's Perth watermark); a request "
                           "cannot turn that off (the server's operator can: serve --no-watermark)",
                           param="watermark", code="watermark_required")
        seed = body.get("seed")
        if seed is None:
            seed = random_seed()
        return {"text": text, "voice": voice, "format": fmt, "stream_format": stream_format, "speed": speed,
                "options": options, "seed": seed}

    def find_voice(self, name: str):
        """The catalog's entry for a voice name; ApiError 404 naming those there are."""
        info = self.catalog.find(name)
        if info is None:
            names = ", ".join(repr(e.id) for e in self.catalog.entries()) or "none"
            raise ApiError(404, f"voice {name!r} not found; available voices: {names}", param="voice",
                           code="voice_not_found")
        return info

    def open_stream(self, req: dict):
        """Voice lookup and the engine's own validation: (Stream, voice info, the worker it is
        for); ApiError on bad input."""
        info = self.find_voice(req["voice"])
        worker = self.worker.pick()
        with refusals(req["voice"]):
            voice = self.catalog.load(info)
            stream = worker.engine.stream(req["text"], voice, seed=req["seed"], **req["options"])
        return stream, info, worker

    async def speech(self, body) -> StreamingResponse:
        req = self.parse(body)
        stream, info, worker = await asyncio.to_thread(self.open_stream, req)  # file reads, text splitting
        headers = {"X-Chatterbox-Seed": str(req["seed"]), "X-Chatterbox-Voice": info.id}
        return self.respond(stream, worker, req["format"], req["speed"], req["stream_format"], headers=headers,
                            input_tokens=len(req["text"]), voice_name=info.name,
                            describe=f"{len(req['text'])} characters, voice {info.id}, {req['format']}"
                                     f"{' (sse)' if req['stream_format'] == 'sse' else ''}, seed {req['seed']}")

    def respond(self, stream, worker, fmt: str, speed: float, stream_format: str, *, headers: dict,
                input_tokens: int, describe: str, voice_name: str) -> StreamingResponse:
        """A Stream of Chunks (opened on `worker`'s engine: `self.worker.pick()`) as a streamed
        response (audio, or SSE events) through that worker's queue (503 when full), cut at
        max_audio_seconds; `describe` goes to the log."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue = asyncio.Queue()

        def emit(item) -> None:  # from the worker / ffmpeg threads
            try:
                loop.call_soon_threadsafe(inbox.put_nowait, item)
            except RuntimeError:  # the loop is gone (server stopping)
                pass

        tags = dataclasses.replace(self.provenance, voices=(voice_name,), watermarked=self.engine.watermark)
        try:
            encoder = make_encoder(fmt, emit, speed, tags)
        except EncoderError as e:
            stream.close()
            raise ApiError(400, str(e), param="response_format") from None
        tokens: dict[int, int] = {}
        cap = AudioCap(self.config.max_audio_seconds, self.engine.sample_rate, stream.cancel)

        def on_chunk(chunk) -> None:
            tokens[chunk.sentence_index] = int(chunk.timings.get("speech_tokens", 0))
            encoder.write(cap.take(chunk.samples))

        def on_error(e) -> None:
            encoder.close()
            emit(e if isinstance(e, Exception) else RuntimeError(str(e)))

        label = f"#{next(self._ids)}"
        job = Job(stream, on_chunk, encoder.end, on_error, label=label)
        try:
            worker.submit(job)
        except Busy as e:
            stream.close()
            encoder.close()
            raise ApiError(503, f"{e}; try again shortly", code="server_busy", headers={"Retry-After": "1"}) from None
        log.info("request %s: %s", label, describe)
        headers = {**headers, "Cache-Control": "no-cache",
                   "X-Chatterbox-Watermark": "perth" if self.engine.watermark else "none"}

        async def audio():
            try:
                while True:
                    item = await inbox.get()
                    if item is None:
                        return
                    if isinstance(item, Exception):
                        raise item  # the connection is cut: the client sees an incomplete response
                    yield item
            finally:
                job.cancel()
                encoder.close()

        async def events():
            try:
                while True:
                    item = await inbox.get()
                    if item is None:
                        out = sum(tokens.values())
                        done = {"type": "speech.audio.done",
                                "usage": {"input_tokens": input_tokens, "output_tokens": out,
                                          "total_tokens": input_tokens + out}}
                        yield f"data: {json.dumps(done)}\n\n"
                        return
                    if isinstance(item, Exception):
                        err = {"type": "error", "error": {"message": str(item), "type": "server_error",
                                                          "param": None, "code": None}}
                        yield f"data: {json.dumps(err)}\n\n"
                        return
                    delta = {"type": "speech.audio.delta", "audio": base64.b64encode(item).decode("ascii")}
                    yield f"data: {json.dumps(delta)}\n\n"
            finally:
                job.cancel()
                encoder.close()

        if stream_format == "sse":
            return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
        return StreamingResponse(audio(), media_type=MEDIA_TYPES[fmt], headers=headers)

    # ---------------------------------------------------------------- listings
    def models(self) -> dict:
        ids = [self.model_id, *MODEL_ALIASES]
        data = [{"id": i, "object": "model", "created": self.created, "owned_by": "chatterbox-studio"} for i in ids]
        return {"object": "list", "data": data, "models": [{"id": i, "name": i} for i in ids]}

    def voices(self) -> dict:
        data = [e.as_json() for e in self.catalog.entries()]
        return {"object": "list", "data": data, "voices": [{"id": d["id"], "name": d["name"]} for d in data]}


def create_app(service: SpeechService) -> FastAPI:
    app = FastAPI(title="Chatterbox Studio speech server", version="1", docs_url="/docs", redoc_url=None)
    app.state.service = service

    app.add_middleware(RequestGuard, config=service.config)  # Host, Origin/CORS, key, limits

    @app.exception_handler(ApiError)
    async def api_error(_request, e: ApiError):
        return e.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, e: StarletteHTTPException):
        return error_response(e.status_code, str(e.detail), type_="invalid_request_error" if e.status_code < 500
                              else "server_error")

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request, e: RequestValidationError):
        return error_response(400, str(e.errors()[:3]))

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            raise ApiError(400, "the request body is not valid JSON") from None
        return await service.speech(body)

    @app.post("/v1/audio/voice-conversion")
    async def voice_conversion(request: Request):
        from app.server.conversion import voice_conversion

        return await voice_conversion(service, request)

    @app.get("/v1/models")
    @app.get("/v1/audio/models")
    async def models():
        return service.models()

    @app.get("/v1/models/{model_id}")
    async def model(model_id: str):
        for m in service.models()["data"]:
            if m["id"] == model_id:
                return m
        raise ApiError(404, f"model {model_id!r} not found", param="model", code="model_not_found")

    @app.get("/v1/voices")
    @app.get("/v1/audio/voices")
    async def voices():
        return await asyncio.to_thread(service.voices)

    @app.get("/health")
    @app.get("/v1/health")
    async def health():
        w = service.worker
        return {"status": "ok", "model": service.model_id, "busy": w.busy, "active": w.active, "waiting": w.waiting,
                "parallel": w.parallel, "replicas": w.replicas, "batched": w.batching, "served": w.served,
                "cancelled": w.cancelled}

    return app
