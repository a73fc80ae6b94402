"""The audiobook writer (app.core.book.m4b): M4B with chapters, cover and tags read back by
ffprobe and by a second, independent reader (mutagen, a test-only dependency); the MP3 with
chapter marks; one file per chapter; loudness at the -18 LUFS target within 1 LU (measured
again by pyloudnorm, voice_lab.loudness), true peaks held. The audio is real speech:
espeak-ng reading three short chapters at different levels."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.core.book import import_book
from app.core.book.m4b import (
    LOUDNESS_TARGET_LUFS,
    TRUE_PEAK_CEILING_DBTP,
    AudiobookError,
    Tags,
    loudness_plan,
    write_audiobook,
    write_chapter_files,
)
from voice_lab.decode import decode
from voice_lab.loudness import measure

RATE = 24000
BOOKS = Path(__file__).resolve().parents[3] / "helpers" / "books"
TITLES = ["Chapter I. Down the Rabbit-Hole", "Chapter II. The Pool of Tears", "Chapter III. A Caucus-Race"]


@dataclass
class Chap:
    title: str
    path: str
    frames: int


@pytest.fixture(scope="module")
def chapters(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("m4b")
    out = []
    for i, (title, level) in enumerate(zip(TITLES, (0.2, 0.9, 0.4)), 1):
        wav = tmp / f"say{i}.wav"
        subprocess.run(["espeak-ng", "-s", "170", "-w", str(wav), f"{title}. Alice was beginning to get very tired "
                        "of sitting by her sister on the bank, and of having nothing to do."], check=True)
        x, _ = decode(str(wav), rate=RATE, channels=1)
        x = level * x[:, 0] / np.max(np.abs(x))
        path = tmp / f"c{i}.wav"
        sf.write(str(path), x, RATE, subtype="FLOAT", format="RF64")
        out.append(Chap(title, str(path), x.size))
    return out


def _probe(path) -> dict:
    r = subprocess.run(["ffprobe", "-v", "error", "-show_chapters", "-show_format", "-show_streams", "-of", "json",
                        str(path)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def test_an_m4b_with_chapters_cover_and_tags_read_back_by_two_readers(chapters, tmp_path):
    book = import_book(BOOKS / "alice.epub")
    plan = loudness_plan([c.path for c in chapters], RATE)
    out = tmp_path / "alice.m4b"
    report = write_audiobook(chapters, str(out), RATE, Tags(book.title, book.author, "Test Voice", book.year,
                                                            "Read by Test Voice"), (book.cover, book.cover_mime), plan)
    info = _probe(out)
    audio = [s for s in info["streams"] if s["codec_type"] == "audio"]
    assert len(audio) == 1 and audio[0]["codec_name"] == "aac" and audio[0]["sample_rate"] == str(RATE)
    pics = [s for s in info["streams"] if s["codec_type"] == "video"]
    assert len(pics) == 1 and pics[0]["disposition"]["attached_pic"] == 1 and pics[0]["codec_name"] == "mjpeg"
    marks = [(round(float(c["start_time"]), 2), round(float(c["end_time"]), 2), c["tags"]["title"])
             for c in info["chapters"]]
    edges = np.cumsum([0] + [c.frames for c in chapters]) / RATE
    assert [m[2] for m in marks] == TITLES
    assert np.allclose([m[0] for m in marks], edges[:-1], atol=0.01) and np.allclose([m[1] for m in marks],
                                                                                     edges[1:], atol=0.01)
    tags = info["format"]["tags"]
    assert (tags["title"], tags["album"], tags["artist"], tags["album_artist"], tags["composer"], tags["date"],
            tags["genre"], tags["media_type"]) == (book.title, book.title, "Lewis Carroll", "Lewis Carroll",
                                                   "Test Voice", "1865", "Audiobook", "2")
    assert abs(float(info["format"]["duration"]) - edges[-1]) < 0.1
    # A second reader: mutagen's own MP4 parser (atoms, the Nero chapter list, the cover).
    mutagen_mp4 = pytest.importorskip("mutagen.mp4")
    m = mutagen_mp4.MP4(str(out))
    assert m.tags["\xa9nam"] == [book.title] and m.tags["\xa9ART"] == ["Lewis Carroll"]
    assert m.tags["\xa9wrt"] == ["Test Voice"] and m.tags["\xa9gen"] == ["Audiobook"] and m.tags["stik"] == [2]
    assert bytes(m.tags["covr"][0]) == book.cover and m.tags["covr"][0].imageformat == mutagen_mp4.MP4Cover.FORMAT_JPEG
    assert [c.title for c in m.chapters] == TITLES
    assert np.allclose([c.start for c in m.chapters], edges[:-1], atol=0.01)
    assert m.info.codec.startswith("mp4a") and abs(m.info.length - edges[-1]) < 0.1
    # Loudness: the target within 1 LU by ffmpeg's meter (the report) and by pyloudnorm; peaks held.
    decoded, _ = decode(str(out), rate=RATE, channels=1)
    again = measure(decoded[:, 0], RATE)
    assert abs(report.lufs - LOUDNESS_TARGET_LUFS) <= 1.0 and abs(again["integrated_lufs"] - LOUDNESS_TARGET_LUFS) <= 1.0
    assert plan.limiter and again["true_peak_dbtp"] <= TRUE_PEAK_CEILING_DBTP + 0.5, (plan, again)


def test_an_mp3_with_chapter_marks_and_one_file_per_chapter(chapters, tmp_path):
    plan = loudness_plan([c.path for c in chapters], RATE, target=-20.0)
    report = write_audiobook(chapters, str(tmp_path / "b.mp3"), RATE, Tags("B", "A"), None, plan)
    info = _probe(tmp_path / "b.mp3")
    assert [c["tags"]["title"] for c in info["chapters"]] == TITLES
    assert info["streams"][0]["codec_name"] == "mp3" and abs(report.lufs + 20.0) <= 1.0
    folder = tmp_path / "chapters"
    report = write_chapter_files(chapters, str(folder), "mp3", RATE, Tags("B", "A", "N"), None, plan)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["01 - Chapter I. Down the Rabbit-Hole.mp3", "02 - Chapter II. The Pool of Tears.mp3",
                     "03 - Chapter III. A Caucus-Race.mp3"]
    first = _probe(folder / names[0])["format"]["tags"]
    assert (first["title"], first["album"], first["track"]) == (TITLES[0], "B", "1/3")
    assert abs(report.lufs + 20.0) <= 1.0       # one gain for the whole book: the set meets the target
    with pytest.raises(AudiobookError, match="cannot write .aiff"):
        write_audiobook(chapters, str(tmp_path / "b.aiff"), RATE, Tags("B"), None, plan)
