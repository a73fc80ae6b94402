"""The CMake logic that obtains ggml: pinned sdist, sha256, no second download, offline override.

These run CMake's configure step only (seconds), in a scratch build dir.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BOGUS_URL = "file:///nonexistent/ggml.tar.gz"


def _configure(build: Path, *defs: str) -> subprocess.CompletedProcess:
    import pybind11

    cmd = [
        "cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DPython_EXECUTABLE={sys.executable}",
        *defs,
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def first_build(tmp_path_factory):
    build = tmp_path_factory.mktemp("ggml-cfg")
    out = _configure(build)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ggml: downloading pinned source" in out.stdout
    return build


def test_kept_build_dir_does_not_download_again(first_build):
    # An unreachable URL proves the kept, hash-verified archive is reused.
    out = _configure(first_build, f"-DGGML_SDIST_URL={BOGUS_URL}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "downloading" not in out.stdout


def test_ggml_source_dir_skips_the_download(first_build, tmp_path):
    tree = first_build / "_ggml" / "sdist" / "libggml_python-0.20.2.post1"
    out = _configure(tmp_path / "b", f"-DGGML_SOURCE_DIR={tree}", f"-DGGML_SDIST_URL={BOGUS_URL}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ggml: using local source" in out.stdout


def test_wrong_hash_is_refused(tmp_path, first_build):
    # A file that is not the pinned sdist must not be accepted, even when offered locally.
    fake = tmp_path / "fake.tar.gz"
    fake.write_bytes(b"not ggml")
    out = _configure(tmp_path / "b", f"-DGGML_SDIST_URL=file://{fake}")
    assert out.returncode != 0
    assert "ggml: download failed" in (out.stdout + out.stderr) or "HASH" in (out.stdout + out.stderr).upper()


def test_bad_ggml_source_dir_is_a_clear_error(tmp_path):
    out = _configure(tmp_path / "b", f"-DGGML_SOURCE_DIR={tmp_path}")
    assert out.returncode != 0
    assert "holds no ggml tree" in out.stdout + out.stderr
