"""Builds the test books in this folder from public-domain texts, with a real EPUB writer.

The texts are two Project Gutenberg etexts of the Canterbury corpus, shipped as test data in
the source distribution of Brotli on PyPI (`brotli-1.2.1.tar.gz`: tests/testdata/):

- alice29.txt: Lewis Carroll, "Alice's Adventures in Wonderland" (1865), the Millennium
  Fulcrum Edition 2.9 (Project Gutenberg);
- plrabn12.txt: John Milton, "Paradise Lost" (1667), Project Gutenberg's February 1992 release.

Both are in the public domain. This script turns each into Markdown (the chapter headings of
the text become `#` headings; Paradise Lost keeps its verse lines as a line block) and pandoc
(Debian's `pandoc` 2.17, its EPUB writer) writes:

- alice.epub: EPUB 3 (a navigation document; a cover page and a title page in front);
- paradise-lost.epub: EPUB 2 (an NCX table of contents; Project Gutenberg's release note in
  front as an imprint; a cover);
- alice.html.gz: Alice as one standalone HTML5 page (pandoc's HTML writer);
- alice.md.gz: the Markdown pandoc read; alice.txt.gz: the etext as published.

The covers are plain images drawn by ffmpeg. Run it again with:

    pip download --no-deps --no-binary :all: brotli==1.2.1 -d /tmp/brotli
    tar xzf /tmp/brotli/brotli-1.2.1.tar.gz -C /tmp/brotli
    python tests/helpers/books/make_books.py /tmp/brotli/brotli-1.2.1/tests/testdata
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROMAN = r"[IVXLC]+"


def read(path: Path) -> str:
    return path.read_text(encoding="ascii").replace("\r\n", "\n")


def alice_markdown(text: str) -> str:
    head, _, rest = text.partition("CHAPTER I\n")
    parts = re.split(rf"\n\s*CHAPTER ({ROMAN})\s*\n", "\n" + "CHAPTER I\n" + rest)
    out = ["---", "title: Alice's Adventures in Wonderland", "creator:", "- role: author",
           "  text: Lewis Carroll", "date: '1865'", "lang: en-GB",
           "rights: Public domain (Project Gutenberg, Millennium Fulcrum Edition 2.9)",
           "subject: Fiction", "---", ""]
    for i in range(1, len(parts), 2):
        numeral, body = parts[i], parts[i + 1]
        blocks = [b for b in re.split(r"\n\s*\n", body) if b.strip()]
        subtitle = " ".join(blocks[0].split())
        out.append(f"# Chapter {numeral}. {subtitle}\n")
        for b in blocks[1:]:
            lines = [ln.strip() for ln in b.split("\n")]
            if all(ln.startswith("*") and set(ln) <= set("* ") for ln in lines):
                out.append("* * *\n")          # a scene break
            elif sum(len(ln) for ln in lines) / len(lines) < 40 and len(lines) > 1:
                out.append("\n".join("| " + ln for ln in lines) + "\n")   # verse
            else:
                out.append(" ".join(lines).replace("`", "\u2018").replace("'", "\u2019") + "\n")
    return "\n".join(out)


def paradise_markdown(text: str) -> str:
    intro_start = text.index("Introduction")
    first_book = text.index("\nBook I ")
    intro = text[intro_start:first_book]
    intro_body = intro.split("\n", 1)[1].rsplit("Paradise Lost", 1)[0]
    out = ["---", "title: Paradise Lost", "creator:", "- role: author", "  text: John Milton",
           "date: '1667'", "lang: en", "rights: Public domain (Project Gutenberg, February 1992)", "---", "",
           "# A note on this etext {epub:type=imprint}\n"]
    for b in re.split(r"\n\s*\n", intro_body):
        if b.strip():
            out.append(" ".join(b.split()) + "\n")
    books = re.split(rf"\n\s*Book ({ROMAN})\s*\n", text[first_book:])
    for i in range(1, len(books), 2):
        numeral, body = books[i], books[i + 1].replace("[The End]", "")
        out.append(f"# Book {numeral}\n")
        para: list[str] = []
        for raw in body.split("\n"):
            line = raw.rstrip()
            if not line.strip():
                continue
            if raw.startswith("  ") and para:
                out.append("\n".join("| " + ln for ln in para) + "\n")
                para = []
            para.append(line.strip())
        if para:
            out.append("\n".join("| " + ln for ln in para) + "\n")
    return "\n".join(out)


def cover(path: Path, colour: str, title: str) -> None:
    font = "/usr/share/fonts/truetype/dejavu/DejaVuSerif-Bold.ttf"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", f"color=c={colour}:s=300x450",
                    "-vf", f"drawtext=fontfile={font}:text='{title}':fontcolor=white:fontsize=26:"
                    "x=(w-text_w)/2:y=(h-text_h)/2", "-frames:v", "1", "-q:v", "4", str(path)], check=True)


def pandoc(src: Path, out: Path, *args: str) -> None:
    subprocess.run(["pandoc", str(src), "-f", "markdown", "-o", str(out), *args], check=True)


def main(testdata: str) -> None:
    data = Path(testdata)
    alice, paradise = read(data / "alice29.txt"), read(data / "plrabn12.txt")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "alice.md").write_text(alice_markdown(alice), encoding="utf-8")
        (t / "paradise.md").write_text(paradise_markdown(paradise), encoding="utf-8")
        cover(t / "alice.jpg", "0x2f4f6f", "Alice")
        cover(t / "paradise.jpg", "0x5a1e1e", "Paradise Lost")
        pandoc(t / "alice.md", HERE / "alice.epub", "-t", "epub3", "--epub-cover-image", str(t / "alice.jpg"))
        pandoc(t / "paradise.md", HERE / "paradise-lost.epub", "-t", "epub2", "--epub-cover-image",
               str(t / "paradise.jpg"))
        pandoc(t / "alice.md", t / "alice.html", "-t", "html5", "-s")
        for src, name in ((t / "alice.html", "alice.html.gz"), (t / "alice.md", "alice.md.gz"),
                          (data / "alice29.txt", "alice.txt.gz")):
            (HERE / name).write_bytes(gzip.compress(src.read_bytes(), 9, mtime=0))


if __name__ == "__main__":
    main(sys.argv[1])
