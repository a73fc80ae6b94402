"""The audiobook job (app.core.book.job) without Qt: its JSON (what the app keeps across a
restart), the review applied to a book, the output kinds, the language rule, and a render
without a seed that resumes with the seed its parts folder kept (app.core.book.render)."""

from __future__ import annotations

import os

import pytest

from app.core.book import BookError, import_book
from app.core.book.job import BookJob, book_lexicon_path, language_rule, output_kind, summary_lines
from tests.helpers.book_files import SHORT_BOOK, write_epub

BOOKS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "helpers", "books")


def test_a_job_survives_json_and_applies_the_review(tmp_path):
    alice = os.path.join(BOOKS, "alice.epub")
    job = BookJob(alice, chapters=[1, 2, 4], renames={2: "Down We Go"}, cast={"Alice": "/v/a.voice.gguf"},
                  options={"max_tokens": 2, "chunk_tokens": 10, "seed": None, "language": "en"}, seed=9)
    again = BookJob.from_json(job.to_json())
    assert again == job and again.renames == {2: "Down We Go"}            # int keys back from JSON's strings
    assert job.output == alice[:-5] + ".m4b" and str(job.parts_folder) == alice[:-5] + ".m4b.parts"
    assert BookJob(alice, kind="folder").output == alice[:-5] + "-chapters"
    assert book_lexicon_path(alice) == alice[:-5] + ".lexicon.json"
    book = job.apply(import_book(alice))
    assert [n for n, _c in book.included()] == [1, 2, 4] and book.chapters[1].title == "Down We Go"
    settings = job.settings(book, {None: None}, None, {})
    assert settings.options == {"max_tokens": 2} and settings.stream_options == {"chunk_tokens": 10}
    assert settings.seed == 9 and settings.speakers == ["Alice"] and settings.language is None
    with pytest.raises(BookError, match="has 13 chapters now, not 14"):
        BookJob(alice, chapters=[14]).apply(import_book(alice))
    for bad in ("{", '{"output": "x.m4b"}', '{"book_path": "b.epub", "kind": "wav"}'):
        with pytest.raises(BookError):
            BookJob.from_json(bad)


def test_output_kinds_and_the_language_rule(tmp_path):
    assert [output_kind(p) for p in ("a.m4b", "a.M4A", "b.mp3", str(tmp_path) + "/")] == ["m4b", "m4b", "mp3",
                                                                                         "folder"]
    with pytest.raises(BookError, match="cannot write a .wav audiobook"):
        output_kind("a.wav")
    fr = import_book(write_epub(tmp_path / "fr.epub", SHORT_BOOK, lang="fr"))
    with pytest.raises(BookError, match=r"this book is in fr \(French\) and nano.gguf speaks English only"):
        language_rule(fr, {}, model_name="nano.gguf")
    assert language_rule(fr, {}, model_name="nano.gguf", any_language=True) is None
    rule = language_rule(fr, {"fr": "French", "en": "English"}, model_name="mtl.gguf")
    assert rule(fr.chapters[0]) == "fr"


def test_a_render_without_a_seed_resumes_with_the_seed_its_parts_folder_kept(tmp_path):
    from app.core.book.job import write_book
    from app.core.book.render import BookSettings, render_book
    from engine_native import Engine
    from tests.helpers.models import model_path

    model = model_path("nano", "q4_0")
    engine = Engine(model)
    book = import_book(write_epub(tmp_path / "short.epub", SHORT_BOOK[:1]))
    settings = BookSettings(seed=None, options={"max_tokens": 2, "cfm_steps": 1}, retries=0)
    first = render_book(engine, book, settings, tmp_path / "b.parts", model_path=model)
    assert first.rendered == first.pieces == 3 and (tmp_path / "b.parts" / "seed").is_file()
    again = render_book(engine, book, settings, tmp_path / "b.parts", model_path=model)
    assert again.rendered == 0 and [c.cached for c in again.chapters] == [True]
    report, plan = write_book(again.chapters, str(tmp_path / "b.m4b"), "m4b", again.rate, BookJob(
        str(tmp_path / "short.epub")).tags(book, "Nano"), None)
    lines = summary_lines(again, report, plan)
    assert lines[0].endswith("1 chapter") and lines[1].endswith("0 sentences rendered now, 0 taken from earlier runs, 1 chapter finished before")
    assert abs(report.lufs - plan.target_lufs) < 1.0
