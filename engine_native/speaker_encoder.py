"""A trained speaker encoder on its own: Resemblyzer's GE2E weights in our VoiceEncoder.

    from engine_native.speaker_encoder import SpeakerEncoder
    enc = SpeakerEncoder("ge2e-resemblyzer-0.1.4.gguf")   # engine_native.convert.ge2e writes it
    e = enc.embed(samples, rate)                            # L2-normalised [256]

The file is a small GGUF (about 5 MB) holding one VoiceEncoder (`ve.*`), its mel filterbank
and Resemblyzer's framing; `_core.ModelFile` + `_core.VoiceEncoder` load it as they load a
model's encoder, so the network and the mel are the same code as T3's speaker encoder.

`embed` prepares audio as Resemblyzer's `preprocess_wav` does, less its WebRTC VAD: mono,
resampled to 16 kHz (soxr), RMS raised to -30 dBFS (never lowered), then pauses longer
than MAX_PAUSE_SECONDS shortened to that length (quiet 30 ms frames found by level: more
than 40 dB under the loudest frame or under -60 dBFS), keeping 90 ms beside speech on each
side, as Resemblyzer keeps 3 x 30 ms VAD windows each side of what its VAD calls voiced. `embed_prepared` skips all of that (the
parity test feeds it Resemblyzer's own preprocessed audio).
"""

from __future__ import annotations

import os
import threading

import numpy as np

from engine_native.audio import resample_soxr, usable_mono
from engine_native.errors import EngineError, ModelError, VoiceError

SAMPLE_RATE = 16000
FRAME_SECONDS = 0.03
MAX_PAUSE_SECONDS = 0.18
QUIET_BELOW_PEAK_DB = 40.0
QUIET_FLOOR_DBFS = -60.0
VARIANT = "speaker-encoder"


def normalise_volume(x: np.ndarray, target_dbfs: float) -> np.ndarray:
    """RMS raised to target_dbfs; a louder recording is left as it is (Resemblyzer's rule)."""
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0
    if rms <= 0.0:
        return x
    gain_db = target_dbfs - 20.0 * np.log10(rms)
    return x if gain_db <= 0 else (x * np.float32(10.0 ** (gain_db / 20.0))).astype(np.float32)


def shorten_pauses(x: np.ndarray, rate: int, max_pause: float = MAX_PAUSE_SECONDS) -> np.ndarray:
    """`x` with every run of quiet 30 ms frames cut to `max_pause`, half of it beside the
    speech at each end of the run (so a leading or trailing run keeps half)."""
    n = int(FRAME_SECONDS * rate)
    frames = x.size // n
    if frames < 2:
        return x
    level = 10.0 * np.log10(np.mean(np.square(x[: frames * n].reshape(frames, n), dtype=np.float64), axis=1) + 1e-20)
    quiet = level < max(level.max() - QUIET_BELOW_PEAK_DB, QUIET_FLOOR_DBFS)
    keep_frames = max(1, int(round(max_pause / FRAME_SECONDS)))
    keep = np.ones(frames, bool)
    i = 0
    while i < frames:
        if not quiet[i]:
            i += 1
            continue
        j = i
        while j < frames and quiet[j]:
            j += 1
        half = keep_frames // 2
        head = half if i > 0 else 0             # beside the speech before the run ...
        tail = half if j < frames else 0        # ... and after it
        if j - i > head + tail:
            keep[i + head:j - tail] = False
        i = j
    mask = np.repeat(keep, n)
    return np.concatenate([x[: frames * n][mask], x[frames * n:]]) if mask.any() else x


class SpeakerEncoder:
    """A speaker-encoder GGUF (engine_native.convert.ge2e) ready to embed audio."""

    def __init__(self, path: str | os.PathLike, threads: int = 0):
        from engine_native import _core

        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise ModelError(f"{self.path}: speaker encoder file not found")
        self._file = _core.ModelFile(self.path, "cpu", threads)
        if self._file.variant != VARIANT:
            raise ModelError(f"{self.path}: not a speaker encoder (a Chatterbox {self._file.variant} file); "
                             f"convert Resemblyzer's wheel with engine_native.convert.ge2e")
        self._ve = _core.VoiceEncoder(self._file)
        self._threads = threads
        self._volume_dbfs = float(self._file.get_float("chatterbox.speaker_encoder.volume_dbfs"))
        self.source = self._file.get_string("chatterbox.speaker_encoder.source")
        self.embed_dim = int(self._file.get_int("chatterbox.ve.embed_dim"))
        self._lock = threading.Lock()

    def prepare(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """Any audio -> what embed_prepared takes (see the module)."""
        mono = usable_mono(samples)
        if not isinstance(sample_rate, (int, np.integer)) or sample_rate < 1000:
            raise VoiceError(f"sample_rate must be an integer >= 1000, got {sample_rate!r}")
        wav = resample_soxr(mono, int(sample_rate), SAMPLE_RATE) if sample_rate != SAMPLE_RATE else mono
        wav = normalise_volume(np.asarray(wav, np.float32), self._volume_dbfs)
        return shorten_pauses(wav, SAMPLE_RATE)

    def embed_prepared(self, wav16k: np.ndarray) -> np.ndarray:
        with self._lock:
            try:
                return np.asarray(self._ve.embed(np.ascontiguousarray(wav16k, np.float32), threads=self._threads),
                                  np.float32).reshape(-1)
            except EngineError as e:
                raise VoiceError(f"cannot embed this audio: {e}") from None

    def embed(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """The L2-normalised speaker embedding of any audio (mono or (n, channels), any rate)."""
        return self.embed_prepared(self.prepare(samples, sample_rate))

    __call__ = embed
