"""Chatterbox Studio's native engine: a C++/ggml port of Chatterbox behind pybind11.

The public surface: `Engine`, `Voice`, `Chunk`, `Stream`, the error classes, and
`system_info()` / `ggml_version()`. The submodules `convert` (model files), `debug`
(parity seams) and `_core` (the native module) are for tools and tests.
"""

from engine_native._core import EngineError, ModelFile, ggml_version, system_info
from engine_native.errors import (Cancelled, EmptyTextError, IncompatibleVoiceError, ModelError, ParameterError,
                                  SilentAudioError, VoiceError, VoiceTooShortError)


def __getattr__(name: str):  # the engine loads numpy-heavy modules: import it on first use
    if name in ("Engine", "Chunk", "Stream", "MIN_VOICE_SECONDS"):
        from engine_native import engine

        return getattr(engine, name)
    if name == "Voice":
        from engine_native.voice import Voice

        return Voice
    if name in ("Sentence", "split_text"):
        from engine_native import text

        return getattr(text, name)
    raise AttributeError(f"module 'engine_native' has no attribute {name!r}")


__all__ = ["Engine", "Voice", "Chunk", "Stream", "Sentence", "split_text", "EngineError", "ModelError", "VoiceError",
           "VoiceTooShortError", "SilentAudioError", "IncompatibleVoiceError", "EmptyTextError", "ParameterError",
           "Cancelled", "ModelFile", "ggml_version", "system_info", "MIN_VOICE_SECONDS"]
