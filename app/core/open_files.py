"""What a file given to the app is (on the command line, by a double-click, dropped on the
window, handed over by a second launch), so that each opens for what it is: a model loads, a
voice joins the library, a recording opens in the Voice Lab, a text, Markdown, HTML or EPUB
file opens as the script. Qt-free; `classify` reads a GGUF file's header (run it off the GUI
thread), the rest goes by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from app.core.book.read import BOOK_EXTENSIONS

# What ffmpeg reads that people record speech in (and the videos they take it from).
AUDIO_EXTENSIONS = {".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".wma", ".aiff", ".aif", ".mp4",
                    ".mkv", ".mov", ".webm", ".avi", ".m4v", ".caf", ".ac3", ".amr"}
MODEL, VOICE, RECORDING, SCRIPT = "model", "voice", "recording", "script"
VOICE_SUFFIX = ".voice.gguf"
WHAT_OPENS = ("models (.gguf), voices (.voice.gguf), recordings (audio or video) and scripts "
              f"({', '.join(sorted(BOOK_EXTENSIONS))})")


class CannotOpen(Exception):
    """A file the app cannot open: one line that says why."""


@dataclass(frozen=True)
class OpenedFile:
    path: str
    kind: str            # MODEL, VOICE, RECORDING or SCRIPT


def kind_by_name(path: str) -> str | None:
    """The kind a file's name says (a .gguf is a model unless it reads as a voice), or None."""
    lower = path.lower()
    if lower.endswith(VOICE_SUFFIX):
        return VOICE
    ext = os.path.splitext(lower)[1]
    if ext == ".gguf":
        return MODEL
    if ext in AUDIO_EXTENSIONS:
        return RECORDING
    if ext in BOOK_EXTENSIONS:
        return SCRIPT
    return None


def classify(path: str) -> OpenedFile:
    """The file's kind; a GGUF file by its header (a voice saved under another name is still a
    voice). CannotOpen for a missing file, another program's GGUF, or an unknown type."""
    from engine_native.gguf_header import GGUFFileError, read_header
    from engine_native.voice import VOICE_ARCH

    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise CannotOpen(f"{path}: no such file")
    kind = kind_by_name(path)
    if kind in (MODEL, VOICE):
        try:
            arch = read_header(path).architecture
        except GGUFFileError as e:
            raise CannotOpen(str(e)) from None
        except OSError as e:
            raise CannotOpen(f"{path}: cannot be read ({e.strerror or e})") from None
        if arch == VOICE_ARCH:
            return OpenedFile(path, VOICE)
        if arch == "chatterbox":
            return OpenedFile(path, MODEL)
        raise CannotOpen(f"{os.path.basename(path)} is a GGUF file of another program (architecture {arch!r}), "
                         "not a Chatterbox model or voice")
    if kind is None:
        raise CannotOpen(f"{os.path.basename(path)}: Chatterbox Studio opens {WHAT_OPENS}")
    return OpenedFile(path, kind)


def read_script(path: str) -> str:
    """A text, Markdown, HTML or EPUB file as script text, through app.core.book's importers:
    each chapter's title as a heading, then its paragraphs. An EPUB gives the chapters `book`
    reads (its front and back matter left out); the user's own text files give every chapter
    (a Markdown file's opening section keeps the document's title), and a plain text without
    chapters is its paragraphs alone. BookError (one line) when it cannot be read."""
    from dataclasses import replace

    from app.core.book import import_book
    from app.core.book.render import chapter_script

    book = import_book(path)
    epub = path.lower().endswith(".epub")
    chapters = [c for _n, c in book.included()] if epub else [c for c in book.chapters if c.paragraphs]
    stem = os.path.splitext(os.path.basename(path))[0]
    parts = []
    for i, c in enumerate(chapters):
        if not epub and c.title == stem:  # the importer named a chapterless text after its file
            parts.append("\n\n".join(p.lstrip("#").lstrip() for p in c.paragraphs) + "\n")
            continue
        title = book.title if (not epub and i == 0 and c.kind == "front" and book.title) else c.title
        parts.append(chapter_script(replace(c, title=title)))
    return "\n".join(parts)
