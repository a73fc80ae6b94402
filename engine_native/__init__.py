"""Chatterbox Studio's native engine: a C++/ggml port of Chatterbox behind pybind11."""

from engine_native._core import EngineError, ModelFile, ggml_version, system_info

__all__ = ["EngineError", "ModelFile", "ggml_version", "system_info"]
