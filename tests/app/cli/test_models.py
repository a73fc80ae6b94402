"""`chatterbox-studio models list|get|rm` as a user runs it (a real process, its own data folder),
against the Hugging Face Hub stand-in (tests/helpers/hub_server.py) serving the random Nano under
its published name: Ctrl-C pauses a download and says how to resume it; `list` shows what is
installed (variant, precision, size, languages, source), paused and available; `rm` deletes a
model and discards a paused download. The whole get (download and conversion) is
tests/app/core/test_model_manager.py's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.model_manager import ModelManager
from tests.helpers.hub_server import HubServer
from tests.reference.cache import snapshot_dir

NANO = "ResembleAI/chatterbox-nano"


def cli():
    exe = shutil.which("chatterbox-studio", path=str(Path(sys.executable).parent))
    assert exe
    return exe


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "HF_HOME": str(tmp_path / "hf"),
            "HF_HUB_OFFLINE": "0"}


def models_dir(tmp_path) -> Path:
    return tmp_path / "data" / "chatterbox-studio" / "models"


def test_get_pauses_on_ctrl_c_then_list_shows_it_and_rm_discards_it(tmp_path, env):
    with HubServer({NANO: snapshot_dir("nano")}) as hub:
        hub.hold["t3_nano_v1.safetensors"] = 30 << 20
        p = subprocess.Popen([cli(), "models", "get", "nano"], env={**env, "HF_ENDPOINT": hub.url},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        partial = models_dir(tmp_path) / ".downloads" / "ResembleAI--chatterbox-nano" / "t3_nano_v1.safetensors.part"
        deadline = time.monotonic() + 120
        while not (partial.exists() and partial.stat().st_size >= 30 << 20) and time.monotonic() < deadline:
            assert p.poll() is None, p.communicate()
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = p.communicate(timeout=60)
    print("\n" + err.strip().splitlines()[-1])
    assert p.returncode == 130, err
    assert "paused: " in err and "kept; the same command resumes" in err and "Traceback" not in err
    listing = subprocess.run([cli(), "models", "list"], env=env, capture_output=True, text=True, check=True).stdout
    print(listing)
    assert "Paused downloads" in listing and "nano   Chatterbox Nano" in listing and NANO in listing
    assert "(none: `chatterbox-studio models get turbo` downloads one)" in listing
    for key in ("turbo", "mtl", "nano"):
        assert f"  {key} " in listing
    res = subprocess.run([cli(), "models", "rm", "--paused", "nano"], env=env, capture_output=True, text=True)
    assert res.returncode == 0 and "discarded the paused download of Chatterbox Nano" in res.stderr
    assert "Paused" not in subprocess.run([cli(), "models", "list"], env=env, capture_output=True, text=True).stdout


def test_list_describes_an_installed_model_and_rm_deletes_it(tmp_path, env):
    from tests.helpers.models import model_path

    folder = models_dir(tmp_path)
    folder.mkdir(parents=True)
    placed = folder / "chatterbox-nano-q4_0.gguf"
    src = model_path("nano", "q4_0")
    os.link(src, placed) if os.stat(src).st_dev == os.stat(folder).st_dev else shutil.copy(src, placed)
    listing = subprocess.run([cli(), "models", "list"], env=env, capture_output=True, text=True, check=True).stdout
    print("\n" + listing)
    row = next(line for line in listing.splitlines() if "chatterbox-nano-q4_0.gguf" in line)
    assert "Chatterbox Nano" in row and "q4_0" in row and "978.1 MB" in row and " en " in row
    assert "placed here by hand" in row
    ModelManager(str(folder)).record(str(placed), {"repo": NANO, "revision": "feedc0ffee1234"})
    listing = subprocess.run([cli(), "models", "list"], env=env, capture_output=True, text=True, check=True).stdout
    assert f"{NANO} @ feedc0ffee" in listing and "nano   Chatterbox Nano          English       " \
        f"{NANO}  installed" in listing
    res = subprocess.run([cli(), "models", "rm", "nosuch"], env=env, capture_output=True, text=True)
    assert res.returncode == 1 and "no installed model 'nosuch' (installed: chatterbox-nano-q4_0.gguf)" in res.stderr
    res = subprocess.run([cli(), "models", "rm", "nano"], env=env, capture_output=True, text=True)
    assert res.returncode == 0 and not placed.exists() and ModelManager(str(folder)).installed() == []
