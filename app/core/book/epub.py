"""EPUB 2 and 3 -> a Book: the spine's reading order, chapters from the navigation document
(EPUB 3) or the NCX (EPUB 2), else from each document's first heading.

Read with the standard library's zipfile and lxml (no network, no entity expansion); one
content document is in memory at a time, each at most MAX_DOCUMENT_BYTES. What a book says
about its parts (epub:type, landmarks, the EPUB 2 guide, file names, titles: app.core.book.matter)
decides which chapters are front matter, back matter or notes. DRM-protected books are
recognised by META-INF/encryption.xml (content documents encrypted; fonts obfuscated by the
IDPF or Adobe algorithm are not DRM), rights.xml (Adobe ADEPT), license.lcpl (Readium LCP) or
sinf.xml (Apple FairPlay), and refused with a message that says so.
"""

from __future__ import annotations

import os
import posixpath
import re
import zipfile
from dataclasses import dataclass
from urllib.parse import unquote, urldefrag

from lxml import etree

from app.core.book.html_text import Document, parse_markup, parse_xml, read_document
from app.core.book.matter import kind_of, kind_of_file, kind_of_title, kind_of_types
from app.core.book.model import (
    Book,
    BookError,
    Chapter,
    DamagedBookError,
    DrmProtectedError,
    NoSpineError,
    NoTextError,
    build_chapter,
)

MAX_DOCUMENT_BYTES = 64 * 2**20
MAX_COVER_BYTES = 16 * 2**20
_DC = "http://purl.org/dc/elements/1.1/"
_OPF = "http://www.idpf.org/2007/opf"
_NCX = "http://www.daisy.org/z3986/2005/ncx/"
_ENC = "http://www.w3.org/2001/04/xmlenc#"
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
_DOC_TYPES = {"application/xhtml+xml", "text/html", "application/xml", "text/xml", "application/x-dtbook+xml"}
_DRM_FILES = {"meta-inf/rights.xml": "Adobe ADEPT", "meta-inf/license.lcpl": "Readium LCP",
              "meta-inf/sinf.xml": "Apple FairPlay"}


@dataclass
class _Item:
    id: str
    path: str          # in the zip
    media_type: str
    properties: set[str]


@dataclass
class _TocEntry:
    title: str
    path: str
    fragment: str
    depth: int


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _text(el) -> str:
    return " ".join("".join(el.itertext()).split()) if el is not None else ""


def _join(base_dir: str, href: str) -> tuple[str, str]:
    path, frag = urldefrag(href.strip())
    return posixpath.normpath(posixpath.join(base_dir, unquote(path))).lstrip("/"), unquote(frag)


class _Epub:
    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)
        try:
            self.zip = zipfile.ZipFile(path)
        except zipfile.BadZipFile:
            raise DamagedBookError(f"{self.name} is not a readable EPUB: its zip archive is damaged or it is not "
                                   "a zip file at all") from None
        except OSError as e:
            raise BookError(f"cannot read {path}: {e.strerror or e}") from None
        self.names = {n.lower(): n for n in self.zip.namelist()}
        self.notes: list[str] = []

    # ------------------------------------------------------------------ reading entries
    def read(self, name: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
        real = self.names.get(name.lower())
        if real is None:
            raise KeyError(name)
        info = self.zip.getinfo(real)
        if info.file_size > limit:
            raise BookError(f"{self.name}: {real} is {info.file_size / 2**20:.0f} MB, more than the "
                            f"{limit // 2**20} MB one part of a book may hold")
        try:
            with self.zip.open(info) as f:
                data = f.read(limit + 1)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError) as e:
            raise DamagedBookError(f"{self.name} is damaged: {real} cannot be unpacked ({e})") from None
        except RuntimeError as e:        # an encrypted zip entry
            raise DrmProtectedError(f"{self.name} is encrypted ({e}); its text cannot be read") from None
        if len(data) > limit:
            raise BookError(f"{self.name}: {real} unpacks to more than {limit // 2**20} MB")
        return data

    def xml(self, name: str, what: str):
        try:
            return parse_xml(self.read(name))
        except KeyError:
            raise DamagedBookError(f"{self.name} is damaged: its {what} ({name}) is missing") from None
        except etree.XMLSyntaxError as e:
            raise DamagedBookError(f"{self.name} is damaged: its {what} ({name}) is not well-formed XML "
                                   f"({e.msg})") from None

    # ------------------------------------------------------------------ DRM
    def check_drm(self) -> None:
        for name, scheme in _DRM_FILES.items():
            if name in self.names:
                raise DrmProtectedError(_drm_message(self.name, scheme))
        if "meta-inf/encryption.xml" not in self.names:
            return
        try:
            root = parse_xml(self.read("META-INF/encryption.xml"))
        except etree.XMLSyntaxError:
            raise DrmProtectedError(_drm_message(self.name, "an unreadable encryption.xml")) from None
        for data in root.iter(f"{{{_ENC}}}EncryptedData"):
            method = data.find(f"{{{_ENC}}}EncryptionMethod")
            algorithm = method.get("Algorithm", "") if method is not None else ""
            ref = data.find(f".//{{{_ENC}}}CipherReference")
            uri = unquote(ref.get("URI", "")) if ref is not None else ""
            is_font = re.search(r"\.(otf|ttf|woff2?|eot)$", uri, re.I) is not None
            if algorithm in _FONT_OBFUSCATION and is_font:
                continue                                    # obfuscated fonts: not DRM
            scheme = "Adobe ADEPT" if "adobe" in algorithm.lower() or "ns.adobe" in algorithm else "encryption"
            raise DrmProtectedError(_drm_message(self.name, f"{scheme}; {uri or 'content'} is encrypted"))

    # ------------------------------------------------------------------ package
    def package(self) -> tuple[str, etree._Element]:
        opf = None
        if "meta-inf/container.xml" in self.names:
            container = self.xml("META-INF/container.xml", "container")
            for rf in container.iter():
                if _local(rf.tag) == "rootfile" and rf.get("full-path") and \
                        rf.get("media-type", "application/oebps-package+xml") == "application/oebps-package+xml":
                    opf = unquote(rf.get("full-path"))
                    break
        if opf is None or opf.lower() not in self.names:
            found = [n for n in self.zip.namelist() if n.lower().endswith(".opf")]
            if not found:
                raise DamagedBookError(f"{self.name} is not an EPUB: it holds no package document (.opf)")
            opf = found[0]
        return opf, self.xml(opf, "package document")


def _drm_message(name: str, scheme: str) -> str:
    return (f"{name} is DRM-protected ({scheme}): its text is encrypted and cannot be read. Remove nothing by "
            "force; use a DRM-free copy of the book (many shops sell them, and public-domain books are free)")


def _metadata(root) -> dict:
    md = next((e for e in root if _local(e.tag) == "metadata"), None)
    out = {"title": "", "authors": [], "language": None, "year": None, "cover_id": None}
    if md is None:
        return out
    refines: dict[str, dict[str, str]] = {}
    for m in md.iter(f"{{{_OPF}}}meta", "meta"):
        if m.get("refines") and m.get("property"):
            refines.setdefault(m.get("refines").lstrip("#"), {})[m.get("property")] = (m.text or "").strip()
        if m.get("name") == "cover" and m.get("content"):
            out["cover_id"] = m.get("content")
    titles = [e for e in md if _local(e.tag) == "title" and _text(e)]
    main = [t for t in titles if refines.get(t.get("id") or "", {}).get("title-type") == "main"]
    out["title"] = _text((main or titles)[0]) if titles else ""
    creators = [e for e in md if _local(e.tag) == "creator" and _text(e)]
    def role(e) -> str:
        return (e.get(f"{{{_OPF}}}role") or refines.get(e.get("id") or "", {}).get("role") or "aut").lower()
    out["authors"] = [_text(e) for e in creators if role(e) == "aut"] or [_text(e) for e in creators[:1]]
    lang = next((_text(e) for e in md if _local(e.tag) == "language" and _text(e)), None)
    out["language"] = lang
    date = next((_text(e) for e in md if _local(e.tag) == "date" and _text(e)), "")
    year = re.search(r"\b(\d{4})\b", date)
    out["year"] = year.group(1) if year else None
    return out


def import_epub(path: str) -> Book:
    ep = _Epub(path)
    ep.check_drm()
    opf_path, root = ep.package()
    base = posixpath.dirname(opf_path)
    md = _metadata(root)
    manifest: dict[str, _Item] = {}
    by_path: dict[str, _Item] = {}
    man_el = next((e for e in root if _local(e.tag) == "manifest"), None)
    for e in (man_el if man_el is not None else []):
        if _local(e.tag) == "item" and e.get("id") and e.get("href"):
            p, _ = _join(base, e.get("href"))
            item = _Item(e.get("id"), p, (e.get("media-type") or "").lower(), set((e.get("properties") or "").split()))
            manifest[item.id] = by_path[p.lower()] = item
    spine_el = next((e for e in root if _local(e.tag) == "spine"), None)
    refs = [e for e in (spine_el if spine_el is not None else []) if _local(e.tag) == "itemref"]
    if spine_el is None or not refs:
        raise NoSpineError(f"{ep.name} has no reading order: its package document lists no spine, so the "
                           "order of its chapters is unknown")
    spine: list[tuple[_Item, bool]] = []
    for r in refs:
        item = manifest.get(r.get("idref", ""))
        if item is None:
            ep.notes.append(f"the spine names {r.get('idref')!r}, which the manifest lacks: skipped")
        elif item.media_type in _DOC_TYPES or item.path.lower().endswith((".xhtml", ".html", ".htm")):
            spine.append((item, r.get("linear", "yes") != "no"))
    if not spine:
        raise NoSpineError(f"{ep.name} has no reading order: its spine lists no content documents")
    version = root.get("version", "2.0")
    hints = _guide(root, base)
    toc, landmarks = _toc(ep, manifest, spine_el, version)
    hints.update(landmarks)
    book = Book(md["title"] or os.path.splitext(ep.name)[0], [], author=" & ".join(md["authors"]),
                language=md["language"], year=md["year"], format="epub3" if version.startswith("3") else "epub2",
                source=path, notes=ep.notes)
    book.cover, book.cover_mime = _cover(ep, manifest, md["cover_id"], hints)
    _chapters(ep, book, spine, toc, hints)
    if not book.chapters:
        raise NoTextError(f"{ep.name} holds no text to read (its documents are empty or only images)")
    return book


def _guide(root, base: str) -> dict[str, str]:
    out: dict[str, str] = {}
    guide = next((e for e in root if _local(e.tag) == "guide"), None)
    for r in (guide if guide is not None else []):
        if _local(r.tag) == "reference" and r.get("href") and r.get("type"):
            p, _ = _join(base, r.get("href"))
            out.setdefault(p.lower(), r.get("type").lower())
    return out


def _toc(ep: _Epub, manifest: dict, spine_el, version: str) -> tuple[list[_TocEntry], dict[str, str]]:
    nav = next((i for i in manifest.values() if "nav" in i.properties), None)
    if nav is not None:
        try:
            entries, landmarks = _nav(ep, nav)
            if entries:
                return entries, landmarks
        except (BookError, KeyError, ValueError, etree.XMLSyntaxError):
            ep.notes.append("the navigation document is unreadable: chapters come from the NCX or the headings")
    ncx = manifest.get(spine_el.get("toc", "")) or next(
        (i for i in manifest.values() if i.media_type == "application/x-dtbncx+xml"), None)
    if ncx is None:
        return [], {}
    try:
        root = parse_xml(ep.read(ncx.path))
    except (KeyError, etree.XMLSyntaxError, BookError):
        ep.notes.append("the NCX table of contents is unreadable: chapters come from the headings")
        return [], {}
    base = posixpath.dirname(ncx.path)
    out: list[_TocEntry] = []

    def points(parent, depth: int) -> None:
        for p in parent:
            if _local(p.tag) != "navPoint":
                continue
            label = next((e for e in p.iter(f"{{{_NCX}}}text", "text")), None)
            content = next((e for e in p if _local(e.tag) == "content"), None)
            if content is not None and content.get("src"):
                path, frag = _join(base, content.get("src"))
                out.append(_TocEntry(_text(label), path, frag, depth))
            points(p, depth + 1)

    nav_map = next((e for e in root if _local(e.tag) == "navMap"), None)
    if nav_map is not None:
        points(nav_map, 0)
    return out, {}


def _nav(ep: _Epub, nav: _Item) -> tuple[list[_TocEntry], dict[str, str]]:
    root = parse_markup(ep.read(nav.path))
    base = posixpath.dirname(nav.path)
    entries: list[_TocEntry] = []
    landmarks: dict[str, str] = {}
    navs = [e for e in root.iter() if _local(e.tag) == "nav"]
    kind = lambda e: (e.get("{http://www.idpf.org/2007/ops}type") or e.get("epub:type") or "").split()  # noqa: E731
    toc = next((n for n in navs if "toc" in kind(n)), navs[0] if navs else None)
    for n in navs:
        if "landmarks" in kind(n):
            for a in n.iter():
                if _local(a.tag) == "a" and a.get("href") and kind(a):
                    p, _ = _join(base, a.get("href"))
                    landmarks.setdefault(p.lower(), kind(a)[0].lower())
    if toc is None:
        return [], landmarks

    def walk(el, depth: int) -> None:
        for child in el:
            tag = _local(child.tag)
            if tag == "li":
                link = next((a for a in child if _local(a.tag) in ("a", "span")), None)
                if link is not None and link.get("href"):
                    path, frag = _join(base, link.get("href"))
                    entries.append(_TocEntry(_text(link), path, frag, depth))
                for sub in child:
                    if _local(sub.tag) == "ol":
                        walk(sub, depth + 1)
            elif tag == "ol":
                walk(child, depth)

    walk(toc, 0)
    return entries, landmarks


def _cover(ep: _Epub, manifest: dict, cover_id: str | None, hints: dict) -> tuple[bytes | None, str | None]:
    item = next((i for i in manifest.values() if "cover-image" in i.properties), None)
    if item is None and cover_id:
        item = manifest.get(cover_id) or next((i for i in manifest.values() if i.path.endswith(cover_id)), None)
    if item is None:
        images = [i for i in manifest.values() if i.media_type.startswith("image/")]
        item = next((i for i in images if "cover" in i.id.lower() or "cover" in posixpath.basename(i.path).lower()),
                    None)
    if item is None or not item.media_type.startswith("image/"):
        return None, None
    try:
        return ep.read(item.path, MAX_COVER_BYTES), item.media_type
    except (KeyError, BookError):
        ep.notes.append("the cover image is missing or too large: no cover")
        return None, None


def _chapters(ep: _Epub, book: Book, spine, toc: list[_TocEntry], hints: dict) -> None:
    starts: dict[str, list[_TocEntry]] = {}
    for t in toc:
        starts.setdefault(t.path.lower(), []).append(t)
    notes: list[str] = []
    open_chapter: dict | None = None      # the chapter being gathered: title, paragraphs, kind, language, source

    def close() -> None:
        nonlocal open_chapter
        if open_chapter is not None:
            ch = build_chapter(open_chapter["title"], open_chapter["paragraphs"], open_chapter["kind"],
                               language=open_chapter["language"], source=open_chapter["source"], notes=book.notes)
            if ch is not None:
                book.chapters.append(ch)
        open_chapter = None

    for item, linear in spine:
        try:
            doc = read_document(parse_markup(ep.read(item.path)))
        except KeyError:
            book.notes.append(f"{item.path} is named in the spine but missing from the book: skipped")
            continue
        except ValueError as e:
            book.notes.append(f"{item.path} cannot be read ({e}): skipped")
            continue
        notes += doc.notes
        file_hint = hints.get(item.path.lower())
        doc_kind = kind_of_types(list(doc.types) + ([file_hint] if file_hint else [])) or kind_of_file(item.path)
        if doc_kind is None and not linear:
            doc_kind = "notes"
        cuts = _cuts(doc, starts.get(item.path.lower(), []))
        language = doc.language or book.language
        if not cuts or cuts[0][0] > 0:
            head = doc.blocks[: cuts[0][0] if cuts else len(doc.blocks)]
            continuing = open_chapter is not None and doc_kind in (None, "body") and open_chapter["kind"] == "body"
            if continuing:
                open_chapter["paragraphs"] += [b.text for b in head]
            elif head or not toc:
                close()
                title = next((b.text for b in head if b.level), "") or doc.title or _stem(item.path)
                kind = doc_kind or kind_of(types=head[0].types if head else (), title=title)
                open_chapter = {"title": title if title != _stem(item.path) or not head else head[0].text[:60],
                                "paragraphs": [b.text for b in head], "kind": kind, "language": language,
                                "source": item.path}
        for k, (at, entry) in enumerate(cuts):
            close()
            end = cuts[k + 1][0] if k + 1 < len(cuts) else len(doc.blocks)
            part = doc.blocks[at:end]
            section_kind = kind_of_types(part[0].types) if part else None
            kind = (section_kind if section_kind not in (None, "body") else None) or \
                (doc_kind if doc_kind not in (None, "body") else None) or kind_of_title(entry.title) or \
                section_kind or "body"
            open_chapter = {"title": entry.title, "paragraphs": [b.text for b in part], "kind": kind,
                            "language": language, "source": item.path + (f"#{entry.fragment}" if entry.fragment else "")}
    close()
    if notes:
        ch = build_chapter("Notes", notes, "notes", language=book.language, source="footnotes and endnotes",
                           notes=book.notes)
        if ch is not None:
            book.chapters.append(ch)


def _cuts(doc: Document, entries: list[_TocEntry]) -> list[tuple[int, _TocEntry]]:
    """Where the table of contents' entries for this document start: (block index, entry),
    in reading order, one entry per place (the outermost)."""
    out: dict[int, _TocEntry] = {}
    for e in entries:
        at = doc.anchors.get(e.fragment, 0) if e.fragment else 0
        if at not in out or e.depth < out[at].depth:
            out[at] = e
    return sorted(out.items(), key=lambda kv: kv[0])


def _stem(path: str) -> str:
    return os.path.splitext(posixpath.basename(path))[0]
