"""What the speaking commands share (app/cli/common.py): their speech is watermarked by default
(`say -o FILE`, `say -o -`, `live -o FILE`), `--no-watermark` turns that off, the files they
write carry the provenance tags (ffprobe), and without the watermark model a command that
speaks stops at once with one line naming the command that makes it.

The random Nano Q4_0 model runs each sentence to --max-tokens: 28 tokens, 1.2 s of audio.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from engine_native.watermark import MAKE_MODEL_COMMAND, MODEL_ENV, default_watermarker
from tests.helpers.models import model_path

FAST = ["--seed", "5", "--max-tokens", "28", "--cfm-steps", "1", "--prompt-seconds", "2"]


@pytest.fixture(scope="module")
def model() -> str:
    return str(model_path("nano", "q4_0"))


def _cli(*args, cwd, env=None, stdin=None):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, cwd=cwd, input=stdin,
                          env={**os.environ, **(env or {})}, timeout=600)


def _comment(path) -> str:
    r = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "json", str(path)],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["format"].get("tags", {}).get("comment", "")


def marked(samples) -> bool:
    return default_watermarker().detect(samples, 24000).marked


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="needs ffprobe")
def test_say_and_live_watermark_by_default_and_tag_their_files(model, tmp_path):
    text = "The secret text of this test."
    r = _cli("say", text, "-m", model, "-o", "out.flac", *FAST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    audio, rate = sf.read(tmp_path / "out.flac", dtype="float32")
    assert rate == 24000 and marked(audio)
    comment = _comment(tmp_path / "out.flac")
    assert f"model: {os.path.basename(model)} (nano, q4_0)" in comment and "voice: " in comment
    assert comment.endswith("watermark: perth") and "secret" not in comment

    pcm = _cli("say", text, "-m", model, "-o", "-", *FAST, cwd=tmp_path)
    assert pcm.returncode == 0, pcm.stderr.decode()
    assert marked(np.frombuffer(pcm.stdout, "<i2").astype(np.float32) / 32767)

    live = _cli("live", "-m", model, "-o", "live.wav", *FAST, cwd=tmp_path, stdin=f"{text}\n".encode())
    assert live.returncode == 0, live.stderr.decode()
    assert marked(sf.read(tmp_path / "live.wav", dtype="float32")[0])
    assert _comment(tmp_path / "live.wav").endswith("watermark: perth")


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="needs ffprobe")
def test_no_watermark(model, tmp_path):
    r = _cli("say", "Hello there, unmarked.", "-m", model, "-o", "out.wav", "--no-watermark", *FAST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert b"not watermarking (--no-watermark)" in r.stderr
    assert not marked(sf.read(tmp_path / "out.wav", dtype="float32")[0])
    assert "watermark" not in _comment(tmp_path / "out.wav")


def test_without_the_watermark_model_one_line(model, tmp_path):
    env = {MODEL_ENV: "", "XDG_DATA_HOME": str(tmp_path / "empty")}
    r = _cli("say", "Hi.", "-m", model, "-o", "x.wav", *FAST, cwd=tmp_path, env=env)
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1 and MAKE_MODEL_COMMAND in err, err
    assert not (tmp_path / "x.wav").exists()
    ok = _cli("say", "Hi.", "-m", model, "-o", "x.wav", "--no-watermark", *FAST, cwd=tmp_path, env=env)
    assert ok.returncode == 0, ok.stderr.decode()
