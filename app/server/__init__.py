"""A local OpenAI-compatible speech server (Qt-free): `POST /v1/audio/speech` and friends.

    from app.server import ServerConfig, ServerHandle
    handle = ServerHandle(ServerConfig(model="nano.gguf", port=8000)).start()   # its own threads
    ...
    handle.stop()

`chatterbox-studio serve` runs it from the command line; the desktop app's "Local API
server" panel runs the same server in-process. FastAPI and uvicorn are the optional
extra `server` (`pip install 'chatterbox-studio[server]'`): import `app.server.api` only
when they are wanted.
"""

from app.server.config import DEFAULT_PORT, MAX_INPUT_CHARS, ServerConfig

__all__ = ["DEFAULT_PORT", "MAX_INPUT_CHARS", "ServerConfig", "ServerHandle"]


def __getattr__(name: str):  # FastAPI/uvicorn load only when the server is really wanted
    if name == "ServerHandle":
        from app.server.runner import ServerHandle

        return ServerHandle
    raise AttributeError(f"module 'app.server' has no attribute {name!r}")
