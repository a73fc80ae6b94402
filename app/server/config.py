"""The server's settings and limits, and where the app's voice library lives (without Qt)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_QUEUE = 16          # requests waiting for the engine (the running one not counted)
MAX_INPUT_CHARS = 100_000   # longer input: 413
from app.core.paths import APP, ORG, library_dir  # noqa: F401 - re-exported for the server


@dataclass
class ServerConfig:
    model: str
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
    max_input_chars: int = MAX_INPUT_CHARS
    log_level: str = "warning"

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else ("[::1]" if self.host == "::" else self.host)
        return f"http://{host}:{self.port}/v1"
