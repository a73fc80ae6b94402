"""The models the app makes: a Hugging Face snapshot folder converted, or a published repository
downloaded and converted (engine_native.convert), into MODELS_DIR/chatterbox-VARIANT-QUANT.gguf.
Each call reads and writes files for minutes: the desktop app runs them off the GUI thread."""

from __future__ import annotations

import os


def model_file(models_dir: str, variant: str, quant: str) -> str:
    return os.path.join(models_dir, f"chatterbox-{variant}-{quant}.gguf")


def convert_snapshot(folder: str, models_dir: str, quant: str, log=None) -> str:
    """Convert a snapshot folder; returns the model file written."""
    from engine_native.convert import convert, detect_variant

    os.makedirs(models_dir, exist_ok=True)
    out = model_file(models_dir, detect_variant(folder), quant)
    convert(folder, out, quant=quant, log=log)
    return out


def download_model(repo: str, models_dir: str, quant: str, log=None) -> str:
    """Download a repository (ResembleAI/chatterbox-turbo, ...) and convert it; returns the model file."""
    from engine_native.convert import download_and_convert

    os.makedirs(models_dir, exist_ok=True)
    out = model_file(models_dir, "nano" if "nano" in repo.lower() else "turbo", quant)
    download_and_convert(repo, out, quant=quant, log=log)
    return out
