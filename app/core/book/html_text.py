"""(X)HTML -> the blocks a listener hears: headings and paragraphs, with what is not read left out.

Left out: images and other media, scripts and styles, navigation, page-number markers
(`epub:type="pagebreak"`, `role="doc-pagebreak"`, Project Gutenberg's `class="pagenum"`) and
footnote reference markers (`epub:type="noteref"`, `role="doc-noteref"`, pandoc's
`class="footnote-ref"`, and a `<sup>` or a link to a note whose text is only a marker such as
"1", "[2]" or "*"). The notes themselves (`<aside epub:type="footnote">`, `role="doc-endnotes"`,
`class="footnotes"`) are kept apart, as notes. A `<br>` is a space: verse lines run on into their
sentence.

Parsing uses lxml: content documents as XML (no network, no entity expansion; `huge_tree` so a
chapter may be one very long paragraph), HTML and broken XHTML through lxml's HTML parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lxml import etree
from lxml import html as lxml_html

OPS_NS = "http://www.idpf.org/2007/ops"
_EPUB_TYPE = f"{{{OPS_NS}}}type"

_SKIP = {"head", "script", "style", "img", "svg", "math", "video", "audio", "object", "embed", "picture",
         "figcaption", "template", "noscript", "iframe", "canvas", "map", "button", "input", "select",
         "textarea", "nav", "rt", "rp"}
_BLOCK = {"p", "div", "li", "blockquote", "pre", "dt", "dd", "td", "th", "caption", "section", "article",
          "header", "footer", "aside", "main", "body", "tr", "table", "tbody", "thead", "tfoot", "ul", "ol",
          "dl", "address", "center", "hgroup", "figure", "details", "summary", "fieldset", "legend", "hr",
          "html", "form", "poem", "stanza", "linegroup"}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_PAGEBREAK_CLASSES = {"pagenum", "page-number", "pagebreak", "page-break", "pageno", "pagenumber"}
_NOTEREF_CLASSES = {"footnote-ref", "noteref", "fnref", "footnote-reference", "endnote-ref", "fn-ref"}
_NOTE_TYPES = {"footnote", "endnote", "rearnote", "footnotes", "endnotes", "rearnotes", "note"}
_NOTE_ROLES = {"doc-footnote", "doc-endnote", "doc-endnotes", "doc-footnotes", "note"}
_NOTE_CLASSES = {"footnotes", "footnote", "endnotes", "endnote", "footnotes-end-of-document"}
# What a note marker looks like: a number, a letter or two, a Roman numeral or a symbol, maybe bracketed.
_MARKER = re.compile(r"^\s*[\[(]?\s*(\d{1,4}|[a-zA-Z]{1,2}|[ivxlcIVXLC]{1,6}|[*†‡§¶#]{1,3})\s*[\])]?\s*$")


@dataclass
class Block:
    text: str
    level: int = 0                   # 1-6 for a heading, 0 for a paragraph
    types: tuple[str, ...] = ()      # epub:type / role values of the block and its ancestors, outermost first


@dataclass
class Document:
    blocks: list[Block] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)        # footnote / endnote paragraphs found inside
    anchors: dict[str, int] = field(default_factory=dict)  # element id -> index of the block it starts in
    title: str = ""                  # <title>
    language: str | None = None      # <html lang> / xml:lang
    types: tuple[str, ...] = ()      # the <body>'s epub:type / role


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def _tokens(el, name: str) -> set[str]:
    v = el.get(name)
    return set(v.lower().split()) if v else set()


def _types(el) -> list[str]:
    out = [t for t in (el.get(_EPUB_TYPE) or el.get("epub:type") or "").split() if t]
    out += [t for t in (el.get("role") or "").split() if t]
    return out


class _Walker:
    def __init__(self):
        self.doc = Document()
        self.buf: list[str] = []
        self.types: list[str] = []
        self.pending_ids: list[str] = []

    # ------------------------------------------------------------------ output
    def flush(self, level: int = 0) -> None:
        text = " ".join("".join(self.buf).split())
        self.buf = []
        if text:
            for i in self.pending_ids:
                self.doc.anchors.setdefault(i, len(self.doc.blocks))
            self.pending_ids = []
            self.doc.blocks.append(Block(text, level, tuple(self.types)))

    def anchor(self, el) -> None:
        ident = el.get("id") or (el.get("name") if _local(el.tag) == "a" else None)
        if ident:
            if self.buf and "".join(self.buf).strip():
                self.doc.anchors.setdefault(ident, len(self.doc.blocks))   # inside the paragraph being read
            else:
                self.pending_ids.append(ident)

    # ------------------------------------------------------------------ what is left out
    def _is_pagebreak(self, el, tag: str, types: list[str], classes: set[str]) -> bool:
        return ("pagebreak" in types or "doc-pagebreak" in types or bool(classes & _PAGEBREAK_CLASSES)
                or (tag == "span" and el.get("title", "").strip().isdigit() and not (el.text or "").strip()))

    def _is_noteref(self, el, tag: str, types: list[str], classes: set[str]) -> bool:
        if "noteref" in types or "doc-noteref" in types or classes & _NOTEREF_CLASSES:
            return True
        if tag in ("sup", "a"):
            text = "".join(el.itertext())
            if tag == "sup" and _MARKER.match(text):
                return True
            href = el.get("href") or ""
            if tag == "a" and "#" in href and _MARKER.match(text):
                return True
        return False

    def _is_note(self, types: list[str], classes: set[str]) -> bool:
        return bool(set(types) & (_NOTE_TYPES | _NOTE_ROLES) or classes & _NOTE_CLASSES)

    # ------------------------------------------------------------------ the walk
    def walk(self, el) -> None:
        tag = _local(el.tag)
        if not tag:                         # a comment or a processing instruction
            return
        types = _types(el)
        classes = _tokens(el, "class")
        if tag in _SKIP or el.get("hidden") is not None or self._is_pagebreak(el, tag, types, classes) \
                or self._is_noteref(el, tag, types, classes):
            return
        if self._is_note(types, classes) and tag != "body":
            self.note(el)
            return
        self.anchor(el)
        if tag in _HEADINGS:
            self.flush()
            self.types += types
            self.children(el)
            self.flush(_HEADINGS[tag])
            del self.types[len(self.types) - len(types):]
            return
        if tag == "br":
            self.buf.append(" ")
            return
        block = tag in _BLOCK
        if block:
            self.flush()
        self.types += types
        self.children(el)
        if block:
            self.flush()
        if types:
            del self.types[len(self.types) - len(types):]

    def children(self, el) -> None:
        if el.text:
            self.buf.append(el.text)
        for child in el:
            self.walk(child)
            if child.tail:
                self.buf.append(child.tail)

    def note(self, el) -> None:
        """A footnote or a notes section: its paragraphs go to the notes, never to the text."""
        inner = _Walker()
        inner.children(el)
        inner.flush()
        self.doc.notes += [b.text for b in inner.doc.blocks if not b.level and not _MARKER.match(b.text)] \
            + inner.doc.notes


def _secure_xml_parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True,
                           recover=False, remove_comments=True, remove_pis=True)


def parse_xml(data: bytes):
    """An XML document (OPF, NCX, XHTML) without network access or entity expansion."""
    return etree.fromstring(data, _secure_xml_parser())


def parse_markup(data: bytes, *, xml_first: bool = True):
    """The root of an (X)HTML document: strict XML first (EPUB content documents are XHTML),
    else lxml's forgiving HTML parser."""
    if xml_first:
        try:
            return parse_xml(data)
        except etree.XMLSyntaxError:
            pass
    parser = lxml_html.HTMLParser(remove_comments=True, remove_pis=True, no_network=True, huge_tree=True)
    root = lxml_html.document_fromstring(data, parser=parser)
    if root is None:
        raise ValueError("not an HTML document")
    return root


def read_document(root) -> Document:
    """Blocks, notes and anchors of a parsed (X)HTML document."""
    w = _Walker()
    title_el = next((e for e in root.iter() if _local(e.tag) == "title"), None)
    body = next((e for e in root.iter() if _local(e.tag) == "body"), root)
    w.doc.title = " ".join("".join(title_el.itertext()).split()) if title_el is not None else ""
    lang = root.get("{http://www.w3.org/XML/1998/namespace}lang") or root.get("lang")
    w.doc.language = lang.strip() or None if lang else None
    w.doc.types = tuple(_types(body))
    try:
        w.walk(body)
    except RecursionError:
        raise ValueError("the document is nested too deeply to read") from None
    w.flush()
    return w.doc
