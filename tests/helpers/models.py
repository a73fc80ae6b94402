"""Converted random-weight models for tests, cached beside the snapshots.

A model is keyed by (variant, size, seed, quant) and by a fingerprint of the
installed converter's source, so a converter change never serves a stale file.
Conversion runs through the real command line (`chatterbox-studio convert`) in a
subprocess in which importing torch is made impossible.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from filelock import FileLock

from tests.reference.cache import cache_root, snapshot_dir

# Runs the CLI with torch unimportable: sys.modules[name] = None makes `import name` fail.
NO_TORCH_CLI = (
    "import sys\n"
    "for name in ('torch', 'torchaudio'): sys.modules[name] = None\n"
    "from app.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'torchaudio') and sys.modules[m] is not None]\n"
    "sys.exit(rc)\n"
)


def converter_fingerprint() -> str:
    import engine_native.convert as conv

    h = hashlib.sha256()
    for f in sorted(Path(conv.__file__).parent.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:12]


def run_cli_without_torch(*args: str) -> subprocess.CompletedProcess:
    # cwd outside the source tree, so the installed packages are imported, not the sources.
    return subprocess.run([sys.executable, "-c", NO_TORCH_CLI, *args], capture_output=True, text=True,
                          cwd=tempfile.gettempdir())


def model_path(variant: str, quant: str = "f32", seed: int = 0, size: str = "full") -> Path:
    snap = snapshot_dir(variant, seed=seed, size=size)
    out = cache_root() / "models" / f"{variant}-{size}-s{seed}-{quant}-{converter_fingerprint()}.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not out.exists():
            # Other converters' files go once they are a day old: a checkout beside this one
            # (another branch's converter) may still be reading its own.
            for stale in out.parent.glob(f"{variant}-{size}-s{seed}-{quant}-*.gguf"):
                if time.time() - stale.stat().st_mtime > 86400:
                    stale.unlink(missing_ok=True)
            res = run_cli_without_torch("convert", str(snap), "-o", str(out), "--quant", quant)
            if res.returncode != 0:
                raise RuntimeError(f"conversion failed:\n{res.stdout}\n{res.stderr}")
    return out


def installed_perth() -> Path | None:
    """resemble-perth's trained watermarker as the reference venv installed it (the official
    package's own weights; None when it is not installed)."""
    from tests.reference import refenv

    found = sorted((refenv.ref_venv() / "lib").glob("python3*/site-packages/perth/perth_net/pretrained/implicit"))
    return found[0] if found else None


def watermark_model_path() -> Path:
    """perth.gguf converted from installed_perth(), cached beside the models and keyed by the
    Perth converter's source (the suite's engines mark their audio with it, as the app's do)."""
    from engine_native.convert import perth

    source = installed_perth()
    if source is None:
        raise RuntimeError("resemble-perth is not installed in the reference venv (tests/reference/setup_venv.sh)")
    fingerprint = hashlib.sha256(Path(perth.__file__).read_bytes()).hexdigest()[:12]
    out = cache_root() / "models" / f"perth-{fingerprint}.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not out.exists():
            perth.convert_perth(source, out, log=None)
    return out
