"""Where the PyTorch reference environment lives and how to call into it.

Project-side module: standard library only (never imports torch or numpy).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = Path(__file__).resolve().parent / "setup_venv.sh"

# Set in the environment of every re-executed child so that `python -m
# tests.reference` knows it already runs inside the reference venv.
INNER_FLAG = "CBS_REF_INNER"


def ref_venv() -> Path:
    return Path(os.environ.get("CBS_REF_VENV") or REPO_ROOT / ".venv-ref")


def ref_python() -> Path:
    """The reference venv's interpreter (`$CBS_REF_PYTHON` overrides)."""
    p = os.environ.get("CBS_REF_PYTHON")
    return Path(p) if p else ref_venv() / "bin" / "python"


def ensure_ref_python() -> Path:
    """Return the reference python, creating the venv with setup_venv.sh if absent."""
    py = ref_python()
    if not py.exists() and not os.environ.get("CBS_REF_PYTHON"):
        subprocess.run(["bash", str(SETUP_SCRIPT)], check=True)
    if not py.exists():
        raise RuntimeError(
            f"reference python {py} not found; run tests/reference/setup_venv.sh "
            "or set CBS_REF_PYTHON")
    return py


def in_ref_env() -> bool:
    return os.environ.get(INNER_FLAG) == "1"


def child_env() -> dict:
    env = dict(os.environ)
    env[INNER_FLAG] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("PYTHONWARNINGS", "ignore")
    # The repo root first, so that `tests.reference` resolves to this folder.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_in_ref(args: list[str], *, capture: bool = False) -> subprocess.CompletedProcess:
    """Run `python -m tests.reference ARGS` with the reference interpreter."""
    py = ensure_ref_python()
    cmd = [str(py), "-m", "tests.reference", *args]
    res = subprocess.run(cmd, cwd=str(REPO_ROOT), env=child_env(),
                         stdout=subprocess.PIPE if capture else None,
                         stderr=subprocess.PIPE if capture else None,
                         text=True)
    if res.returncode != 0:
        tail = (res.stderr or "")[-4000:] if capture else ""
        raise RuntimeError(
            f"reference command failed (rc={res.returncode}): {' '.join(cmd)}\n{tail}")
    return res


if __name__ == "__main__":  # pragma: no cover
    print(ref_python(), file=sys.stderr)
