"""Where the speech is: silence detection with ffmpeg `silencedetect` semantics, in numpy.

Every cloning path (Engine.voice_from_audio, `bake`, `say --ref`, the Voice Lab) checks a
recording with `check_speech` first, so a recording without enough speech is refused the
same way everywhere.

ffmpeg's af_silencedetect (default, non-mono mode) walks the interleaved samples: a
sample is silent when its absolute value is below the linear noise threshold; any
non-silent sample, in any channel, resets the count. Once the run of silent samples
reaches `d` seconds, a silence starts at the first sample of the run; it ends at the
first non-silent sample (or at the end of the stream). So a silence is a stretch of at
least `d` seconds in which *every* channel stays below the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Settings for speech recordings (speech vs pauses between phrases): `silencedetect=noise=-30dB:d=0.3`.
DEFAULT_NOISE_DB = -30.0
DEFAULT_MIN_SILENCE = 0.3


@dataclass(frozen=True)
class Span:
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_list(self) -> list[float]:
        return [round(self.start, 4), round(self.end, 4)]


def db_to_amplitude(db: float) -> float:
    return float(10.0 ** (db / 20.0))


def silent_runs(samples: np.ndarray, rate: int, noise_db: float = DEFAULT_NOISE_DB,
                min_duration: float = DEFAULT_MIN_SILENCE) -> list[tuple[int, int]]:
    """Silences as [start, end) frame indices. `samples` is (frames,) or (frames, channels)."""
    x = np.asarray(samples)
    if x.ndim == 1:
        x = x[:, None]
    n = x.shape[0]
    if n == 0:
        return []
    noise = db_to_amplitude(noise_db)
    silent = np.all(np.abs(x) < noise, axis=1)
    # run boundaries of the boolean mask
    padded = np.concatenate(([False], silent, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    starts, ends = edges[0::2], edges[1::2]
    # ffmpeg rescales d (microseconds) to samples with rounding to nearest
    need = max(1, int(round(min_duration * rate)))
    keep = (ends - starts) >= need
    return [(int(s), int(e)) for s, e in zip(starts[keep], ends[keep])]


def detect_silence(samples: np.ndarray, rate: int, noise_db: float = DEFAULT_NOISE_DB,
                   min_duration: float = DEFAULT_MIN_SILENCE) -> list[Span]:
    """Silent spans in seconds, as ffmpeg's silencedetect would report them."""
    return [Span(s / rate, e / rate) for s, e in silent_runs(samples, rate, noise_db, min_duration)]


def speech_regions(silences: list[Span], duration: float) -> list[Span]:
    """The complement of the silences within [0, duration]: the speech regions."""
    regions: list[Span] = []
    t = 0.0
    for s in silences:
        if s.start > t:
            regions.append(Span(t, s.start))
        t = max(t, s.end)
    if duration > t:
        regions.append(Span(t, duration))
    return [r for r in regions if r.duration > 0]


def speech_seconds(samples: np.ndarray, rate: int, noise_db: float = DEFAULT_NOISE_DB,
                   min_silence: float = DEFAULT_MIN_SILENCE) -> float:
    """Seconds of speech: the recording less its silences (`silencedetect` at noise_db / min_silence)."""
    n = np.asarray(samples).shape[0]
    silent = sum(e - s for s, e in silent_runs(samples, rate, noise_db, min_silence))
    return (n - silent) / rate


def check_speech(samples: np.ndarray, rate: int, minimum: float, noise_db: float = DEFAULT_NOISE_DB,
                 min_silence: float = DEFAULT_MIN_SILENCE) -> float:
    """The seconds of speech in a recording meant for cloning, or the Voice Lab's refusal:
    SilentAudioError without speech, VoiceTooShortError with `minimum` seconds or less."""
    from engine_native.errors import SilentAudioError, VoiceTooShortError

    x = np.asarray(samples)
    if x.size == 0 or not np.any(x):
        raise SilentAudioError("no speech found: the recording is digital silence")
    total = speech_seconds(x, rate, noise_db, min_silence)
    if total <= 0:
        raise SilentAudioError(f"no speech found: nothing is louder than {noise_db:g} dBFS "
                               f"for more than {min_silence:g} s")
    if total <= minimum:
        raise VoiceTooShortError(f"only {total:.2f} s of speech found; cloning needs more than {minimum:.1f} s")
    return total
