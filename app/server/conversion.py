"""POST /v1/audio/voice-conversion: a recording spoken again in a voice of the catalog
(Engine.revoice_stream, the path of the reference's ChatterboxVC).

multipart/form-data fields:
    file             the recording (any format ffmpeg reads; required)
    voice            a voice name from GET /v1/audio/voices, or "default" (required)
    response_format  mp3 (default), opus, aac, flac, wav, pcm
    seed, cfm_steps, prompt_seconds   (ours, optional)

The audio streams as it is converted, as the speech endpoint's does. The upload is bounded by
`max_upload_bytes` (the RequestGuard, 413) and decoded by the hardened decoder from memory
(`voice_lab.decode.decode_bytes`: sniffed, never written to disk, ffmpeg on a descriptor with
a whitelist of demuxers) off the event loop; a recording over `max_source_seconds` is 413.
Errors: 400 an unreadable file, no speech, too short to tokenize, a bad option; 404 an
unknown voice; 503 the queue full.
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import UploadFile

from app.server.api import ApiError, refusals
from app.server.encode import FORMATS, ffmpeg_available, needs_ffmpeg
from engine_native.options import random_seed

OPTION_FIELDS = {"seed": int, "cfm_steps": int, "prompt_seconds": float}


def _number(form, name: str, kind):
    value = form.get(name)
    if value in (None, ""):
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ApiError(400, f"{name} must be a{'n integer' if kind is int else ' number'}; got {value!r}",
                       param=name) from None


async def parse(service, request) -> dict:
    """The form's fields checked; the upload's bytes read (ApiError on bad input)."""
    try:
        form = await request.form(max_files=1, max_fields=len(OPTION_FIELDS) + 3)
    except Exception as e:  # noqa: BLE001 - python-multipart's and Starlette's parse errors
        raise ApiError(400, f"the request must be multipart/form-data with a 'file' field: {e}") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise ApiError(400, "'file' is required: the recording to re-voice (a multipart file field)",
                       param="file", code="missing_required_parameter")
    voice = form.get("voice")
    if not isinstance(voice, str) or not voice:
        raise ApiError(400, "'voice' is required: a voice name from GET /v1/audio/voices, or 'default'",
                       param="voice", code="missing_required_parameter")
    fmt = form.get("response_format") or "mp3"
    if fmt not in FORMATS:
        raise ApiError(400, f"response_format must be one of {', '.join(FORMATS)}; got {fmt!r}",
                       param="response_format")
    if needs_ffmpeg(fmt, 1.0) and not ffmpeg_available():
        raise ApiError(400, f"response_format {fmt!r} needs ffmpeg, which is not installed on this server; use wav "
                       "or pcm", param="response_format")
    options = {k: _number(form, k, kind) for k, kind in OPTION_FIELDS.items()}
    if options["seed"] is None:
        options["seed"] = random_seed()
    data = await upload.read()
    name = upload.filename or "upload"
    await form.close()
    return {"data": data, "name": name, "voice": voice, "format": fmt, "options": options}


def open_stream(service, req: dict):
    """Decode the upload, look the voice up, let the engine check everything: (Stream, voice
    info, seconds of source, the worker it is for); ApiError on bad input. Runs off the event loop."""
    from voice_lab import VoiceLabError
    from voice_lab.decode import decode_bytes

    info = service.find_voice(req["voice"])
    limit = service.config.max_source_seconds
    try:
        samples, rate, _ = decode_bytes(req["data"], name=req["name"], max_seconds=limit + 1.0)
    except VoiceLabError as e:
        raise ApiError(400, f"the file cannot be re-voiced: {e}", param="file", code="invalid_file") from None
    seconds = samples.shape[0] / rate
    if seconds > limit:
        raise ApiError(413, f"the recording is longer than this server's limit of {limit:g} s; send it in parts",
                       param="file", code="source_too_long")
    worker = service.worker.pick()
    with refusals(req["voice"]):
        voice = service.catalog.load(info)
        stream = worker.engine.revoice_stream(samples, rate, voice, **req["options"])
    return stream, info, seconds, worker


async def voice_conversion(service, request):
    req = await parse(service, request)
    stream, info, seconds, worker = await asyncio.to_thread(open_stream, service, req)
    seed = req["options"]["seed"]
    headers = {"X-Chatterbox-Seed": str(seed), "X-Chatterbox-Voice": info.id}
    return service.respond(stream, worker, req["format"], 1.0, "audio", headers=headers, input_tokens=0,
                           voice_name=info.name,
                           describe=f"re-voice {seconds:.1f} s ({req['name']!r}), voice {info.id}, {req['format']}, "
                                    f"seed {seed}")
