"""Reference stages for S3Gen's HiFT vocoder (HiFTGenerator). REFERENCE-VENV ONLY.

`hift_source` gives tests a realistic excitation: the f0 predictor, f0_upsamp and
m_source exactly as `HiFTGenerator.inference` runs them, with torch seeded
(m_source draws random phases and noise).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, load_s3gen, stage


def _hift(snapshot: Path):
    return load_s3gen(snapshot).mel2wav


def _mel(inputs: Inputs) -> torch.Tensor:
    mel = np.asarray(inputs["mel"], np.float32)
    if mel.ndim != 2:
        raise ValueError("mel must be [80, T]")
    return torch.from_numpy(mel).unsqueeze(0)  # (1, 80, T)


@stage("hift_f0")
def hift_f0_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """mel [80, T] -> f0 [T]: HiFTGenerator.f0_predictor."""
    hift = _hift(snapshot)
    with torch.inference_mode():
        f0 = hift.f0_predictor(_mel(inputs))
    return {"f0": f0[0].numpy().astype(np.float32)}


@stage("hift_source")
def hift_source_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """mel [80, T] -> source (1, 1, N) and f0 [T], as HiFTGenerator.inference builds them
    (f0_predictor -> f0_upsamp -> m_source), after torch.manual_seed(seed) (default 0)."""
    hift = _hift(snapshot)
    torch.manual_seed(int(np.asarray(inputs.get("seed", 0))))
    with torch.inference_mode():
        f0 = hift.f0_predictor(_mel(inputs))
        s = hift.f0_upsamp(f0[:, None]).transpose(1, 2)  # bs, n, t
        s, _, _ = hift.m_source(s)
        s = s.transpose(1, 2)
    return {"source": s.numpy().astype(np.float32), "f0": f0[0].numpy().astype(np.float32)}


@stage("hift_decode")
def hift_decode_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """mel [80, T], source (1, 1, N) -> wav [N]: HiFTGenerator.decode(x=mel, s=source)
    (its final clamp to audio_limit included; no trim fade)."""
    hift = _hift(snapshot)
    s = torch.from_numpy(np.asarray(inputs["source"], np.float32)).reshape(1, 1, -1)
    with torch.inference_mode():
        wav = hift.decode(x=_mel(inputs), s=s)
    return {"wav": wav.reshape(-1).numpy().astype(np.float32)}


@stage("hift_excitation")
def hift_excitation_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """f0 [T], phases [H], noise [H, 480 T] -> the m_source excitation [480 T] as
    HiFTGenerator.inference makes it (f0_upsamp -> m_source), with SineGen's random
    phases and Gaussian noise replaced by the given ones."""
    from unittest import mock

    hift = load_s3gen(snapshot).mel2wav
    f0 = torch.from_numpy(np.asarray(inputs["f0"], np.float32))[None]          # (1, T)
    phases = torch.from_numpy(np.asarray(inputs["phases"], np.float32)).reshape(1, -1, 1)
    noise = torch.from_numpy(np.asarray(inputs["noise"], np.float32))[None]    # (1, H, N)
    real_randn_like = torch.randn_like

    def fake_randn_like(t, *a, **k):
        return noise.clone() if tuple(t.shape) == tuple(noise.shape) else torch.zeros_like(t)

    with torch.inference_mode(), \
            mock.patch("torch.distributions.uniform.Uniform.sample", lambda self, sample_shape=(): phases.clone()), \
            mock.patch("torch.randn_like", fake_randn_like):
        s = hift.f0_upsamp(f0[:, None]).transpose(1, 2)
        s, _, _ = hift.m_source(s)
    del real_randn_like
    return {"source": s[0, :, 0].numpy().astype(np.float32)}
