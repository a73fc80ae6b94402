"""The local speech server in tests: a real uvicorn server on 127.0.0.1 (a free port, its own
thread) over an engine, with a library holding the engine's built-in voice as "narrator"."""

from __future__ import annotations

from pathlib import Path


def start_with_narrator(engine, folder: Path, **config):
    """A started ServerHandle (ready) whose voice folder `folder` holds narrator.voice.gguf
    ("The Narrator": the model's built-in voice); `config`: ServerConfig's fields."""
    from app.server import ServerConfig, ServerHandle

    v = engine.builtin_voice
    type(v)(speaker_emb=v.speaker_emb, cond_prompt_speech_tokens=v.cond_prompt_speech_tokens, embedding=v.embedding,
            prompt_token=v.prompt_token, prompt_feat=v.prompt_feat, variant=v.variant,
            meta={}).save(folder / "narrator.voice.gguf", name="The Narrator")
    handle = ServerHandle(ServerConfig(model=str(engine.path), host="127.0.0.1", port=0, voices_dir=str(folder),
                                       **config), engine=engine)
    handle.start()
    assert handle.wait_ready(120), handle.error
    return handle
