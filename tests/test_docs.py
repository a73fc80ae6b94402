"""The docs name only what exists: every repository path in README.md, docs/*.md and the
folders' README.md files (in backticks, in a link or in the prose) is a file or folder of the
checkout, and a `path::name` names a test or function defined in that file.

A path counts when it starts with one of the repository's top-level folders (TOP_LEVEL); a
link counts relative to the document that holds it; a glob needs one match; a path in a package
may name a build output of the installed package (`engine_native/_core*.so`); a numbered file may
go by its number (`patches/0002` for patches/0002-*.patch). A source file named in backticks
by a shorter path (`hift/kernels_direct.cpp`, `main_window.py`) is the end of a repository
file's path, unless it is ggml's or the reference package's. One failure lists every missing
path."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOP_LEVEL = ("app", "engine_native", "voice_lab", "tests", "scripts", "packaging", "benchmarks", "docs",
             "resources", "patches", ".ci")

# A top-level folder at the start of a word (not inside another path, a URL, ~/ or $VAR/), then
# path characters; an optional ::name after a file.
PATH = re.compile(r"(?<![\w./~$-])((?:" + "|".join(re.escape(t) for t in TOP_LEVEL) + r")/[\w.*/+-]*)(::\w+)?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`]+)`")
SOURCE_FILE = re.compile(r"^[\w./+-]+\.(?:py|cpp|h|inc)$")
ELSEWHERE = re.compile(r"^(?:ggml[-/]|chatterbox/)")  # ggml's sources, the reference package's


def documents() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    docs += sorted(p for p in ROOT.glob("*/README.md") if p.parent.name in TOP_LEVEL and p.parent.name != "docs")
    return docs


def _roots(path: str) -> list[Path]:
    """The checkout, and for a path in one of our packages the installed package's folder."""
    roots = [ROOT]
    top, _, rest = path.partition("/")
    if top in ("app", "engine_native", "voice_lab") and rest:
        spec = importlib.util.find_spec(top)
        if spec and spec.origin:
            roots.append(Path(spec.origin).parent.parent)
    return roots


def _exists(path: str) -> bool:
    parent, _, last = path.rpartition("/")
    for root in _roots(path):
        if any(c in path for c in "*?[") and any(root.glob(path)):
            return True
        if (root / path).exists():
            return True
        if last.isdigit() and any((root / parent).glob(last + "-*")):
            return True
    return False


def _defines(path: str, name: str) -> bool:
    text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", text, re.M) is not None


def named_paths(doc: Path) -> list[tuple[int, str, str | None]]:
    """(line, repository path, ::name or None) for each path the document names."""
    found = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for m in PATH.finditer(line):
            path = m.group(1).rstrip(".")  # a sentence's full stop
            found.append((number, path, m.group(2)[2:] if m.group(2) else None))
        for m in LINK.finditer(line):
            target = m.group(1).split("#")[0]
            if target and not re.match(r"[a-z]+:", target):
                resolved = (doc.parent / target).resolve()
                found.append((number, resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT)
                              else target, None))
    return found


def short_source_names(doc: Path) -> list[tuple[int, str]]:
    """(line, name) for each source file a code span names by less than its repository path."""
    found = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for span in CODE_SPAN.finditer(line):
            for word in re.split(r"[\s,;()]+", span.group(1)):
                name = word.split("::")[0].removeprefix("./").rstrip(".:")
                if SOURCE_FILE.match(name) and name.split("/")[0] not in TOP_LEVEL and not ELSEWHERE.match(name):
                    found.append((number, name))
    return found


def _repository_files() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for top in TOP_LEVEL if (ROOT / top).is_dir()
            for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_documents_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in documents()}
    assert {"README.md", "docs/DESIGN.md"} <= names, names


def test_every_path_the_docs_name_exists():
    missing = []
    for doc in documents():
        for number, path, name in named_paths(doc):
            where = f"{doc.relative_to(ROOT)}:{number}"
            if not _exists(path):
                missing.append(f"{where}: {path}")
            elif name and (ROOT / path).is_file() and not _defines(path, name):
                missing.append(f"{where}: {path}::{name} (no such test or function in the file)")
    assert not missing, f"{len(missing)} path(s) named in the docs do not exist:\n" + "\n".join(missing)


def test_every_source_file_the_docs_name_by_a_shorter_path_exists():
    files = _repository_files()
    missing = [f"{doc.relative_to(ROOT)}:{number}: {name}"
               for doc in documents() for number, name in short_source_names(doc)
               if not any(f == name or f.endswith("/" + name) for f in files)]
    assert not missing, f"{len(missing)} source file(s) named in the docs do not exist:\n" + "\n".join(missing)
