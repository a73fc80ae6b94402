"""The audiobook file: chapter audio -> M4B (AAC in MP4 with chapters, a cover and tags), an
MP3 with chapter marks, or one file per chapter; loudness-normalised for listening.

    plan = loudness_plan(chapters, rate)                   # measure; the gain (and a limiter)
    report = write_audiobook(chapters, "book.m4b", rate, tags, cover, plan)

Loudness: the whole book is brought to LOUDNESS_TARGET_LUFS = -18 LUFS integrated (ITU-R
BS.1770 / EBU R128, measured by ffmpeg's ebur128 filter, which streams, so a book of any
length is measured in bounded memory) by one gain for the whole book, so chapters keep their
levels relative to each other. Where that gain would lift the true peak above
TRUE_PEAK_CEILING_DBTP = -1.5 dBTP a look-ahead limiter (ffmpeg's alimiter, set LIMITER_MARGIN_DB
lower since it limits sample peaks and AAC adds overshoot) holds the peaks, and the gain is
corrected by measuring the limited audio (up to LIMITER_PASSES times). The written file is measured again and reported.

Chapters: an FFMETADATA file gives ffmpeg the marks (app.core.long_render.ffmetadata): MP4
gets a QuickTime chapter track and a Nero `chpl` atom (Apple Books, Audiobookshelf, VLC,
Smart AudioBook Player read one or the other), MP3 ID3v2 CHAP frames. Tags: title, artist and
album_artist (the author), album (the title), composer (the narrator), date, genre
"Audiobook", comment; MP4 also media type 2 (stik: audiobook). The cover is an attached
picture (MP4 `covr`, ID3 APIC), JPEG or PNG as the book has it, anything else converted to PNG.
Files are written atomically (engine_native.files).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field

import numpy as np

from app.core.provenance import Provenance

LOUDNESS_TARGET_LUFS = -18.0
TRUE_PEAK_CEILING_DBTP = -1.5
LIMITER_MARGIN_DB = 1.0
LIMITER_PASSES = 3
AAC_BITRATE = "64k"
# extension -> (ffmpeg muxer, audio codec arguments)
FORMATS = {
    "m4b": ("ipod", ["-c:a", "aac", "-b:a", AAC_BITRATE]),
    "m4a": ("ipod", ["-c:a", "aac", "-b:a", AAC_BITRATE]),
    "mp3": ("mp3", ["-c:a", "libmp3lame", "-q:a", "2"]),
    "flac": ("flac", ["-c:a", "flac"]),
    "ogg": ("ogg", ["-c:a", "libvorbis", "-q:a", "5"]),
    "wav": ("wav", ["-c:a", "pcm_s16le"]),
}
CHAPTER_MARK_FORMATS = ("m4b", "m4a", "mp3")
_BLOCK = 1 << 18


class AudiobookError(Exception):
    """The audiobook could not be written (ffmpeg missing or failing, a bad target)."""


@dataclass
class Tags:
    title: str
    author: str = ""
    narrator: str = ""
    year: str | None = None
    comment: str = ""
    genre: str = "Audiobook"
    provenance: Provenance | None = None   # how the speech was made: the comment's end, and encoded_by

    def ffmpeg(self) -> dict[str, str]:
        comment = "; ".join(c for c in (self.comment, self.provenance and self.provenance.comment) if c)
        return {"title": self.title, "album": self.title, "artist": self.author, "album_artist": self.author,
                "composer": self.narrator, "date": self.year or "", "genre": self.genre, "comment": comment,
                "encoded_by": self.provenance.software if self.provenance else ""}


@dataclass
class LoudnessPlan:
    measured_lufs: float | None       # the rendered audio
    measured_peak_dbtp: float | None
    gain_db: float
    limiter: bool
    target_lufs: float = LOUDNESS_TARGET_LUFS
    ceiling_dbtp: float = TRUE_PEAK_CEILING_DBTP

    def filters(self) -> str:
        f = [f"volume={self.gain_db:.3f}dB"]
        if self.limiter:
            limit = 10 ** ((self.ceiling_dbtp - LIMITER_MARGIN_DB) / 20)
            f.append(f"alimiter=limit={limit:.5f}:attack=5:release=50:level=0:latency=1")
        return ",".join(f)


@dataclass
class AudiobookReport:
    path: str
    seconds: float
    chapters: int
    plan: LoudnessPlan
    lufs: float | None = None          # measured in the written file
    peak_dbtp: float | None = None
    files: list[str] = field(default_factory=list)


def _ffmpeg() -> str:
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise AudiobookError("writing an audiobook needs ffmpeg, which is not installed (e.g. `apt install ffmpeg`)")
    return exe


def _feed(paths: list[str], stdin) -> None:
    """Every chapter's samples, in order, as float32 little-endian, then EOF."""
    import soundfile as sf

    try:
        for p in paths:
            with sf.SoundFile(p) as f:
                while True:
                    block = f.read(_BLOCK, dtype="float32", always_2d=False)
                    if block.size == 0:
                        break
                    stdin.write(np.ascontiguousarray(block, "<f4").tobytes())
    except (BrokenPipeError, ValueError):
        pass                                   # ffmpeg stopped early: its exit status says why
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def _run(args: list[str], paths: list[str] | None, rate: int) -> str:
    """ffmpeg with the chapters' audio on its standard input (when `paths`); its stderr."""
    head = [_ffmpeg(), "-hide_banner", "-nostats"] + (["-nostdin"] if paths is None else [])
    if paths is not None:
        head += ["-f", "f32le", "-ar", str(rate), "-ac", "1", "-i", "pipe:0"]
    proc = subprocess.Popen(head + args, stdin=subprocess.PIPE if paths is not None else subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    feeder = None
    if paths is not None:
        feeder = threading.Thread(target=_feed, args=(paths, proc.stdin), daemon=True)
        feeder.start()
    err = proc.stderr.read().decode("utf-8", "replace")
    rc = proc.wait()
    if feeder is not None:
        feeder.join()
    if rc != 0:
        raise AudiobookError("ffmpeg failed: " + " ".join(err.strip().splitlines()[-3:])[-400:])
    return err


def _ebur128(err: str) -> tuple[float | None, float | None]:
    summary = err[err.rfind("Summary:"):]
    i = re.search(r"I:\s+(-?[\d.]+|-inf)\s+LUFS", summary)
    p = re.search(r"Peak:\s+(-?[\d.]+|-inf)\s+dBFS", summary)
    val = lambda m: float(m.group(1)) if m and m.group(1) != "-inf" else None  # noqa: E731
    lufs = val(i)
    return (lufs if lufs is not None and lufs > -70.0 else None), val(p)


def measure_chapters(paths: list[str], rate: int, filters: str = "") -> tuple[float | None, float | None]:
    """(integrated LUFS, true peak dBTP) of the chapters played in order, after `filters`."""
    chain = (filters + "," if filters else "") + "ebur128=peak=true:framelog=verbose"
    return _ebur128(_run(["-af", chain, "-f", "null", "-"], paths, rate))


def measure_file(path: str) -> tuple[float | None, float | None]:
    """(integrated LUFS, true peak dBTP) of an audio file's first audio stream."""
    return _ebur128(_run(["-i", path, "-map", "0:a:0", "-af", "ebur128=peak=true:framelog=verbose", "-f", "null",
                          "-"], None, 0))


def loudness_plan(paths: list[str], rate: int, *, target: float = LOUDNESS_TARGET_LUFS,
                  ceiling: float = TRUE_PEAK_CEILING_DBTP) -> LoudnessPlan:
    lufs, peak = measure_chapters(paths, rate)
    if lufs is None:                           # silence, or shorter than one 400 ms block
        return LoudnessPlan(lufs, peak, 0.0, False, target, ceiling)
    plan = LoudnessPlan(lufs, peak, target - lufs, False, target, ceiling)
    if peak is not None and peak + plan.gain_db > ceiling - LIMITER_MARGIN_DB:     # AAC adds overshoot
        plan.limiter = True
        for _ in range(LIMITER_PASSES):      # the limiter takes some loudness: measure it and make up for it
            limited, _ = measure_chapters(paths, rate, plan.filters())
            if limited is None or abs(target - limited) <= 0.1:
                break
            plan.gain_db += target - limited
    return plan


def _cover_args(cover: tuple[bytes, str] | None, index: int, tmp: str, fmt: str) -> tuple[list[str], list[str]]:
    """(input arguments, output arguments) that attach the cover picture."""
    if cover is None or fmt not in ("ipod", "mp3", "flac"):
        return [], []
    data, mime = cover
    ext = {"image/jpeg": ".jpg", "image/jpg": ".jpg", "image/png": ".png"}.get((mime or "").lower())
    path = os.path.join(tmp, "cover" + (ext or ".img"))
    with open(path, "wb") as f:
        f.write(data)
    codec = ["-c:v", "copy"] if ext else ["-c:v", "png", "-frames:v", "1"]
    out = ["-map", f"{index}:v:0", *codec, "-disposition:v:0", "attached_pic"]
    if fmt == "mp3":
        out += ["-metadata:s:v", "title=Cover", "-metadata:s:v", "comment=Cover (front)"]
    return ["-i", path], out


def encode(paths: list[str], out_path: str, rate: int, *, marks: list[tuple[str, int, int]], tags: dict,
           cover: tuple[bytes, str] | None, filters: str) -> None:
    """The chapters' audio through `filters` into `out_path` (format from its extension), atomically."""
    from app.core.long_render import ffmetadata
    from engine_native.files import WriteFailed, atomic_write

    ext = os.path.splitext(out_path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise AudiobookError(f"cannot write .{ext or '?'} audiobooks: choose one of "
                             f"{', '.join('.' + e for e in FORMATS)}")
    muxer, codec = FORMATS[ext]
    total = sum(b - a for _, a, b in marks) if marks else None
    with tempfile.TemporaryDirectory(prefix="cbs-book-") as tmp:
        meta = os.path.join(tmp, "meta.txt")
        with open(meta, "w", encoding="utf-8") as f:
            f.write(ffmetadata(marks if ext in CHAPTER_MARK_FORMATS else [], rate, tags))
        cover_in, cover_out = _cover_args(cover, 2, tmp, muxer)
        extra = ["-movflags", "+faststart"] if muxer == "ipod" else ["-id3v2_version", "3"] if muxer == "mp3" else []
        if muxer == "ipod" and tags.get("genre") == "Audiobook":
            extra += ["-metadata", "media_type=2"]

        def write(tmp_out) -> None:
            _run(["-i", meta, *cover_in, "-map", "0:a", "-map_metadata", "1", "-map_chapters",
                  "1" if ext in CHAPTER_MARK_FORMATS else "-1", *cover_out, "-af", filters or "anull", "-ar", str(rate),
                  "-ac", "1", *codec, *extra, "-f", muxer, "-y", str(tmp_out)], paths, rate)
            if total is not None:
                got = probe_seconds(str(tmp_out))
                if got is None or abs(got - total / rate) > 0.5:
                    raise AudiobookError(f"the written file is incomplete ({got} s of {total / rate:.1f} s)")

        try:
            atomic_write(out_path, write)
        except WriteFailed as e:
            raise AudiobookError(str(e)) from None


def probe_seconds(path: str) -> float | None:
    ffprobe = shutil.which("ffprobe")
    if ffprobe is None:
        return None
    r = subprocess.run([ffprobe, "-v", "error", "-select_streams", "a:0", "-show_entries",
                        "stream=duration:format=duration", "-of", "json", path], capture_output=True, text=True)
    try:
        info = json.loads(r.stdout)
        d = (info.get("streams") or [{}])[0].get("duration") or info.get("format", {}).get("duration")
        return float(d)
    except (ValueError, TypeError, json.JSONDecodeError):
        return None


def chapter_marks(chapters) -> list[tuple[str, int, int]]:
    """(title, start sample, end sample) of each chapter (objects with .title and .frames)."""
    out, pos = [], 0
    for c in chapters:
        out.append((c.title, pos, pos + c.frames))
        pos += c.frames
    return out


def write_audiobook(chapters, out_path: str, rate: int, tags: Tags, cover: tuple[bytes, str] | None,
                    plan: LoudnessPlan) -> AudiobookReport:
    """One file with every chapter (`chapters`: objects with .title, .path, .frames), chapter
    marks where the format has them."""
    marks = chapter_marks(chapters)
    encode([c.path for c in chapters], out_path, rate, marks=marks, tags=tags.ffmpeg(), cover=cover,
           filters=plan.filters())
    lufs, peak = measure_file(out_path)
    return AudiobookReport(out_path, marks[-1][2] / rate if marks else 0.0, len(marks), plan, lufs, peak, [out_path])


def safe_name(title: str, limit: int = 80) -> str:
    name = re.sub(r"[\x00-\x1f/\\:*?\"<>|]+", " ", title)
    name = " ".join(name.split()).strip(". ")
    return name[:limit].rstrip(". ") or "Chapter"


def write_chapter_files(chapters, folder: str, ext: str, rate: int, tags: Tags, cover: tuple[bytes, str] | None,
                        plan: LoudnessPlan) -> AudiobookReport:
    """One file per chapter in `folder`: `NN - Title.ext`, tagged as tracks of one album."""
    os.makedirs(folder, exist_ok=True)
    width = max(2, len(str(len(chapters))))
    files = []
    for n, c in enumerate(chapters, 1):
        path = os.path.join(folder, f"{n:0{width}d} - {safe_name(c.title)}.{ext}")
        t = {**tags.ffmpeg(), "title": c.title, "track": f"{n}/{len(chapters)}"}
        encode([c.path], path, rate, marks=[(c.title, 0, c.frames)], tags=t, cover=cover, filters=plan.filters())
        files.append(path)
    seconds = sum(c.frames for c in chapters) / rate
    lufs = peak = None
    if files:
        lufs, peak = _measure_files(files)
    return AudiobookReport(folder, seconds, len(files), plan, lufs, peak, files)


def _measure_files(files: list[str]) -> tuple[float | None, float | None]:
    """Loudness of the chapter files played in order (ffmpeg's concat filter)."""
    args = []
    for f in files:
        args += ["-i", f]
    graph = "".join(f"[{i}:a:0]" for i in range(len(files))) + \
        f"concat=n={len(files)}:v=0:a=1,ebur128=peak=true:framelog=verbose"
    return _ebur128(_run([*args, "-filter_complex", graph, "-f", "null", "-"], None, 0))

