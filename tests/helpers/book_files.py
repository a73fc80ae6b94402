"""Small EPUBs written in the tests, for what a real book rarely shows on purpose: DRM, a broken
archive, no spine, an empty chapter, a 10 MB chapter, footnote and page-number markers."""

from __future__ import annotations

import zipfile
from html import escape

CONTAINER = ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
             '</rootfiles></container>')


def xhtml(body: str, lang: str = "en") -> str:
    return ('<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml" '
            f'xmlns:epub="http://www.idpf.org/2007/ops" xml:lang="{lang}"><head><title>x</title></head>'
            f'<body>{body}</body></html>')


def chapter_body(title: str, paragraphs: list[str], epub_type: str = "chapter") -> str:
    paras = "".join(f"<p>{escape(p)}</p>" for p in paragraphs)
    return f'<section epub:type="{epub_type}" id="s"><h1>{escape(title)}</h1>{paras}</section>'


def write_epub(path, docs: list[tuple[str, str]], *, title: str = "A Test Book", author: str = "A. Writer",
               lang: str = "en", spine: bool = True, extra: dict[str, bytes | str] | None = None) -> str:
    """An EPUB 3 of `docs` [(nav title, XHTML body)], one file each, with a nav document."""
    items, refs, links = [], [], []
    files = {}
    for i, (t, body) in enumerate(docs, 1):
        files[f"OEBPS/c{i}.xhtml"] = xhtml(body, lang)
        items.append(f'<item id="c{i}" href="c{i}.xhtml" media-type="application/xhtml+xml"/>')
        refs.append(f'<itemref idref="c{i}"/>')
        links.append(f'<li><a href="c{i}.xhtml">{escape(t)}</a></li>')
    nav = xhtml(f'<nav epub:type="toc"><ol>{"".join(links)}</ol></nav>', lang)
    opf = ('<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
           '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
           f'<dc:identifier id="id">test</dc:identifier><dc:title>{escape(title)}</dc:title>'
           f'<dc:creator>{escape(author)}</dc:creator><dc:language>{lang}</dc:language><dc:date>1900</dc:date>'
           '</metadata><manifest><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
           f'{"".join(items)}</manifest>' + (f'<spine>{"".join(refs)}</spine>' if spine else "") + '</package>')
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        z.writestr("META-INF/container.xml", CONTAINER)
        z.writestr("OEBPS/content.opf", opf)
        z.writestr("OEBPS/nav.xhtml", nav)
        for name, data in {**files, **(extra or {})}.items():
            z.writestr(name, data)
    return str(path)


SHORT_BOOK = [
    ("Chapter One", chapter_body("Chapter One", ["The first line.", "The second line here."])),
    ("Chapter Two", chapter_body("Chapter Two", ["A third line.", "And the fourth line."])),
    ("Chapter Three", chapter_body("Chapter Three", ["The fifth line, at last."])),
]
