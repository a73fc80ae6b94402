"""A take: the audio of one synthesis, sentence by sentence, and its export to WAV/FLAC/OGG/MP3
(and to raw 16-bit PCM, the CLI's `-o -` and the speech server's pcm/wav/flac), tagged with
its provenance (app.core.provenance).

Audio is kept per sentence so that one sentence can be regenerated and swapped in alone.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field

import numpy as np

from engine_native.engine import NOMINAL_SAMPLE_RATE
from engine_native.files import WriteFailed, atomic_write

from app.core.provenance import Provenance

EXPORT_FORMATS = {  # extension -> (label, soundfile format and subtype, or None for ffmpeg)
    "wav": ("WAV (16-bit PCM)", ("WAV", "PCM_16")),
    "flac": ("FLAC (lossless)", ("FLAC", "PCM_16")),
    "ogg": ("Ogg Vorbis", ("OGG", "VORBIS")),
    "mp3": ("MP3 (LAME VBR)", None),
}


class ExportError(Exception):
    pass


@dataclass
class TakeSentence:
    index: int
    text: str
    span: tuple[int, int]  # character span in the take's text
    pieces: list[np.ndarray] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return sum(p.size for p in self.pieces)


@dataclass
class Take:
    text: str
    voice_name: str
    sample_rate: int = NOMINAL_SAMPLE_RATE  # the engine's rate, set by whoever makes the take
    seed: int | None = None
    text_offset: int = 0  # where `text` starts in the editor (playing a selection)
    in_history: bool = True  # voice samples and test sentences are not kept
    created: float = field(default_factory=time.time)
    sentences: dict[int, TakeSentence] = field(default_factory=dict)
    complete: bool = False
    likeness: float | None = None  # how close it sounds to its voice (engine_native.likeness)
    provenance: Provenance | None = None  # what made it, for the exported file's tags
    _cache: np.ndarray | None = None

    def add_audio(self, index: int, text: str, span: tuple[int, int], samples: np.ndarray) -> int:
        """Append audio of sentence `index` (span: in editor coordinates); returns its start frame."""
        start = self.frames
        s = self.sentences.get(index)
        if s is None:
            s = self.sentences[index] = TakeSentence(index, text, (int(span[0]), int(span[1])))
        s.pieces.append(np.asarray(samples, np.float32).reshape(-1))
        self._cache = None
        return start

    def replace_sentence(self, index: int, samples: np.ndarray) -> None:
        self.sentences[index].pieces = [np.asarray(samples, np.float32).reshape(-1)]
        self._cache = None

    @property
    def frames(self) -> int:
        return sum(s.frames for s in self.sentences.values())

    @property
    def duration(self) -> float:
        return self.frames / self.sample_rate

    @property
    def samples(self) -> np.ndarray:
        if self._cache is None:
            parts = [p for i in sorted(self.sentences) for p in self.sentences[i].pieces]
            self._cache = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return self._cache

    def sentence_ranges(self) -> list[tuple[int, int, TakeSentence]]:
        """(start frame, end frame, sentence) in playing order."""
        out, t = [], 0
        for i in sorted(self.sentences):
            s = self.sentences[i]
            out.append((t, t + s.frames, s))
            t += s.frames
        return out

    def sentence_containing(self, position: int) -> TakeSentence | None:
        """The sentence whose editor span contains `position` (its end included)."""
        for s in self.sentences.values():
            if s.span[0] <= position <= s.span[1]:
                return s
        return None

    def sentence_at(self, frame: int) -> TakeSentence | None:
        for a, b, s in self.sentence_ranges():
            if a <= frame < b:
                return s
        return None

    @property
    def title(self) -> str:
        words = " ".join(self.text.split())
        short = words if len(words) <= 48 else words[:47] + "…"
        return f"{time.strftime('%H:%M:%S', time.localtime(self.created))}  {short}"


def to_s16le(samples: np.ndarray) -> bytes:
    """Raw 16-bit little-endian PCM: clipped to [-1, 1], scaled by 32767 (symmetric: +-1.0 map
    to +-32767) and rounded half to even. Every 16-bit sample the project writes goes through
    here: raw PCM, and the WAV/FLAC files of export_audio."""
    x = np.clip(np.asarray(samples, np.float32).reshape(-1), -1.0, 1.0)
    return np.rint(x * np.float32(32767)).astype("<i2").tobytes()


def check_export_path(path: str) -> str:
    """The format of `path` (its extension), or ExportError before any work is done."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in EXPORT_FORMATS:
        raise ExportError(f"cannot export to .{ext or '?'}: choose one of "
                          f"{', '.join('.' + e for e in EXPORT_FORMATS)}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ExportError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ExportError(f"cannot write {path}: the folder {folder} is read-only")
    return ext


def export_audio(samples: np.ndarray, rate: int, path: str, provenance: Provenance | None = None) -> None:
    """Write `samples` to `path`; the format comes from the extension, with `provenance` in its
    tags (generated speech always has one). Atomic: the file is complete (decoded back and its
    length checked) or the target is untouched."""
    ext = check_export_path(path)
    x = np.clip(np.asarray(samples, np.float32).reshape(-1), -1.0, 1.0)
    if x.size == 0:
        raise ExportError("the take is empty: nothing to export")

    def write(tmp) -> None:
        spec = EXPORT_FORMATS[ext][1]
        if spec is None:
            _write_mp3(x, rate, str(tmp), provenance)
        else:
            import soundfile as sf

            # 16-bit files hold to_s16le's values exactly (libsndfile's own conversion rounds
            # otherwise), so a WAV and the raw PCM of the same take are the same samples.
            data = np.frombuffer(to_s16le(x), "<i2") if spec[1] == "PCM_16" else x
            with sf.SoundFile(str(tmp), "w", rate, 1, subtype=spec[1], format=spec[0]) as f:
                if provenance is not None:
                    provenance.tag_soundfile(f)
                f.write(data)
        _check_written(str(tmp), x.size, rate, ext)

    try:
        atomic_write(path, write)
    except WriteFailed as e:
        raise ExportError(str(e)) from None


def _check_written(path: str, frames: int, rate: int, ext: str) -> None:
    """Encoders do not always report a full disk (ffmpeg exits 0 after "No space left on
    device"): decode the file back and check its length."""
    if ext == "mp3":
        got = _decoded_frames_ffmpeg(path, frames, rate)
    else:
        import soundfile as sf

        got = sf.info(path).frames
    if abs(got - frames) > rate // 20:  # MP3 may differ by a frame of padding; truncation is far more
        raise OSError(errno.EIO, f"the written file is incomplete ({got} of {frames} samples)")


def _decoded_frames_ffmpeg(path: str, frames: int, rate: int) -> int:
    from voice_lab import ffmpeg_run

    fd = os.open(path, ffmpeg_run.OPEN_FLAGS)
    try:
        command = ffmpeg_run.ffmpeg_command(*ffmpeg_run.file_input(fd, "mp3", path), "-f", "f32le", "-ac", "1",
                                            "-ar", str(rate), "pipe:1")
        out, _ = ffmpeg_run.run(command, files=(fd,), timeout=60 + 0.05 * frames / rate,
                                max_output=(frames + 2 * rate) * 4, what="ffmpeg")
    except ffmpeg_run.FfmpegFailed as e:
        raise OSError(errno.EIO, f"the written MP3 does not decode: {e}") from None
    finally:
        os.close(fd)
    return len(out) // 4


def _write_mp3(x: np.ndarray, rate: int, path: str, provenance: Provenance | None) -> None:
    from voice_lab import ffmpeg_run

    if ffmpeg_run.ffmpeg_path() is None:
        raise ExportError("MP3 export needs ffmpeg, which is not installed (e.g. `apt install ffmpeg`); "
                          "WAV, FLAC and OGG work without it")
    # LAME writes its delay/padding into the Xing header, so decoders trim back to the exact length.
    tags = provenance.ffmpeg_args() if provenance is not None else []
    command = ffmpeg_run.ffmpeg_command("-y", *ffmpeg_run.pcm_input("f32le", rate, 1), "-c:a", "libmp3lame",
                                        "-q:a", "2", *tags, "-f", "mp3", path)
    try:
        ffmpeg_run.run(command, stdin=x.astype("<f4").tobytes(), timeout=60 + 0.05 * x.size / rate,
                       max_output=0, what="ffmpeg")
    except ffmpeg_run.FfmpegFailed as e:
        raise ExportError(f"ffmpeg could not encode the MP3: {ffmpeg_run.last_line(e.stderr)}") from None
