"""Generated test recordings with known speech and silence spans.

Speech is real synthetic speech from espeak-ng (22.05 kHz mono), laid out as
1.0 s silence, ~6 s speech, 1.5 s silence, ~4 s speech, 1.0 s silence, plus white
noise at -60 dBFS RMS, then encoded with ffmpeg to each format under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np

ESPEAK_RATE = 22050
LOUD = 0.1  # a speech piece starts and ends on a sample at least this loud
SENTENCES = [
    "the quick brown fox jumps over the lazy dog and keeps on running far away",
    "she sells sea shells by the sea shore while the gulls circle overhead",
    "a journey of a thousand miles begins with one small step forward today",
    "every voice has a colour of its own that listeners recognise at once",
]

# (name, extension, ffmpeg codec args)
FORMATS = [
    ("wav", "wav", ["-c:a", "pcm_s16le"]),
    ("flac", "flac", ["-c:a", "flac"]),
    ("mp3_128k", "mp3", ["-c:a", "libmp3lame", "-b:a", "128k"]),
    ("opus_18k", "opus", ["-c:a", "libopus", "-b:a", "18k"]),
    ("m4a", "m4a", ["-c:a", "aac", "-b:a", "128k"]),
]
# (name, rate, channels)
LAYOUTS = [("stereo44k", 44100, 2), ("mono8k", 8000, 1)]


def tools_available() -> bool:
    return all(shutil.which(t) for t in ("ffmpeg", "ffprobe", "espeak-ng"))


def espeak(text: str, folder: str, idx: int) -> np.ndarray:
    import soundfile as sf

    path = os.path.join(folder, f"espeak_{idx}.wav")
    if not os.path.exists(path):
        # Without LD_PRELOAD: under scripts/sanitizer_tests.sh (ASan's runtime preloaded)
        # espeak-ng deadlocks in a futex before writing anything.
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        subprocess.run(["espeak-ng", "-s", "160", "-w", path, text], check=True, capture_output=True, env=env,
                       timeout=120)
    x, sr = sf.read(path, dtype="float32")
    assert sr == ESPEAK_RATE, sr
    return x


def speech_stream(folder: str) -> np.ndarray:
    """All sentences, each trimmed to its loud part, joined with 80 ms gaps, peak 0.5."""
    parts = []
    for i, text in enumerate(SENTENCES):
        x = espeak(text, folder, i)
        x = x / np.max(np.abs(x))
        loud = np.flatnonzero(np.abs(x) >= LOUD)
        parts.append(x[loud[0] : loud[-1] + 1])
        parts.append(np.zeros(int(0.08 * ESPEAK_RATE), np.float32))
    return (0.5 * np.concatenate(parts)).astype(np.float32)


def speech_piece(stream: np.ndarray, offset: int, seconds: float) -> tuple[np.ndarray, int]:
    """About `seconds` of speech from `offset`, starting and ending on a loud sample."""
    a = offset + int(np.flatnonzero(np.abs(stream[offset:]) >= LOUD * 0.5)[0])
    b = a + int(seconds * ESPEAK_RATE)
    loud = np.flatnonzero(np.abs(stream[a:b]) >= LOUD * 0.5)
    b = a + int(loud[-1]) + 1
    return stream[a:b].copy(), b


@dataclass
class Recording:
    samples: np.ndarray  # 22.05 kHz mono float32
    rate: int
    speech: list[tuple[float, float]] = field(default_factory=list)  # known speech spans (s)

    @property
    def duration(self) -> float:
        return self.samples.shape[0] / self.rate


def build_recording(folder: str, layout=(1.0, 6.0, 1.5, 4.0, 1.0), noise_dbfs: float = -60.0,
                    seed: int = 0) -> Recording:
    """silence, speech, silence, speech, ... (seconds, alternating, starting with silence)."""
    stream = speech_stream(folder)
    sr = ESPEAK_RATE
    out, spans, t, offset = [], [], 0, 0
    for i, sec in enumerate(layout):
        if i % 2 == 0:
            n = int(round(sec * sr))
            out.append(np.zeros(n, np.float32))
            t += n
        else:
            piece, offset = speech_piece(stream, offset, sec)
            spans.append((t / sr, (t + piece.shape[0]) / sr))
            out.append(piece)
            t += piece.shape[0]
    x = np.concatenate(out)
    rms = 10 ** (noise_dbfs / 20)
    x = x + np.random.default_rng(seed).normal(0.0, rms, x.shape[0]).astype(np.float32)
    return Recording(x.astype(np.float32), sr, spans)


def write_wav(path: str, rec: Recording) -> str:
    import soundfile as sf

    sf.write(path, rec.samples, rec.rate, subtype="FLOAT")
    return path


def encode(src_wav: str, dst: str, rate: int, channels: int, codec_args: list[str]) -> str:
    """Encode at `rate` / `channels`. Opus has no 44.1 kHz: such a source is coded at 48 kHz."""
    if "libopus" in codec_args and rate not in (8000, 12000, 16000, 24000, 48000):
        rate = 48000
    subprocess.run(
        ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i", src_wav,
         "-ar", str(rate), "-ac", str(channels), *codec_args, dst],
        check=True, capture_output=True,
    )
    return dst


def encode_video(src_wav: str, dst: str) -> str:
    """An MP4 with a small video track and the recording as its AAC audio track."""
    subprocess.run(
        ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
         "-f", "lavfi", "-i", "color=c=black:s=64x64:r=5", "-i", src_wav, "-shortest",
         "-map", "0:v", "-map", "1:a", "-c:v", "mpeg4", "-c:a", "aac", "-b:a", "128k", dst],
        check=True, capture_output=True,
    )
    return dst


def ffmpeg_silencedetect(path: str, noise: str = "-30dB", d: float = 0.3) -> list[tuple[float, float | None]]:
    """ffmpeg's own silencedetect on a file: [(start, end or None)] from its log."""
    import re

    r = subprocess.run(
        ["ffmpeg", "-nostdin", "-hide_banner", "-nostats", "-i", path,
         "-af", f"silencedetect=noise={noise}:d={d}", "-f", "null", "-"],
        check=True, capture_output=True, text=True,
    )
    spans: list[list] = []
    for m in re.finditer(r"silence_(start|end): (-?[0-9.]+)", r.stderr):
        kind, t = m.group(1), float(m.group(2))
        if kind == "start":
            spans.append([t, None])
        elif spans and spans[-1][1] is None:
            spans[-1][1] = t
    return [(s, e) for s, e in spans]
