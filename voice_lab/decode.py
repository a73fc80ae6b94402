"""Probe and decode any recording ffmpeg can read; soundfile is the fallback without ffmpeg.

A recording is untrusted: it is opened here, sniffed, and handed to ffmpeg as that open
file through `voice_lab.ffmpeg_run` (protocol and demuxer white lists, bounded probing,
a timeout, at most `MAX_DECODE_SECONDS` of output), so a playlist, a concat list or a
file naming URLs is refused and ffmpeg reads nothing but the file itself. `decode_bytes`
does the same for bytes received (the server's uploads).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from dataclasses import asdict, dataclass

import numpy as np

from voice_lab import ffmpeg_run
from voice_lab.errors import (
    EmptyAudioError,
    FfmpegMissingError,
    NotAudioError,
    RefusedRecordingError,
    VoiceLabError,
)

log = logging.getLogger("voice_lab")

#: At most this much audio is decoded from one recording (a longer one is cut there, with a
#: warning); it bounds memory whatever a file claims about itself.
MAX_DECODE_SECONDS = 3600.0
PROBE_TIMEOUT = 30.0
#: A decode may take this long plus DECODE_SECONDS_PER_SECOND per second of audio
#: (a tenth of real time: ten times slower than ffmpeg decodes on a small CPU).
DECODE_TIMEOUT = 60.0
DECODE_SECONDS_PER_SECOND = 0.1
SNIFF_BYTES = 4096

# What the first bytes of a non-recording say it is (lower case, after a BOM and blanks).
_SIGNATURES = (
    (b"#extm3u", "an M3U/HLS playlist"),
    (b"#ext-x-", "an HLS playlist"),
    (b"#extinf", "an M3U playlist"),
    (b"ffconcat", "an ffmpeg concat list"),
    (b"file ", "an ffmpeg concat list"),
    (b"file'", "an ffmpeg concat list"),
    (b"<?xml", "an XML document (a DASH manifest or another playlist)"),
    (b"<mpd", "a DASH manifest"),
    (b"<smil", "a SMIL playlist"),
    (b"[playlist]", "a PLS playlist"),
    (b"v=0", "an SDP session description"),
)
_URL = re.compile(rb"^[a-z][a-z0-9+.-]{1,15}:")  # http:, https:, rtsp:, file:, udp:, ...
_NOT_ON_WHITELIST = re.compile(r"\[([\w,]+) @ [^\]]*\] Format not on whitelist")


def ffmpeg_available() -> bool:
    return ffmpeg_run.available()


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


class Recording:
    """A recording opened by us: its descriptor (what ffmpeg reads), size, display name, and
    its path where it has one (ffmpeg opens that where descriptors cannot be passed)."""

    def __init__(self, fd: int, name: str, path: str | None):
        self.fd, self.name, self.path = fd, name, path
        self.size = os.fstat(fd).st_size

    def head(self, n: int = SNIFF_BYTES) -> bytes:
        with self.file() as f:
            return f.read(n)

    def file(self):
        """A file object on the same recording, at its start (for sniffing and soundfile)."""
        f = os.fdopen(os.dup(self.fd), "rb")
        f.seek(0)
        return f

    def input_args(self, demuxer: str | None = None) -> list[str]:
        return ffmpeg_run.file_input(self.fd, demuxer, self.path)


def _check_exists(path: str) -> None:
    if not os.path.exists(path):
        raise VoiceLabError(f"{path}: no such file")
    if os.path.isdir(path):
        raise NotAudioError(f"{path}: is a folder, not an audio file")


@contextlib.contextmanager
def open_recording(source, name: str | None = None):
    """A path (opened read-only) or bytes (held in an anonymous memory file) as a Recording,
    sniffed first: playlists, lists and other text are refused (RefusedRecordingError)."""
    temporary = None
    if isinstance(source, (bytes, bytearray, memoryview)):
        name, path = name or "upload", None
        if hasattr(os, "memfd_create") and ffmpeg_run.PASSES_DESCRIPTORS:
            fd = os.memfd_create("recording", os.MFD_CLOEXEC)
        else:  # pragma: no cover - no anonymous memory files (macOS, Windows): a private temporary file
            fd, temporary = tempfile.mkstemp(prefix="recording-")
            path = temporary
        try:
            view = memoryview(bytes(source))
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            os.close(fd)
            raise
    else:
        path = os.fspath(source)
        name = name or path
        _check_exists(path)
        try:
            fd = os.open(path, ffmpeg_run.OPEN_FLAGS)
        except OSError as e:
            raise VoiceLabError(f"{path}: cannot be read ({e.strerror})") from None
    try:
        rec = Recording(fd, name, path)
        refusal = sniff(rec.head())
        if refusal:
            raise RefusedRecordingError(f"{name}: {refusal}")
        yield rec
    finally:
        os.close(fd)
        if temporary:
            os.unlink(temporary)


def sniff(head: bytes) -> str | None:
    """Why the first bytes of a file are not a recording to decode (None: they may be one)."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    low = text[:64].lower()
    for signature, kind in _SIGNATURES:
        if low.startswith(signature):
            return (f"is {kind}, not a recording; it names other files or streams, which would be read "
                    "in its place, so it is refused")
    if _URL.match(low):
        return "is a list of URLs, not a recording; refused"
    if text and _is_text(head):
        return "is a text file, not an audio file"
    return None


def _is_text(data: bytes) -> bool:
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(data) - 3:  # a character cut at the end of the sniffed bytes is still text
            return False
        s = data[: e.start].decode("utf-8")
    return all(c.isprintable() or c in "\t\r\n\f" for c in s)


def _int_or_none(v) -> int | None:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


def probe(path: str) -> Probe:
    """Duration, codec, bitrate, channels and rate (ffprobe; soundfile without ffmpeg)."""
    with open_recording(path) as rec:
        return _probe(rec)


def _probe(rec: Recording) -> Probe:
    if not ffmpeg_available():
        return _probe_soundfile(rec)
    info = json.loads(_run(rec, ffmpeg_run.ffprobe_command(
        *rec.input_args(), "-show_format", "-show_streams", "-of", "json"),
        timeout=PROBE_TIMEOUT, max_output=8 << 20, what="ffprobe") or b"{}")
    streams = info.get("streams", [])
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    if not audio:
        raise NotAudioError(f"{rec.name}: has no audio track")
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
        path=rec.name,
        container=fmt.get("format_name", ""),
        codec=a.get("codec_name", "unknown"),
        duration=float(duration),
        bit_rate=bit_rate,
        channels=int(a.get("channels") or 0),
        sample_rate=int(a.get("sample_rate") or 0),
        has_video=has_video,
        probed_with="ffprobe",
    )


def _run(rec: Recording, command: list[str], *, timeout: float, max_output: int, what: str) -> bytes:
    """ffmpeg/ffprobe on `rec`; its failures as Voice Lab errors naming the recording."""
    try:
        out, _ = ffmpeg_run.run(command, files=(rec.fd,), timeout=timeout, max_output=max_output, what=what)
    except ffmpeg_run.FfmpegTimeout as e:
        raise NotAudioError(f"{rec.name}: {e}") from None
    except ffmpeg_run.OutputTooLarge as e:
        raise NotAudioError(f"{rec.name}: {e}") from None
    except ffmpeg_run.FfmpegFailed as e:
        refused = _NOT_ON_WHITELIST.search(e.stderr)
        if refused:
            raise RefusedRecordingError(
                f"{rec.name}: is a {refused.group(1).split(',')[0]} file, a kind that can name other files or "
                "streams (or is no recording); refused") from None
        detail = ffmpeg_run.last_line(e.stderr)
        if ffmpeg_run.PASSES_DESCRIPTORS:
            detail = detail.replace(ffmpeg_run.fd_path(rec.fd), rec.name)
        raise NotAudioError(f"{rec.name}: not an audio file ffmpeg can read ({detail})") from None
    return out


def _probe_soundfile(rec: Recording) -> Probe:
    import soundfile as sf

    try:
        with rec.file() as f:
            info = sf.info(f)
    except Exception:  # noqa: BLE001 - soundfile raises several types for unreadable files
        ext = os.path.splitext(rec.name)[1] or "this"
        raise FfmpegMissingError(
            f"{rec.name}: reading {ext} files needs ffmpeg, which is not installed "
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
        bit_rate = int(rec.size * 8 / info.duration)
    return Probe(
        path=rec.name,
        container=(info.format or "").lower(),
        codec=codec,
        duration=float(info.duration),
        bit_rate=bit_rate,
        channels=int(info.channels),
        sample_rate=int(info.samplerate),
        has_video=False,
        probed_with="soundfile",
    )


def decode(path: str, rate: int | None = None, channels: int | None = None, info: Probe | None = None,
           max_seconds: float = MAX_DECODE_SECONDS):
    """Decode the first audio track to float32 of shape (frames, channels).

    `rate` / `channels` of None keep the source's own. Returns (samples, rate). At most
    `max_seconds` are decoded (a longer recording is cut there, with a warning).
    """
    with open_recording(path) as rec:
        return _decode(rec, rate, channels, info or _probe(rec), max_seconds)


def decode_bytes(data: bytes, rate: int | None = None, channels: int | None = None, name: str = "upload",
                 max_seconds: float = MAX_DECODE_SECONDS):
    """`decode` for a recording received as bytes: (samples, rate, Probe). The bytes are
    never written to disk (an anonymous memory file is what ffmpeg reads)."""
    with open_recording(data, name) as rec:
        info = _probe(rec)
        x, out_rate = _decode(rec, rate, channels, info, max_seconds)
        return x, out_rate, info


def _decode(rec: Recording, rate, channels, info: Probe, max_seconds: float):
    out_rate = int(rate or info.sample_rate)
    out_ch = int(channels or info.channels)
    if out_rate <= 0 or out_ch <= 0:
        raise NotAudioError(f"{rec.name}: the audio track has no sample rate or channels")
    if not max_seconds > 0:
        raise VoiceLabError(f"max_seconds must be positive; got {max_seconds!r}")
    limit = int(max_seconds * out_rate)
    if info.probed_with == "soundfile":
        x = _decode_soundfile(rec, out_rate, out_ch, max_seconds)
    else:
        x = _decode_ffmpeg(rec, info, out_rate, out_ch, max_seconds)
    if x.shape[0] == 0:
        raise EmptyAudioError(f"{rec.name}: the recording is empty (zero length)")
    if x.shape[0] >= limit:
        log.warning("%s: longer than %g s; only the first %g s are used", rec.name, max_seconds, max_seconds)
        x = x[:limit]
    return x, out_rate


def _decode_ffmpeg(rec: Recording, info: Probe, rate: int, channels: int, max_seconds: float) -> np.ndarray:
    demuxer = info.container.split(",")[0]
    if demuxer not in ffmpeg_run.RECORDING_DEMUXERS:  # a Probe made elsewhere
        raise RefusedRecordingError(f"{rec.name}: the {info.container or 'unknown'} format is not decoded here")
    seconds = min(info.duration or max_seconds, max_seconds)
    command = ffmpeg_run.ffmpeg_command(
        *rec.input_args(demuxer), "-map", "0:a:0", "-t", f"{max_seconds:.6f}",
        "-f", "f32le", "-acodec", "pcm_f32le", "-ar", str(rate), "-ac", str(channels), "pipe:1")
    try:
        out = _run(rec, command, timeout=DECODE_TIMEOUT + DECODE_SECONDS_PER_SECOND * seconds,
                   max_output=(int(max_seconds * rate) + rate) * channels * 4, what="ffmpeg")
    except RefusedRecordingError:
        raise
    except NotAudioError as e:
        raise NotAudioError(str(e).replace("not an audio file ffmpeg can read", "ffmpeg could not decode the audio")) \
            from None
    return np.frombuffer(out, dtype="<f4")[: len(out) // 4 // channels * channels].reshape(-1, channels) \
        .astype(np.float32, copy=True)


def _decode_soundfile(rec: Recording, rate: int, channels: int, max_seconds: float) -> np.ndarray:
    import soundfile as sf

    try:
        with rec.file() as f:
            with sf.SoundFile(f) as snd:
                x = snd.read(frames=int(max_seconds * snd.samplerate) + 1, dtype="float32", always_2d=True)
                sr = snd.samplerate
    except Exception as e:  # noqa: BLE001
        raise NotAudioError(f"{rec.name}: could not decode the audio ({e})") from None
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
