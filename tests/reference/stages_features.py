"""Reference stages for voice features. REFERENCE-VENV ONLY (imports torch)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, stage


@stage("mel_24k")
def mel_24k_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """wav (24 kHz) -> `mel_spectrogram(wav)` transposed to [T, 80] (prompt_feat's layout)."""
    from chatterbox.models.s3gen.utils.mel import mel_spectrogram

    wav = torch.from_numpy(np.asarray(inputs["wav"], np.float32))
    with torch.inference_mode():
        mel = mel_spectrogram(wav)
    return {"mel": mel[0].T.contiguous().numpy()}


@stage("fbank80")
def fbank80_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """wav (16 kHz) -> torchaudio.compliance.kaldi.fbank(wav[None], num_mel_bins=80) [T, 80]."""
    from torchaudio.compliance import kaldi

    wav = torch.from_numpy(np.asarray(inputs["wav"], np.float32))
    with torch.inference_mode():
        return {"fbank": kaldi.fbank(wav[None], num_mel_bins=80).numpy()}


@stage("ve_embed")
def ve_embed_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """wav (16 kHz) -> VoiceEncoder.embeds_from_wavs([wav], sample_rate=16000)[0]."""
    from .stages import load_ve

    ve = load_ve(snapshot)
    wav = np.asarray(inputs["wav"], np.float32)
    return {"embed": ve.embeds_from_wavs([wav], sample_rate=16000)[0].astype(np.float32)}


@stage("s3tok_logmel")
def s3tok_logmel_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """wav (16 kHz) -> S3Tokenizer.log_mel_spectrogram(wav) [128, T]."""
    from .stages import load_s3gen

    tok = load_s3gen(snapshot).tokenizer
    wav = torch.from_numpy(np.asarray(inputs["wav"], np.float32))
    with torch.inference_mode():
        return {"logmel": tok.log_mel_spectrogram(wav).numpy()}
