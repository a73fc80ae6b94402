"""The server's settings and limits, and where the app's voice library lives (without Qt)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_QUEUE = 16          # requests waiting for the engine (the running one not counted)
MAX_INPUT_CHARS = 100_000   # longer input: 413
# A request body (JSON) of more bytes: 413. 100,000 characters escaped as JSON fit with room.
MAX_BODY_BYTES = 2 * 1024 * 1024
# An upload (POST /v1/audio/voice-conversion's multipart body) of more bytes: 413. Ten minutes
# of 16-bit 48 kHz stereo WAV fit.
MAX_UPLOAD_BYTES = 128 * 1024 * 1024
# A recording to re-voice longer than this: 413 (its decoded samples are held in memory).
MAX_SOURCE_SECONDS = 1800.0
# A response's audio stops here (a whole file, cut short); MAX_INPUT_CHARS of speech, at about
# 15 characters a second, is some 6,700 s.
MAX_AUDIO_SECONDS = 7200.0
# Requests one client address may have in flight (POSTs, waiting or generating); more: 429.
MAX_CLIENT_REQUESTS = 8
from app.core.paths import APP, ORG, library_dir  # noqa: F401 - re-exported for the server


@dataclass
class ServerConfig:
    model: str
    decoder: str | None = None          # another model file whose S3Gen and HiFT decode (Engine's decoder)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT            # 0: any free port (read it back from ServerHandle.port)
    api_key: str | None = None          # None or "": no key needed
    voices_dir: str | None = None       # None: the app's library folder
    exposed_voices: list[str] | None = None  # None: every voice in the folder; else these paths/stems/names
    expose_builtin: bool = True
    threads: int | None = None
    device: str = "auto"                # the engine's device ("auto" = the fastest present, "cpu", "cuda:0", ...)
    queue: int = DEFAULT_QUEUE
    parallel: int = 1                   # generations advanced in turn (round robin); 1: one at a time
    replicas: int = 1                   # copies of the model, each with its own worker thread (a GPU's use)
    max_input_chars: int = MAX_INPUT_CHARS
    max_body_bytes: int = MAX_BODY_BYTES
    max_upload_bytes: int = MAX_UPLOAD_BYTES
    max_source_seconds: float = MAX_SOURCE_SECONDS
    max_audio_seconds: float = MAX_AUDIO_SECONDS
    max_client_requests: int = MAX_CLIENT_REQUESTS
    # Host names (besides localhost and IP addresses) a request's Host header may carry, e.g.
    # "host.docker.internal" or this machine's name; anything else is refused (DNS rebinding).
    allowed_hosts: list[str] = field(default_factory=list)
    # Origins (scheme://host[:port]) whose web pages may call the API (CORS); none by default.
    cors_origins: list[str] = field(default_factory=list)
    log_level: str = "warning"
    # Mark the speech with the Perth watermark (the engine's default). The server's choice alone:
    # a request asking for unmarked audio is refused (400) unless the server runs --no-watermark.
    watermark: bool = True

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else ("[::1]" if self.host == "::" else self.host)
        return f"http://{host}:{self.port}/v1"
