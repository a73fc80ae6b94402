"""Chatterbox Studio's native engine: a C++/ggml port of Chatterbox behind pybind11.

The public surface: `Engine`, `Voice`, `Chunk`, `Stream`, the error classes, and
`system_info()` / `ggml_version()`. The submodules `convert` (model files), `debug`
(parity seams) and `_core` (the native module) are for tools and tests.
"""

import os

# ggml's CPU backend runs on OpenMP. Spinning threads waiting for work make every graph
# 5-20x slower as soon as another process (the GUI, a browser, a second engine) wants
# the same cores; sleeping instead costs microseconds per graph. libgomp reads this when
# the native module loads it, so it must be set first. A user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from engine_native._core import EngineError, ModelFile, ggml_version, system_info  # noqa: E402
from engine_native.errors import (Cancelled, EmptyTextError, IncompatibleVoiceError, ModelError,  # noqa: E402
                                  ParameterError, SilentAudioError, VoiceError, VoiceTooShortError)


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
