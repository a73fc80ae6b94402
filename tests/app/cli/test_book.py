"""The `book` command and the book render (app.cli.book, app.core.book.render) on Nano Q4_0
with random weights and a few speech tokens per sentence: an EPUB to an M4B, a render
cancelled mid-chapter and resumed to the same samples, the language rule, --list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import soundfile as sf

from app.core.book import import_book
from app.core.book.render import BookSettings, Cancelled, render_book
from engine_native import Engine
from tests.helpers.book_files import SHORT_BOOK, write_epub
from tests.helpers.models import model_path

N = 2   # speech tokens per sentence


@pytest.fixture(scope="module")
def model():
    return model_path("nano", "q4_0")


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "XDG_DATA_HOME": str(cwd / "xdg")})


def test_book_epub_to_m4b_and_resume(model, tmp_path):
    book = write_epub(tmp_path / "short.epub", SHORT_BOOK)
    args = ["book", "short.epub", "-m", str(model), "--seed", "5", "--max-tokens", str(N), "--retries", "0",
            "-o", "short.m4b", "--keep-parts"]
    r = _cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ready     chapter 1/3 'Chapter One'" in r.stderr and "3 chapters" in r.stderr
    assert "8 sentences rendered now, 0 taken from earlier runs" in r.stderr and "Traceback" not in r.stderr
    probe = json.loads(subprocess.run(["ffprobe", "-v", "error", "-show_chapters", "-show_streams", "-show_format",
                                       "-of", "json", str(tmp_path / "short.m4b")], capture_output=True, text=True).stdout)
    assert [c["tags"]["title"] for c in probe["chapters"]] == ["Chapter One", "Chapter Two", "Chapter Three"]
    assert probe["streams"][0]["codec_name"] == "aac"
    comment = probe["format"]["tags"]["comment"]   # the book's line, then how its speech was made (marked)
    assert comment.startswith("Read by ") and f"model: {model.name}" in comment and comment.endswith("watermark: perth")
    first = sorted((tmp_path / "short.m4b.parts" / "chapters").glob("001-*.wav"))
    assert len(first) == 1 and sf.info(str(first[0])).frames > 0          # playable while the rest renders
    # The same command again: every chapter from the parts folder, nothing rendered.
    again = _cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and "0 sentences rendered now" in again.stderr and "3 chapters finished before" \
        in again.stderr, again.stderr
    # --list needs no model; a book in French is refused by an English-only model.
    listing = _cli("book", "short.epub", "--list", "--chapters", "2-3", cwd=tmp_path)
    assert listing.stdout.splitlines()[1:] == ["  1  -     body         7 words  Chapter One",
                                               "  2  read  body         7 words  Chapter Two",
                                               "  3  read  body         5 words  Chapter Three"]
    write_epub(tmp_path / "fr.epub", SHORT_BOOK, lang="fr")
    fr = _cli("book", "fr.epub", "-m", str(model), "-o", "fr.m4b", cwd=tmp_path)
    assert fr.returncode == 1 and "this book is in fr (French)" in fr.stderr and "--any-language" in fr.stderr
    bad = _cli("book", "short.epub", "-m", str(model), "-o", "short.wav", cwd=tmp_path)
    assert bad.returncode == 1 and "give BOOK.m4b, BOOK.m4a, BOOK.mp3 or a folder" in bad.stderr
    assert book


def test_a_book_cancelled_mid_chapter_resumes_to_the_same_samples(model, tmp_path):
    engine = Engine(model)
    book = import_book(write_epub(tmp_path / "short.epub", SHORT_BOOK[:2]))
    settings = BookSettings(seed=11, options={"max_tokens": N}, retries=1)

    def audio(result):
        return np.concatenate([sf.read(c.path, dtype="float32")[0] for c in result.chapters])

    whole = render_book(engine, book, settings, tmp_path / "a.parts", model_path=model)
    # Cancelled (the app's Cancel, Ctrl-C's path) in the middle of chapter 2.
    cancel = threading.Event()
    seen = []

    def on_event(e):
        seen.append(e)
        if e.kind == "piece" and e.chapter == 2:
            cancel.set()

    with pytest.raises(Cancelled):
        render_book(engine, book, settings, tmp_path / "b.parts", model_path=model, cancel=cancel, on_event=on_event)
    chapters = sorted(p.name[:3] for p in (tmp_path / "b.parts" / "chapters").glob("*.wav"))
    assert chapters == ["001"] and not list((tmp_path / "b.parts" / "chapters").glob(".*partial*"))
    resumed = render_book(engine, book, settings, tmp_path / "b.parts", model_path=model)
    assert resumed.rendered < whole.rendered == whole.pieces == 6
    assert [c.cached for c in resumed.chapters] == [True, False]
    a, b = audio(whole), audio(resumed)
    assert a.size == b.size and np.array_equal(a, b)
    # Random weights: each take is (N + 3) x 960 samples, too short for a long sentence: regenerated once.
    assert whole.regenerated >= 1 and whole.implausible == whole.regenerated
    assert seen[0].kind == "chapter-start" and seen[-1].eta_s is not None
