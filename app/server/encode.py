"""Streaming encoders: float32 24 kHz chunks in, bytes of the response format out, as they come.

pcm is raw s16le; wav is a 16-bit WAV whose header carries the "unknown length" sizes
(0xFFFFFFFF) so it can go out before the audio is known; mp3, opus (Ogg) and aac (ADTS) go
through one ffmpeg process per request, fed chunk by chunk. flac is sent whole when the audio
ends: a FLAC stream's header (STREAMINFO) holds the total length, which a stream cannot go back
to fill in, and libsndfile (soundfile.read, the usual way Python clients read a response)
refuses a FLAC whose length is unknown ("array is too big"). A speed other than 1 runs every
format through ffmpeg's `atempo` filter (a time stretch that keeps the pitch).
Every format with metadata carries the speech's provenance (app.core.provenance): wav a LIST
INFO chunk before its data, mp3 ID3v2, opus and flac Vorbis comments; aac (ADTS) and pcm
have none.

An encoder is fed from the engine's worker thread (`write`, `end`) and never blocks it:
ffmpeg gets its own writer and reader threads. Output goes to `emit(bytes)`, and `emit(None)`
marks the end; `emit(exc)` reports a failure.
"""

from __future__ import annotations

import queue
import struct
import threading

import numpy as np

from app.core.take import to_s16le
from voice_lab import ffmpeg_run

SAMPLE_RATE = 24000
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg; codecs=opus", "aac": "audio/aac", "flac": "audio/flac",
               "wav": "audio/wav", "pcm": "audio/pcm"}
# ffmpeg output arguments per format (after the input and filters).
_FFMPEG_OUT = {
    "mp3": ["-c:a", "libmp3lame", "-b:a", "128k", "-f", "mp3"],
    "opus": ["-c:a", "libopus", "-b:a", "64k", "-f", "ogg"],
    "aac": ["-c:a", "aac", "-b:a", "128k", "-f", "adts"],
    "wav": ["-c:a", "pcm_s16le", "-f", "s16le"],   # the header is ours
    "pcm": ["-c:a", "pcm_s16le", "-f", "s16le"],
}


class EncoderError(Exception):
    pass


def _info_chunk(provenance) -> bytes:
    """A LIST INFO chunk: ISFT (software) and ICMT (comment), NUL-terminated, even-padded."""
    if provenance is None:
        return b""
    body = b"INFO"
    for key, text in ((b"ISFT", provenance.software), (b"ICMT", provenance.comment)):
        data = text.encode("utf-8") + b"\0"
        body += key + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")
    return b"LIST" + struct.pack("<I", len(body)) + body


def wav_header(rate: int = SAMPLE_RATE, channels: int = 1, bits: int = 16, provenance=None) -> bytes:
    """A WAV header for a stream of unknown length (RIFF and data sizes 0xFFFFFFFF), with the
    provenance's LIST INFO chunk when given."""
    block = channels * bits // 8
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * block, block, bits)
            + _info_chunk(provenance) + b"data" + struct.pack("<I", 0xFFFFFFFF))


def atempo_chain(speed: float) -> str:
    """atempo filters whose product is `speed`, each factor within [0.5, 2] (older ffmpeg's range)."""
    parts = []
    while speed > 2.0:
        parts.append(2.0)
        speed /= 2.0
    while speed < 0.5:
        parts.append(0.5)
        speed /= 0.5
    parts.append(speed)
    return ",".join(f"atempo={p:.6f}" for p in parts)


def ffmpeg_available() -> bool:
    return ffmpeg_run.ffmpeg_path() is not None


def needs_ffmpeg(fmt: str, speed: float) -> bool:
    return fmt not in ("pcm", "wav", "flac") or speed != 1.0


class Encoder:
    """pcm and wav at speed 1: converted in the caller's thread, no process."""

    def __init__(self, fmt: str, emit, provenance=None):
        self.fmt, self.emit, self.provenance = fmt, emit, provenance
        self._started = False

    def header(self) -> bytes:
        return wav_header(provenance=self.provenance)

    def write(self, samples: np.ndarray) -> None:
        data = to_s16le(samples)
        if not self._started:
            self._started = True
            if self.fmt == "wav":
                data = self.header() + data
        if data:
            self.emit(data)

    def end(self) -> None:
        if not self._started and self.fmt == "wav":
            self.emit(self.header())
        self._started = True
        self.emit(None)

    def close(self) -> None:
        pass


class FfmpegEncoder(Encoder):
    def __init__(self, fmt: str, emit, speed: float = 1.0, provenance=None):
        super().__init__(fmt, emit, provenance)
        if ffmpeg_run.ffmpeg_path() is None:
            raise EncoderError(f"response_format {fmt!r} (or a speed other than 1) needs ffmpeg, which is not "
                               "installed on the server; use wav or pcm at speed 1")
        args = ffmpeg_run.pcm_input("s16le", SAMPLE_RATE, 1)
        if speed != 1.0:
            args += ["-af", atempo_chain(speed)]
        tags = provenance.ffmpeg_args() if provenance is not None and fmt in ("mp3", "opus") else []
        args += ["-ar", str(SAMPLE_RATE), "-ac", "1", *_FFMPEG_OUT[fmt], *tags, "-flush_packets", "1", "pipe:1"]
        self._proc = ffmpeg_run.spawn(args)
        self._inbox: queue.Queue = queue.Queue()
        self._closed = False
        self._writer = threading.Thread(target=self._write_loop, name=f"ffmpeg-{fmt}-in", daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name=f"ffmpeg-{fmt}-out", daemon=True)
        self._writer.start()
        self._reader.start()

    def write(self, samples: np.ndarray) -> None:
        self._inbox.put(to_s16le(samples))  # the same quantisation as pcm/wav: flac is bit-exact

    def end(self) -> None:
        self._inbox.put(None)

    def _write_loop(self) -> None:
        stdin = self._proc.stdin
        try:
            while True:
                data = self._inbox.get()
                if data is None or self._closed:
                    break
                stdin.write(data)
        except (BrokenPipeError, OSError, ValueError):
            pass
        finally:
            try:
                stdin.close()
            except OSError:
                pass

    def _read_loop(self) -> None:
        out = self._proc.stdout
        header_sent = self.fmt != "wav"
        while True:
            try:
                data = out.read(65536)
            except (OSError, ValueError):
                data = b""
            if not data:
                break
            if not header_sent:
                data, header_sent = self.header() + data, True
            self.emit(data)
        rc = self._proc.wait()
        err = self._proc.stderr.read().decode("utf-8", "replace").strip()[-300:]
        for f in (out, self._proc.stderr):
            f.close()
        if rc != 0 and not self._closed:
            self.emit(EncoderError(f"ffmpeg failed to encode {self.fmt} (exit {rc}): {err}"))
            return
        if not header_sent:
            self.emit(self.header())
        self.emit(None)

    def close(self) -> None:
        """Stop at once (the client left): ffmpeg is killed, the threads end."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(None)
        if self._proc.poll() is None:
            self._proc.kill()   # the reader sees EOF, reaps it and closes the pipes


class WholeFlacEncoder(Encoder):
    """flac: the 16-bit samples kept (time-stretched by ffmpeg first at a speed other than 1),
    encoded by libsndfile once the audio ends, into a file whose header holds its length."""

    def __init__(self, emit, speed: float = 1.0, provenance=None):
        super().__init__("flac", emit, provenance)
        self._pcm: list[bytes] = []
        self._stretch = FfmpegEncoder("pcm", self._stretched, speed) if speed != 1.0 else None

    def write(self, samples: np.ndarray) -> None:
        if self._stretch is not None:
            self._stretch.write(samples)
        else:
            self._pcm.append(to_s16le(samples))

    def _stretched(self, item) -> None:
        if item is None:
            self._finish()
        elif isinstance(item, Exception):
            self.emit(item)
        else:
            self._pcm.append(item)

    def end(self) -> None:
        if self._stretch is not None:
            self._stretch.end()  # its end (None) arrives through _stretched
        else:
            self._finish()

    def _finish(self) -> None:
        import io

        import soundfile as sf

        pcm = np.frombuffer(b"".join(self._pcm), "<i2")
        self._pcm = []
        out = io.BytesIO()
        try:
            with sf.SoundFile(out, "w", SAMPLE_RATE, 1, subtype="PCM_16", format="FLAC") as f:
                if self.provenance is not None:
                    self.provenance.tag_soundfile(f)   # Vorbis comments, before the audio
                f.write(pcm)
        except (sf.LibsndfileError, RuntimeError) as e:
            self.emit(EncoderError(f"cannot encode flac: {e}"))
            return
        self.emit(out.getvalue())
        self.emit(None)

    def close(self) -> None:
        if self._stretch is not None:
            self._stretch.close()


def make_encoder(fmt: str, emit, speed: float = 1.0, provenance=None) -> Encoder:
    """`provenance` (app.core.provenance.Provenance): the tags of formats that hold them."""
    if fmt == "flac":
        return WholeFlacEncoder(emit, speed, provenance)
    if needs_ffmpeg(fmt, speed):
        return FfmpegEncoder(fmt, emit, speed, provenance)
    return Encoder(fmt, emit, provenance)
