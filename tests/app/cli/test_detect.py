"""`chatterbox-studio detect FILE...` (app/cli/detect.py, through app.core.watermark_check) on
marked and unmarked files and on bad input (not audio, empty, 0.1 s, missing: one clear line
each), and `chatterbox-studio watermark-model` (app/cli/watermark_model.py), which makes the
watermark model where the engine looks for it."""

from __future__ import annotations

import os
import subprocess
import sys

import soundfile as sf

from engine_native.watermark import MODEL_ENV, default_watermarker
from tests.helpers.models import installed_perth
from tests.helpers.speech_samples import real_speech, to_rate

RATE = 24000


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_detect_command(tmp_path):
    wm = default_watermarker()
    x = real_speech(4.0, RATE, fetch=False)
    marked, clean = tmp_path / "marked.flac", tmp_path / "clean.wav"
    sf.write(marked, wm.apply(x, RATE), RATE)
    sf.write(clean, to_rate(x, RATE, 44100), 44100)
    (tmp_path / "notes.txt").write_text("not audio at all")
    (tmp_path / "empty.wav").write_bytes(b"")
    sf.write(tmp_path / "short.wav", x[: int(0.1 * RATE)], RATE)
    files = [marked, clean, tmp_path / "notes.txt", tmp_path / "empty.wav", tmp_path / "short.wav",
             tmp_path / "missing.mp3"]
    r = _cli("detect", *map(str, files))
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(files), r.stdout + r.stderr
    assert lines[0] == f"{marked}: marked (confidence 1.00)"
    assert lines[1] == f"{clean}: not marked (confidence 0.00)"
    for line, path in zip(lines[2:], files[2:]):
        assert line.startswith(f"{path}: ") and "marked" not in line, line
    assert "too short" in lines[4]
    assert r.returncode == 1
    ok = _cli("detect", str(marked), str(clean))
    assert ok.returncode == 0 and len(ok.stdout.strip().splitlines()) == 2
    gone = _cli("detect", str(marked), env={MODEL_ENV: str(tmp_path / "nope.gguf")})
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1 and MODEL_ENV in gone.stderr


def test_watermark_model_makes_it_where_the_engine_looks(tmp_path, monkeypatch):
    from engine_native.paths import data_dir

    source = installed_perth()
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), MODEL_ENV: ""}
    monkeypatch.setenv("XDG_DATA_HOME", env["XDG_DATA_HOME"])
    made = _cli("watermark-model", str(source), env=env)
    assert made.returncode == 0, made.stderr
    assert os.path.isfile(os.path.join(data_dir(), "perth.gguf")) and "wrote" in made.stderr
    again = _cli("watermark-model", str(source), env=env)
    assert again.returncode == 0 and "there already" in again.stderr
    # the engine's search finds it there: detect runs without being told where it is
    sf.write(tmp_path / "x.wav", real_speech(2.0, RATE, fetch=False), RATE)
    found = _cli("detect", str(tmp_path / "x.wav"), env=env)
    assert found.returncode == 0 and found.stdout.endswith("not marked (confidence 0.00)\n"), found.stderr
    bad = _cli("watermark-model", str(tmp_path / "x.wav"), "-o", str(tmp_path / "p.gguf"), env=env)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and not (tmp_path / "p.gguf").exists()
