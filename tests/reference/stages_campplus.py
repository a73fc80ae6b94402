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
    `seconds` is the fastest of the repeated calls (the model already loaded) and
    `cpu_seconds` its process CPU time."""
    from .stages import load_s3gen

    if "threads" in inputs:
        torch.set_num_threads(int(inputs["threads"]))
    s3gen = load_s3gen(snapshot)
    ref_wav_16 = torch.from_numpy(np.asarray(inputs["wav"], np.float32)).unsqueeze(0)  # (B, L), as embed_ref
    best, best_cpu = float("inf"), float("inf")
    with torch.inference_mode():
        for _ in range(int(inputs.get("repeats", 1))):
            t0, c0 = time.perf_counter(), time.process_time()
            x_vector = s3gen.speaker_encoder.inference(ref_wav_16.to(dtype=s3gen.dtype))
            t1, c1 = time.perf_counter(), time.process_time()
            if t1 - t0 < best:
                best, best_cpu = t1 - t0, c1 - c0
    return {"embed": x_vector[0].float().numpy(), "seconds": np.asarray(best), "cpu_seconds": np.asarray(best_cpu)}
