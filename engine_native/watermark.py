"""Resemble AI's Perth implicit watermark: mark audio as machine-made, and check audio for it.

    from engine_native.watermark import Watermarker
    wm = Watermarker()                          # perth.gguf, found by find_model()
    marked = wm.apply(samples, 24000)           # what PerthImplicitWatermarker().apply_watermark returns
    wm.detect(marked, 24000)                    # Detection(marked=True, confidence=1.0, score=0.98...)
    marker = wm.stream(24000)                   # a clip that comes in pieces (a streamed sentence)
    out = marker.push(piece) ... marker.push(last, final=True)

The official chatterbox-tts passes every output through `perth.PerthImplicitWatermarker`
(resemble-perth 1.0.1, MIT); this is the same watermarker and detector in the native engine
(src/watermark/perth.h, at the model's 32 kHz), with the package's trained weights converted
once into `perth.gguf` (`chatterbox-studio watermark-model`, or `python -m
engine_native.convert.perth --download CACHE -o perth.gguf`; scripts/setup.sh does it). The
reference resamples with librosa on the way in and out; so does this, through the libraries
librosa calls (engine_native.audio: soxr HQ for apply, scipy's resample_poly for the
detector). Audio marked by either is recognised by both.

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
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine_native.audio import resample_polyphase, resample_soxr
from engine_native.errors import EngineError, ModelError, ParameterError

MODEL_ENV = "CBS_WATERMARK_MODEL"
MODEL_FILE = "perth.gguf"
# The command that fetches resemble-perth's wheel and converts it into the data folder.
MAKE_MODEL_COMMAND = "chatterbox-studio watermark-model"
# Below this the detector's verdict is not worth giving (fewer than ~100 frames).
MIN_DETECT_SECONDS = 1.0
# The rates a recording may come at (Hz).
MIN_RATE, MAX_RATE = 1000, 768000


def find_model(data_dirs: Iterable[str | os.PathLike] = ()) -> Path:
    """perth.gguf: $CBS_WATERMARK_MODEL, else the first of `data_dirs` and the app's data
    folder (engine_native.paths; an earlier version's doubled one until the app moves it) that
    holds it, else beside this package (a bundled app ships it there). ModelError naming the
    places looked at and the command that makes it."""
    from engine_native.paths import data_dir, legacy_data_dir

    env = os.environ.get(MODEL_ENV)
    if env:
        if not os.path.isfile(env):
            raise ModelError(f"{MODEL_ENV}={env}: no such watermark model file")
        return Path(env)
    places = [Path(d) / MODEL_FILE for d in (*data_dirs, data_dir(), legacy_data_dir())]
    places.append(Path(__file__).resolve().parent / MODEL_FILE)
    for p in places:
        if p.is_file():
            return p
    raise ModelError(f"the watermark model {MODEL_FILE} was not found (looked in: {', '.join(map(str, places))}); "
                     f"`{MAKE_MODEL_COMMAND}` makes it (or set {MODEL_ENV})")


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
    if not MIN_RATE <= sample_rate <= MAX_RATE:
        raise ParameterError(f"sample rate must be between {MIN_RATE} and {MAX_RATE} Hz, got {sample_rate}")
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
        """The shortest audio `apply` and `bits` accept at `sample_rate`: enough, once resampled
        as librosa resamples it, for the STFT's reflection padding."""
        ratio = float(self.sample_rate) / int(sample_rate)
        need = self._native.min_length
        n = max(1, math.ceil(need / ratio))
        while n > 1 and math.ceil((n - 1) * ratio) >= need:
            n -= 1
        while math.ceil(n * ratio) < need:
            n += 1
        return n

    def _checked(self, samples, sample_rate) -> tuple[np.ndarray, int]:
        x, rate = _samples(samples, sample_rate)
        if x.size == 0:
            raise ParameterError("the audio is empty")
        need = self.min_samples(rate)
        if x.size < need:
            raise ParameterError(f"the audio is too short for the watermark: {x.size} samples at {rate} Hz, at "
                                 f"least {need} needed")
        if not np.isfinite(x).all():
            raise ParameterError("the audio holds NaN or infinite samples")
        return x, rate

    def _mark(self, x: np.ndarray, rate: int, threads: int, clip_start=True, clip_end=True,
              loudest: float = 0.0) -> tuple[np.ndarray, float]:
        """apply_watermark on checked samples (a stretch of a clip: see src/watermark/perth.h's
        PerthWindow): the marked samples, the loudest frame."""
        y, loudest = self._native.apply(resample_soxr(x, rate, self.sample_rate), threads, clip_start, clip_end,
                                        loudest)
        return resample_soxr(y, self.sample_rate, rate), loudest

    def apply(self, samples, sample_rate: int, *, keep_length: bool = False) -> np.ndarray:
        """`PerthImplicitWatermarker().apply_watermark(samples, sample_rate=sample_rate)`: float32.
        That is up to one STFT hop (10 ms) shorter than the input; with `keep_length` the
        input's own last samples follow, so the result is as long as the input."""
        x, rate = self._checked(samples, sample_rate)
        y, _ = self._mark(x, rate, self.threads)
        return _with_length(y, x) if keep_length else y

    def stream(self, sample_rate: int, *, threads: int | None = None) -> StreamMarker:
        """A marker for one clip that arrives in pieces (see StreamMarker)."""
        _samples(np.zeros(0, np.float32), sample_rate)   # the rate's checks
        return StreamMarker(self, int(sample_rate), self.threads if threads is None else threads)

    def _model_rate(self, samples, sample_rate) -> np.ndarray:
        x, rate = self._checked(samples, sample_rate)
        return resample_polyphase(x, rate, self.sample_rate)

    def bits(self, samples, sample_rate: int) -> np.ndarray:
        """`get_watermark(samples, sample_rate, round=False)`: the decoder's score in [0, 1]
        (a 0-d float32 array, as the reference returns it; NaN for digital silence)."""
        return np.asarray(self._native.decode(self._model_rate(samples, sample_rate), self.threads)["score"],
                          dtype=np.float32)

    def decode(self, samples, sample_rate: int) -> dict:
        """The detector's workings: `score` and, per branch (slow, normal, fast), each frame's
        attention and mark logits, the frame mask, and their masked means."""
        return self._native.decode(self._model_rate(samples, sample_rate), self.threads)

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
        score = float(self._native.decode(self._model_rate(x, rate), self.threads, True)["score"])
        if math.isnan(score):   # no frame loud enough to read: nothing to find
            return Detection(False, 0.0, score)
        bit = float(np.round(np.float32(score)))   # numpy rounds half to even, as torch.round
        return Detection(bit == 1.0, bit, score)


def _with_length(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The marked `y` as long as its input `x`: x's own last samples after it (the STFT leaves
    up to one hop unmarked at the end)."""
    return np.concatenate([y, x[len(y):]]) if len(y) < len(x) else y[: len(x)]


@lru_cache(maxsize=32)
def _resampler_reach(src: int, dst: int) -> float:
    """Seconds each side that one input sample reaches in soxr HQ's output (its filter's
    half-length, down to 1e-6 of the peak): where a cut's edge still shows."""
    if src == dst:
        return 0.0
    import soxr

    n = 4 * max(src, dst) // min(src, dst) * 512
    impulse = np.zeros(2 * n, np.float32)
    impulse[n] = 1.0
    y = np.abs(soxr.resample(impulse, src, dst, quality="HQ"))
    above = np.nonzero(y > 1e-6 * y.max())[0]
    centre = n * dst / src
    return max(centre - above[0], above[-1] - centre) / dst


# A streamed clip's pieces: the last STREAM_HOLDBACK_SECONDS of what has come are held back
# (marked with only that much audio after them, and a mirror image of the audio beyond: see
# StreamMarker); the first STREAM_CROSSFADE_SECONDS of them come with the next push, blended
# from that marking into the next one's. Measured on real speech cut into 0.16 to 1 s pieces,
# the joined pieces against the whole clip marked at once: rel 1e-4 to 5e-4 with 50 ms, 6e-4
# to 2.3e-3 with 28 ms, 5e-5 to 3e-4 with 100 ms (docs/CPU.md); a streamed chunk's first audio
# comes this much shorter.
STREAM_HOLDBACK_SECONDS = 0.05
STREAM_CROSSFADE_SECONDS = 0.010


class StreamMarker:
    """Marks one clip that arrives in pieces (a streamed sentence) the way `apply` marks it
    whole: `push(samples)` returns the marked audio that is ready (a little less than came
    in: the held-back rest comes with the next push), `push(samples, final=True)` the rest.
    The pieces joined are as long as the clip and its mark the whole clip's, but for the
    audio around each seam.

    Each push marks a stretch: the samples not yet out, with `context` seconds before them
    (the STFT's two half-windows, the encoder's receptive field and the resamplers' reach: the
    samples after that context are marked as in the whole clip, whose frames the stretch's are:
    it starts on a whole hop of the model's STFT) and everything that has come after them.
    The stretch's end is not the clip's: beyond it the marker puts the stretch's own last
    `context` seconds time-reversed (their spectra are those of the speech before, as the
    whole clip's next frames mostly are; silence or the STFT's reflection of a few ms would
    tell the encoder the clip ends there), and returns all but the last `holdback` seconds;
    the next push, which has the audio that really follows, blends its own marking of the
    first STREAM_CROSSFADE_SECONDS of them into the held-back one (no seam). The frame mask's
    threshold uses the loudest frame so far (the whole clip's its loudest overall: they differ
    only where a later frame is louder and an earlier one sits between the two thresholds, near
    digital silence). A clip too short for the model (`Watermarker.min_samples`) comes back
    unmarked (`marked` is then False)."""

    def __init__(self, wm: Watermarker, sample_rate: int, threads: int):
        self._wm, self.rate, self._threads = wm, sample_rate, threads
        native, model = wm._native, wm.sample_rate
        self._step = Fraction(native.hop * sample_rate, model).numerator
        reach = _resampler_reach(sample_rate, model) + _resampler_reach(model, sample_rate)
        exact = (native.n_fft + native.hop * (native.encoder_radius + 1)) / model + reach
        self._context = self._ceil_step(math.ceil(exact * sample_rate))
        self.context = self._context / sample_rate
        # At least: the hop the stretch's own STFT leaves unmarked at its end, the resamplers'
        # reach, and the samples the next push blends.
        self._crossfade = max(1, round(STREAM_CROSSFADE_SECONDS * sample_rate))
        edge = math.ceil((native.hop / model + reach) * sample_rate)
        self._holdback = max(round(STREAM_HOLDBACK_SECONDS * sample_rate), edge + self._crossfade)
        self.holdback = self._holdback / sample_rate
        self._min = wm.min_samples(sample_rate)
        self._kept = np.zeros(0, np.float32)   # the clip's samples from `_kept_from` on
        self._kept_from = 0
        self._emitted = 0                      # samples returned so far
        self._pending = np.zeros(0, np.float32)  # the last stretch's marking of what follows them
        self._loudest = 0.0
        self.marked = True
        self.done = False

    def _ceil_step(self, n: int) -> int:
        return -(-n // self._step) * self._step

    def push(self, samples, final: bool = False, *, threads: int | None = None) -> np.ndarray:
        """The marked samples ready after `samples` (float32 at the marker's rate); `threads`
        for this push's computation (default: the marker's)."""
        if self.done:
            raise ParameterError("the clip is complete: this marker takes no more audio")
        x = np.asarray(samples, np.float32).reshape(-1)
        if x.size and not np.isfinite(x).all():
            raise ParameterError("the audio holds NaN or infinite samples")
        self._kept = np.concatenate([self._kept, x]) if self._kept.size else x.copy()
        n = self._kept_from + self._kept.size
        end = n if final else n - self._holdback
        self.done = final
        if end <= self._emitted:
            return np.zeros(0, np.float32)
        start = max(0, (self._emitted - self._context) // self._step * self._step)
        stretch = self._kept[start - self._kept_from:]
        if stretch.size < self._min:
            if not final:
                return np.zeros(0, np.float32)
            self.marked = False   # the whole clip is shorter than the model reads
            return stretch[self._emitted - start:].copy()
        padded = stretch if final else np.concatenate([stretch, stretch[::-1][: self._context]])
        y, self._loudest = self._wm._mark(padded, self.rate, self._threads if threads is None else threads,
                                          clip_start=start == 0, clip_end=final, loudest=self._loudest)
        y = _with_length(y, padded)
        out = y[self._emitted - start:end - start].copy()
        blend = min(self._pending.size, out.size)
        if blend:
            ramp = 0.5 - 0.5 * np.cos(np.pi * (np.arange(blend) + 0.5) / self._pending.size)
            out[:blend] = (self._pending[:blend] * (1.0 - ramp) + out[:blend] * ramp).astype(np.float32)
        self._pending = y[end - start:end - start + self._crossfade].copy() if not final else self._pending[:0]
        self._emitted = end
        keep_from = max(0, (end - self._context) // self._step * self._step)
        if keep_from > self._kept_from:
            self._kept = self._kept[keep_from - self._kept_from:]
            self._kept_from = keep_from
        return out


_default: Watermarker | None = None
_default_lock = threading.Lock()


def default_watermarker() -> Watermarker:
    """One Watermarker over find_model(), loaded on first use and shared."""
    global _default
    with _default_lock:
        if _default is None or (os.environ.get(MODEL_ENV) and str(_default.path) != os.environ[MODEL_ENV]):
            _default = Watermarker()
        return _default


__all__ = ["Detection", "EngineError", "MAKE_MODEL_COMMAND", "MIN_DETECT_SECONDS", "MODEL_ENV", "MODEL_FILE",
           "StreamMarker", "Watermarker", "default_watermarker", "find_model"]
