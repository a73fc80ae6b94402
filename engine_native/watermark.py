"""Resemble AI's Perth implicit watermark: mark audio as machine-made, and check audio for it.

    from engine_native.watermark import Watermarker
    wm = Watermarker()                          # perth.gguf, found by find_model()
    marked = wm.apply(samples, 24000)           # what PerthImplicitWatermarker().apply_watermark returns
    wm.detect(marked, 24000)                    # Detection(marked=True, confidence=1.0, score=0.98...)

The official chatterbox-tts passes every output through `perth.PerthImplicitWatermarker`
(resemble-perth 1.0.1, MIT); this is the same watermarker and detector in the native engine
(src/watermark/perth.h), with the package's trained weights converted once into `perth.gguf`
(`python -m engine_native.convert.perth --download CACHE -o perth.gguf`; scripts/setup.sh does
it). Audio marked by either is recognised by both.

`detect` gives the official verdict: the decoder's score clipped to [0, 1] and rounded (half
to even), marked when the bit is 1; `confidence` is the mean of the rounded bits as the
official CLI prints it (one bit, so 0.0 or 1.0), `score` the value before rounding.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine_native.errors import EngineError, ModelError, ParameterError

MODEL_ENV = "CBS_WATERMARK_MODEL"
MODEL_FILE = "perth.gguf"
# Below this the detector's verdict is not worth giving (fewer than ~100 frames).
MIN_DETECT_SECONDS = 1.0


def find_model(data_dirs: Iterable[str | os.PathLike] = ()) -> Path:
    """perth.gguf: $CBS_WATERMARK_MODEL, else the first of `data_dirs` (the app passes its
    data folder) that holds it, else beside this package (a bundled app ships it there).
    ModelError naming the places looked at when there is none."""
    env = os.environ.get(MODEL_ENV)
    if env:
        if not os.path.isfile(env):
            raise ModelError(f"{MODEL_ENV}={env}: no such watermark model file")
        return Path(env)
    places = [Path(d) / MODEL_FILE for d in data_dirs] + [Path(__file__).resolve().parent / MODEL_FILE]
    for p in places:
        if p.is_file():
            return p
    raise ModelError(f"the watermark model {MODEL_FILE} was not found (looked in: {', '.join(map(str, places))}); "
                     f"make it with `python -m engine_native.convert.perth --download CACHE_DIR -o "
                     f"{places[0]}` or set {MODEL_ENV}")


@dataclass(frozen=True)
class Detection:
    marked: bool
    confidence: float   # the mean of the rounded bits, as `perth --extract` prints it
    score: float        # get_watermark(round=False): NaN for digital silence


def _samples(samples, sample_rate) -> tuple[np.ndarray, int]:
    from engine_native.audio import to_mono

    if isinstance(sample_rate, (float, np.floating)) and float(sample_rate).is_integer():
        sample_rate = int(sample_rate)
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
        raise ParameterError(f"sample_rate must be an integer number of Hz, got {sample_rate!r}")
    try:
        x = to_mono(samples)
    except ValueError as e:
        raise ParameterError(str(e)) from None
    return x, int(sample_rate)


class Watermarker:
    """The Perth watermarker and detector over one perth.gguf; calls may come from any thread."""

    def __init__(self, path: str | os.PathLike | None = None, *, threads: int = 0,
                 data_dirs: Iterable[str | os.PathLike] = ()):
        from engine_native import _core

        self.path = Path(path) if path is not None else find_model(data_dirs)
        if not self.path.is_file():
            raise ModelError(f"{self.path}: watermark model not found")
        self.threads = int(threads)
        self._native = _core.PerthWatermarker(str(self.path))

    @property
    def sample_rate(self) -> int:
        """The rate the model works at (32 kHz); any input rate is resampled to it and back."""
        return self._native.sample_rate

    def min_samples(self, sample_rate: int) -> int:
        """The shortest audio `apply` and `bits` accept at `sample_rate`."""
        return self._native.min_samples(int(sample_rate))

    def apply(self, samples, sample_rate: int, *, keep_length: bool = False) -> np.ndarray:
        """`PerthImplicitWatermarker().apply_watermark(samples, sample_rate=sample_rate)`: float32.
        That is up to one STFT hop (10 ms) shorter than the input; with `keep_length` the
        input's own last samples follow, so the result is as long as the input."""
        x, rate = _samples(samples, sample_rate)
        y = self._native.apply(x, rate, self.threads)
        if keep_length and len(y) < len(x):
            y = np.concatenate([y, x[len(y):]])
        return y[: len(x)] if keep_length else y

    def bits(self, samples, sample_rate: int) -> np.ndarray:
        """`get_watermark(samples, sample_rate, round=False)`: the decoder's score in [0, 1]
        (a 0-d float32 array, as the reference returns it; NaN for digital silence)."""
        x, rate = _samples(samples, sample_rate)
        return np.asarray(self._native.decode(x, rate, self.threads)["score"], dtype=np.float32)

    def decode(self, samples, sample_rate: int) -> dict:
        """The detector's workings: `score` and, per branch (slow, normal, fast), each frame's
        attention and mark logits, the frame mask, and their masked means."""
        x, rate = _samples(samples, sample_rate)
        return self._native.decode(x, rate, self.threads)

    def detect(self, samples, sample_rate: int) -> Detection:
        """Whether the audio carries the Perth mark (get_watermark rounded: marked when 1).
        ParameterError for audio shorter than MIN_DETECT_SECONDS."""
        x, rate = _samples(samples, sample_rate)
        if len(x) == 0:
            raise ParameterError("the audio is empty")
        if len(x) < MIN_DETECT_SECONDS * rate:
            raise ParameterError(f"the audio is too short to check for a watermark ({len(x) / rate:.2f} s; "
                                 f"at least {MIN_DETECT_SECONDS:g} s needed)")
        # The verdict's products may run on AMX (bf16x3: the score moves by ~1e-5, the rounding
        # not at all unless it sits at 0.5); bits() and decode() stay in exact f32.
        score = float(self._native.decode(x, rate, self.threads, True)["score"])
        if math.isnan(score):   # no frame loud enough to read: nothing to find
            return Detection(False, 0.0, score)
        bit = float(np.round(np.float32(score)))   # numpy rounds half to even, as torch.round
        return Detection(bit == 1.0, bit, score)


_default: Watermarker | None = None
_default_lock = threading.Lock()


def default_watermarker() -> Watermarker:
    """One Watermarker over find_model(), loaded on first use and shared."""
    global _default
    with _default_lock:
        if _default is None or (os.environ.get(MODEL_ENV) and str(_default.path) != os.environ[MODEL_ENV]):
            _default = Watermarker()
        return _default


__all__ = ["Detection", "EngineError", "MIN_DETECT_SECONDS", "MODEL_ENV", "MODEL_FILE", "Watermarker",
           "default_watermarker", "find_model"]
