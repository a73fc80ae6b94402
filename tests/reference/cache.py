"""Cached random-weight snapshots, usable from the project environment.

    from tests.reference.cache import snapshot_dir
    d = snapshot_dir("turbo")          # Path to a complete HF-layout folder

Snapshots live in `${CBS_CACHE_DIR:-~/.cache/chatterbox-studio}/snapshots/
{variant}-{size}-s{seed}`. A missing one is built by the reference venv into a
temporary folder beside it and renamed into place, under a file lock so that
concurrent test processes build it once. A folder counts as complete when its
SHA256SUMS (written last by the builder) exists.
Standard library only.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

from . import refenv

VARIANTS = ("turbo", "nano", "mtl")
SIZES = ("full", "small")      # "small": mtl only (a reduced T3 for CI; see build_mtl.py)
MANIFEST = "SHA256SUMS"


def cache_root() -> Path:
    root = os.environ.get("CBS_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "chatterbox-studio"


def snapshot_path(variant: str, seed: int = 0, size: str = "full") -> Path:
    """Where the snapshot lives (without building it)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    if size not in SIZES or (size != "full" and variant != "mtl"):
        raise ValueError(f"snapshot size {size!r} is not implemented for {variant}; "
                         f"sizes: {SIZES} (small: mtl only)")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return cache_root() / "snapshots" / f"{variant}-{size}-s{seed}"


def is_complete(path: Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


@contextlib.contextmanager
def _locked(lock_path: Path):
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def snapshot_dir(variant: str, seed: int = 0, size: str = "full") -> Path:
    """Return the cached snapshot folder, building it first if absent."""
    final = snapshot_path(variant, seed, size)
    if is_complete(final):
        return final
    with _locked(final.parent / f".{final.name}.lock"):
        if is_complete(final):           # built by another process meanwhile
            return final
        # leftovers of an interrupted build (ours: we hold the lock)
        for stale in final.parent.glob(f".tmp-{final.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():
            shutil.rmtree(final)
        tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
        t0 = time.time()
        print(f"[tests.reference] building snapshot {final.name} ...", file=sys.stderr)
        try:
            refenv.run_in_ref(["snapshot", "--variant", variant, "--seed", str(seed),
                               "--size", size, "--out", str(tmp)])
            if not is_complete(tmp):
                raise RuntimeError(f"snapshot build left no {MANIFEST} in {tmp}")
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"[tests.reference] built {final} in {time.time() - t0:.0f}s", file=sys.stderr)
    return final


def read_manifest(path: Path) -> dict[str, str]:
    """{file name: sha256} from a snapshot's SHA256SUMS."""
    out = {}
    for line in (Path(path) / MANIFEST).read_text().splitlines():
        if line.strip():
            digest, name = line.split(None, 1)
            out[name.lstrip("*")] = digest
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_manifest(path: Path) -> dict[str, str]:
    """Hash every file listed in SHA256SUMS; return {name: problem} (empty = OK)."""
    problems = {}
    for name, digest in read_manifest(path).items():
        f = Path(path) / name
        if not f.is_file():
            problems[name] = "missing"
        elif sha256_file(f) != digest:
            problems[name] = "sha256 mismatch"
    return problems
