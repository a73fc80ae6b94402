"""Comparisons against the PyTorch reference: relative L2 error, cosine similarity, and a cloned
voice against the reference's `prepare_conditionals` tensors."""

from __future__ import annotations

import numpy as np


def rel(got, ref) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - ref) / np.linalg.norm(ref))


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def check_voice_matches(voice, ref: dict, lines: list[str]) -> None:
    """A voice against `prepare_conditionals`' tensors (`ref`: name -> array) at the cloning
    tolerances of tests/engine_native/test_voice.py; prints the figures (also used by the
    Multilingual engine test)."""
    for t in ("speaker_emb", "embedding"):
        c = cosine(getattr(voice, t), ref[t])
        lines.append(f"  {t:<26} cosine {c:.8f} rel {rel(getattr(voice, t), ref[t]):.2e}")
        assert c >= 0.99999, lines
    for t in ("cond_prompt_speech_tokens", "prompt_token"):
        got, want = getattr(voice, t), ref[t]
        assert got.shape == want.shape, (t, got.shape, want.shape)
        agree = float(np.mean(got == want))
        lines.append(f"  {t:<26} {int(np.sum(got == want))}/{want.size} = {agree:.2%}")
        assert agree >= 0.98, lines
    got, want = voice.prompt_feat, ref["prompt_feat"]
    assert got.shape == want.shape
    r = rel(got, want)
    lines.append(f"  prompt_feat {got.shape} rel {r:.2e} max_abs {np.abs(got - want).max():.2e}")
    print("\n".join(lines))
    assert r <= 1e-5, lines
