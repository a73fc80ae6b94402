"""The engine links without OpenBLAS, as the GPU machine builds it.

Where scipy-openblas32 is missing (the GPU machine's Python) or CBS_BLAS is off, the code under
`#if... CBS_HAVE_BLAS` is compiled out. A function defined only there but called from outside it
(causal_conv_product, 2026-12-07) left `_core` with an undefined symbol that only `import` found,
on that machine. A second whole build would cost CI minutes; this compiles again, without
CBS_HAVE_BLAS, only the sources that test it (themselves or through a header they include), with
the installed build's own commands, and checks that every `cbs::` symbol the module's objects
then need is defined by one of them (the other objects are the build's, unchanged by the flag).
"""

from __future__ import annotations

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "engine_native" / "src"
GUARD = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif)\b.*\bCBS_HAVE_BLAS\b", re.MULTILINE)


def _build_dir() -> Path:
    builds = [p.parent for p in sorted((ROOT / "build").glob("*/build.ninja"))
              if "_core.dir" in p.read_text(errors="replace")]
    if not builds:
        pytest.skip("no CMake build of the engine here (build/<wheel tag>/, which the install leaves)")
    return max(builds, key=lambda p: (p / "build.ninja").stat().st_mtime)


def _includes(text: str) -> set[str]:
    return set(re.findall(r'#\s*include\s+"([^"]+)"', text))


def _guarded_sources() -> set[Path]:
    """Sources whose text, or a project header they include (directly or not), has a
    CBS_HAVE_BLAS directive."""
    texts = {p.relative_to(SRC).as_posix(): p.read_text(errors="replace") for p in SRC.rglob("*.h")}
    headers = {h for h, t in texts.items() if GUARD.search(t)}
    while more := {h for h, t in texts.items() if h not in headers and _includes(t) & headers}:
        headers |= more
    out = set()
    for p in SRC.rglob("*.cpp"):
        text = p.read_text(errors="replace")
        if GUARD.search(text) or _includes(text) & headers:
            out.add(p.resolve())
    return out


def _symbols(obj: Path) -> tuple[set[str], set[str]]:
    """(defined, undefined) `cbs::` symbols of an object file, demangled."""
    out = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for m in re.finditer(r"^([0-9a-f]*)\s+([A-Za-z])\s+(cbs::.*)$", out, re.MULTILINE):
        if m.group(2) == "U":
            undefined.add(m.group(3))
        elif m.group(1):  # a weak symbol without an address is not needed
            defined.add(m.group(3))
    return defined, undefined


def _include_dirs_that_exist(cmd: str) -> str:
    """pip builds in an isolated environment that is gone by now: its pybind11 headers are
    taken from this environment's pybind11, and its other include folders (OpenBLAS's, which
    a build without it does not read) left out."""
    import pybind11

    def fix(m: re.Match) -> str:
        flag, path = m.group(1), m.group(2)
        if Path(path).is_dir():
            return m.group(0)
        return f" {flag} {pybind11.get_include()}" if path.rstrip("/").endswith("pybind11/include") else ""
    return re.sub(r"\s(-I|-isystem)\s*(\S+)", fix, cmd)


def test_every_cbs_symbol_is_defined_in_a_build_without_openblas(tmp_path):
    build = _build_dir()
    db = json.loads(subprocess.run(["ninja", "-C", str(build), "-t", "compdb"], capture_output=True, text=True,
                                   check=True).stdout)
    entries = [e for e in db if "/_core.dir/" in e.get("output", "") and e["file"].endswith(".cpp")]
    assert entries, "the build's compile database has no _core sources"
    guarded = _guarded_sources()
    redo = [e for e in entries if Path(e["file"]).resolve() in guarded]
    assert redo, "no source tests CBS_HAVE_BLAS: update this test"

    def recompile(e) -> Path:
        obj = tmp_path / (Path(e["output"]).name)
        cmd = _include_dirs_that_exist(e["command"].replace("-DCBS_HAVE_BLAS ", ""))
        cmd = re.sub(r"(?<=\s)-o\s+\S+", f"-o {obj}", cmd)
        cmd = re.sub(r"\s-M[DF]\s+\S+|\s-MD\b|\s-MT\s+\S+", " ", cmd)  # no dependency file
        out = subprocess.run(cmd, check=False, shell=True, cwd=e["directory"], capture_output=True, text=True)
        assert out.returncode == 0, f"{e['file']} without CBS_HAVE_BLAS:\n{out.stderr[-3000:]}"
        return obj

    with ThreadPoolExecutor(max_workers=2) as pool:
        objects = list(pool.map(recompile, redo))
    objects += [Path(e["directory"]) / e["output"] for e in entries if e not in redo]
    defined, needed = set(), set()
    for obj in objects:
        d, u = _symbols(obj)
        defined |= d
        needed |= u
    missing = sorted(needed - defined)
    print(f"\n{len(redo)} sources compiled without CBS_HAVE_BLAS; {len(needed)} cbs:: symbols needed, "
          f"{len(missing)} undefined")
    assert not missing, "undefined without OpenBLAS:\n" + "\n".join(missing)
