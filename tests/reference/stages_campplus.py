"""Reference stage for CAMPPlus, S3Gen's x-vector. REFERENCE-VENV ONLY (imports torch)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, stage


@stage("campplus_embed")
def campplus_embed_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """wav (16 kHz) -> embed [192], exactly as S3Gen.embed_ref computes `ref_x_vector` from a
    16 kHz reference: `speaker_encoder.inference(ref_wav_16)` on the (1, L) wav (Kaldi fbank,
    mean subtraction over time, CAMPPlus.forward).

    Optional inputs: `threads` (torch.set_num_threads for the timing) and `repeats`;
    `seconds` is the fastest of the repeated calls (the model already loaded)."""
    from .stages import load_s3gen

    if "threads" in inputs:
        torch.set_num_threads(int(inputs["threads"]))
    s3gen = load_s3gen(snapshot)
    ref_wav_16 = torch.from_numpy(np.asarray(inputs["wav"], np.float32)).unsqueeze(0)  # (B, L), as embed_ref
    best = float("inf")
    with torch.inference_mode():
        for _ in range(int(inputs.get("repeats", 1))):
            t0 = time.perf_counter()
            x_vector = s3gen.speaker_encoder.inference(ref_wav_16.to(dtype=s3gen.dtype))
            best = min(best, time.perf_counter() - t0)
    return {"embed": x_vector[0].float().numpy(), "seconds": np.asarray(best)}
