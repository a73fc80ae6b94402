"""Text -> T3 -> S3Gen -> HiFT -> 24 kHz audio with the built-in voice (random Turbo, F32)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_native.pipeline import Pipeline
from tests.models import model_path


@pytest.fixture(scope="module")
def pipe():
    return Pipeline(model_path("turbo"))


def test_end_to_end_audio_has_the_reference_length_and_is_deterministic(pipe):
    a = pipe.synthesize("Hello there, this is a test.", seed=3, max_tokens=20)
    n_tokens = a.speech_tokens.size  # T3 tokens (no specials) + 3 silence tokens
    assert a.sample_rate == 24000
    assert a.samples.dtype == np.float32 and a.samples.ndim == 1
    assert a.samples.size == n_tokens * 2 * 480  # two mel frames per token, 480 samples per frame
    assert np.isfinite(a.samples).all() and np.abs(a.samples).max() <= 0.99
    assert np.all(a.samples[:480] == 0)  # the trim fade's silent start
    assert list(a.speech_tokens[-3:]) == [4299, 4299, 4299]
    b = pipe.synthesize("Hello there, this is a test.", seed=3, max_tokens=20)
    assert np.array_equal(a.samples, b.samples) and np.array_equal(a.speech_tokens, b.speech_tokens)
    c = pipe.synthesize("Hello there, this is a test.", seed=4, max_tokens=20)
    assert not np.array_equal(a.samples, c.samples)
    print("timings", {k: round(v) for k, v in a.timings.items()})


def test_cli_say_writes_the_same_audio_as_the_api(pipe, tmp_path):
    import soundfile as sf

    from tests.models import run_cli_without_torch

    out = tmp_path / "hello.wav"
    res = run_cli_without_torch("say", "Hello there, this is a test.", "-m", str(model_path("turbo")), "-o", str(out),
                                "--seed", "3", "--max-tokens", "20")
    assert res.returncode == 0, res.stderr
    wav, sr = sf.read(str(out), dtype="float32")
    assert sr == 24000
    ref = pipe.synthesize("Hello there, this is a test.", seed=3, max_tokens=20).samples
    assert np.array_equal(wav, ref)
    bad = run_cli_without_torch("say", "", "-m", str(model_path("turbo")), "-o", str(tmp_path / "x.wav"))
    assert bad.returncode == 1 and "nothing to say" in bad.stderr and not (tmp_path / "x.wav").exists()
    missing = run_cli_without_torch("say", "Hi.", "-m", str(tmp_path / "none.gguf"), "-o", str(tmp_path / "y.wav"))
    assert missing.returncode == 1 and "not found" in missing.stderr and "Traceback" not in missing.stderr
