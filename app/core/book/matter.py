"""Front matter, back matter and notes, recognised by what a book says about its parts.

EPUB 3 says it with `epub:type` (the EPUB Structural Semantics Vocabulary) and ARIA `role`
("doc-..."), EPUB 2 with the package's guide, and any book with a chapter's title ("Contents",
"Copyright", "Notes") or, in an EPUB, its file name ("titlepage.xhtml"). `kind_of` takes the
first of these that says anything; a part that says nothing is "body".
"""

from __future__ import annotations

import re

# epub:type / role (without "doc-") / EPUB 2 guide types -> kind. Prefaces, forewords,
# introductions, prologues, epigraphs, appendices and afterwords are the author's text: body.
_TYPES = {
    **dict.fromkeys(("cover", "titlepage", "title-page", "halftitlepage", "copyright-page", "copyright", "toc",
                     "dedication", "imprint", "imprimatur", "seriespage", "frontispiece", "landmarks", "loi",
                     "lot", "contributors", "other-credits", "credits", "errata", "revision-history",
                     "frontmatter", "page-list"), "front"),
    **dict.fromkeys(("colophon", "index", "bibliography", "glossary", "acknowledgments", "acknowledgements",
                     "backmatter"), "back"),
    **dict.fromkeys(("footnotes", "endnotes", "rearnotes", "footnote", "endnote", "rearnote", "notes", "note"),
                    "notes"),
    **dict.fromkeys(("bodymatter", "chapter", "part", "preface", "foreword", "introduction", "prologue",
                     "epilogue", "epigraph", "appendix", "afterword", "conclusion", "text", "preamble"), "body"),
}
_TITLES = [
    (re.compile(r"^(cover|title page|titlepage|half title|copyright( page| notice)?|(table of )?contents|dedication|"
                r"imprint|frontispiece|a note on (this|the) (e ?text|edition|text)|transcriber s notes?|"
                r"(about|note on) (this|the) (e ?book|e ?text|edition)|also by .{1,60}|praise for .{1,60}|"
                r"list of (illustrations|figures|tables))$"), "front"),
    (re.compile(r"^(colophon|index|bibliography|glossary|acknowledge?ments|about the (author|publisher)|"
                r"(the )?(full )?project gutenberg( tm)? licen[cs]e.*|end of (the )?project gutenberg.*)$"), "back"),
    (re.compile(r"^((foot|end)?notes|notes on the text|explanatory notes|notes and references)$"), "notes"),
]
_FILES = [
    (re.compile(r"(^|[_\-/])(cover|title|titlepage|title_page|halftitle|copyright|toc|contents|nav|dedication|"
                r"imprint|frontmatter|front)[\d_\-]*\.x?html?$"), "front"),
    (re.compile(r"(^|[_\-/])(colophon|index|backmatter|back|license|licence|about[_\-]?the[_\-]?author)"
                r"[\d_\-]*\.x?html?$"), "back"),
    (re.compile(r"(^|[_\-/])(footnotes|endnotes|notes)[\d_\-]*\.x?html?$"), "notes"),
]


def kind_of_types(types) -> str | None:
    """The kind the given epub:type / role / guide values say, the most specific first
    (a "preface" inside a "frontmatter" body is body text)."""
    said = [_TYPES.get(t.lower().removeprefix("doc-")) for t in types]
    # Section-level types come last in `types` (outermost first): the innermost that says anything wins.
    for kind in reversed(said):
        if kind is not None:
            return kind
    return None


def kind_of_title(title: str) -> str | None:
    t = " ".join(re.sub(r"[^\w]+", " ", title.casefold()).split())
    for pattern, kind in _TITLES:
        if pattern.match(t):
            return kind
    return None


def kind_of_file(name: str) -> str | None:
    n = name.lower()
    for pattern, kind in _FILES:
        if pattern.search(n):
            return kind
    return None


def kind_of(*, types=(), title: str = "", file: str = "", default: str = "body") -> str:
    return kind_of_types(types) or kind_of_title(title) or (kind_of_file(file) if file else None) or default
