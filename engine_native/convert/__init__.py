"""Convert a Chatterbox Hugging Face snapshot into one GGUF model file. No PyTorch.

    from engine_native.convert import convert
    report = convert("snapshots/chatterbox-turbo", "chatterbox-turbo-q4_0.gguf", quant="q4_0")

Reads safetensors through numpy and `conds.pt` through a restricted unpickler that
only rebuilds tensors. See docs/DESIGN.md ("Model files") for the format.
"""

from __future__ import annotations

from engine_native.convert.errors import ConvertError
from engine_native.convert.model import (
    VARIANTS,
    ConvertReport,
    convert,
    detect_variant,
    download_and_convert,
    inspect_model,
    requantize,
    snapshot_files,
)
from engine_native.convert.quant import QUANT_TYPES, storage_type

__all__ = [
    "VARIANTS", "QUANT_TYPES", "ConvertError", "ConvertReport", "convert", "detect_variant",
    "download_and_convert", "inspect_model", "requantize", "snapshot_files", "storage_type",
]
