"""Probe and decode any recording ffmpeg can read; soundfile is the fallback without ffmpeg."""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass

import numpy as np

from voice_lab.errors import EmptyAudioError, FfmpegMissingError, NotAudioError, VoiceLabError

_LOSSLESS_PCM_PREFIX = "pcm_"


def _which(name: str) -> str | None:
    """Indirection so tests can pretend a tool is missing."""
    return shutil.which(name)


def ffmpeg_available() -> bool:
    return _which("ffmpeg") is not None and _which("ffprobe") is not None


@dataclass
class Probe:
    """What the source file is. `bit_rate` is the audio stream's bits per second where known."""

    path: str
    container: str
    codec: str
    duration: float
    bit_rate: int | None
    channels: int
    sample_rate: int
    has_video: bool
    probed_with: str  # "ffprobe" or "soundfile"

    def to_dict(self) -> dict:
        return asdict(self)


def _check_exists(path: str) -> None:
    if not os.path.exists(path):
        raise VoiceLabError(f"{path}: no such file")
    if os.path.isdir(path):
        raise NotAudioError(f"{path}: is a folder, not an audio file")


def _int_or_none(v) -> int | None:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


def probe(path: str) -> Probe:
    """Duration, codec, bitrate, channels and rate (ffprobe; soundfile without ffmpeg)."""
    path = os.fspath(path)
    _check_exists(path)
    if not ffmpeg_available():
        return _probe_soundfile(path)
    import ffmpeg  # ffmpeg-python

    try:
        info = ffmpeg.probe(path)
    except ffmpeg.Error as e:
        detail = _last_line(e.stderr)
        raise NotAudioError(f"{path}: not an audio file ffmpeg can read ({detail})") from None
    streams = info.get("streams", [])
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    if not audio:
        raise NotAudioError(f"{path}: has no audio track")
    a = audio[0]
    fmt = info.get("format", {})
    has_video = any(
        s.get("codec_type") == "video" and not s.get("disposition", {}).get("attached_pic") for s in streams
    )
    duration = a.get("duration") or fmt.get("duration") or 0.0
    bit_rate = _int_or_none(a.get("bit_rate"))
    if bit_rate is None and len(streams) == 1:
        bit_rate = _int_or_none(fmt.get("bit_rate"))  # e.g. Ogg/Opus: only the container knows
    return Probe(
        path=path,
        container=fmt.get("format_name", ""),
        codec=a.get("codec_name", "unknown"),
        duration=float(duration),
        bit_rate=bit_rate,
        channels=int(a.get("channels") or 0),
        sample_rate=int(a.get("sample_rate") or 0),
        has_video=has_video,
        probed_with="ffprobe",
    )


def _probe_soundfile(path: str) -> Probe:
    import soundfile as sf

    try:
        info = sf.info(path)
    except Exception:  # noqa: BLE001 - soundfile raises several types for unreadable files
        ext = os.path.splitext(path)[1] or "this"
        raise FfmpegMissingError(
            f"{path}: reading {ext} files needs ffmpeg, which is not installed "
            "(without it only WAV, FLAC, OGG/Vorbis and other formats libsndfile reads work); "
            "install ffmpeg, e.g. `apt install ffmpeg`"
        ) from None
    sub = (info.subtype or "").lower()
    fmt = (info.format or "").lower()
    if fmt == "flac":
        codec = "flac"
    else:
        codec = {
            "vorbis": "vorbis", "opus": "opus", "mpeg_layer_iii": "mp3",
            "float": "pcm_f32le", "double": "pcm_f64le",
        }.get(sub, sub if sub.startswith("pcm") else (sub or "unknown"))
    bit_rate = None
    if codec.startswith("pcm") and info.duration > 0:
        bit_rate = int(os.path.getsize(path) * 8 / info.duration)
    return Probe(
        path=path,
        container=(info.format or "").lower(),
        codec=codec,
        duration=float(info.duration),
        bit_rate=bit_rate,
        channels=int(info.channels),
        sample_rate=int(info.samplerate),
        has_video=False,
        probed_with="soundfile",
    )


def _last_line(stderr: bytes | None) -> str:
    text = (stderr or b"").decode("utf-8", "replace").strip().splitlines()
    return text[-1].strip() if text else "unknown error"


def decode(path: str, rate: int | None = None, channels: int | None = None, info: Probe | None = None):
    """Decode the first audio track to float32 of shape (frames, channels).

    `rate` / `channels` of None keep the source's own. Returns (samples, rate).
    """
    path = os.fspath(path)
    info = info or probe(path)
    out_rate = int(rate or info.sample_rate)
    out_ch = int(channels or info.channels)
    if out_rate <= 0 or out_ch <= 0:
        raise NotAudioError(f"{path}: the audio track has no sample rate or channels")
    if info.probed_with == "soundfile":
        x = _decode_soundfile(path, out_rate, out_ch)
    else:
        x = _decode_ffmpeg(path, out_rate, out_ch)
    if x.shape[0] == 0:
        raise EmptyAudioError(f"{path}: the recording is empty (zero length)")
    return x, out_rate


def _decode_ffmpeg(path: str, rate: int, channels: int) -> np.ndarray:
    import ffmpeg

    stream = ffmpeg.input(path)["a:0"].output(
        "pipe:", format="f32le", acodec="pcm_f32le", ar=rate, ac=channels
    )
    try:
        out, _ = stream.run(capture_stdout=True, capture_stderr=True, quiet=True)
    except ffmpeg.Error as e:
        raise NotAudioError(f"{path}: ffmpeg could not decode the audio ({_last_line(e.stderr)})") from None
    except FileNotFoundError:
        raise FfmpegMissingError("ffmpeg is not installed (needed to decode this file)") from None
    return np.frombuffer(out, dtype="<f4").reshape(-1, channels).astype(np.float32, copy=True)


def _decode_soundfile(path: str, rate: int, channels: int) -> np.ndarray:
    import soundfile as sf

    try:
        x, sr = sf.read(path, dtype="float32", always_2d=True)
    except Exception as e:  # noqa: BLE001
        raise NotAudioError(f"{path}: could not decode the audio ({e})") from None
    if x.shape[0] == 0:
        return x
    if x.shape[1] != channels:
        mono = x.mean(axis=1, keepdims=True)
        x = np.repeat(mono, channels, axis=1) if channels > 1 else mono
    if sr != rate:
        x = resample(x, sr, rate)
    return np.ascontiguousarray(x, dtype=np.float32)


def resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Polyphase resampling along axis 0 (scipy)."""
    if src == dst:
        return x
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(int(src), int(dst))
    return resample_poly(x, dst // g, src // g, axis=0).astype(np.float32)
