"""`chatterbox-studio revoice` (app/cli/revoice.py), run as a user runs it: the console script,
a real recording (codec2's hts1a, a man, 8 kHz), the small Nano model (Q4_0)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import real_speech


def _cli():
    exe = shutil.which("chatterbox-studio", path=str(Path(sys.executable).parent))
    assert exe, "the chatterbox-studio console script is not installed beside this python"
    return exe


def _run(*args, **kw):
    return subprocess.run([_cli(), "revoice", *args], capture_output=True, **kw)


@pytest.fixture(scope="module")
def nano_q4():
    from tests.helpers.models import model_path

    return str(model_path("nano", "q4_0"))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The first 1.6 s of hts1a as FLAC (a format and rate of its own)."""
    try:
        x, sr = real_speech.read(real_speech.codec2("wav/hts1a.wav"))
    except real_speech.FetchError as e:
        pytest.skip(str(e))
    path = tmp_path_factory.mktemp("revoice-cli") / "hts1a.flac"
    sf.write(path, x[: int(1.6 * sr)], sr)
    return str(path)


def test_revoice_writes_each_format_and_streams_the_same_pcm(nano_q4, source, tmp_path):
    wav = tmp_path / "out.wav"
    res = _run(source, "-m", nano_q4, "-o", str(wav), "--seed", "5", text=True)
    print("\n" + res.stderr)
    assert res.returncode == 0, res.stderr
    assert "revoiced  1.60 s of audio" in res.stderr and "1.6/1.6 s of the source  100.0%  done" in res.stderr
    y, rate = sf.read(wav, dtype="int16")
    assert rate == 24000 and abs(y.size / rate - 1.6) < 0.05 and np.abs(y).max() > 300
    pcm = _run(source, "-m", nano_q4, "-o", "-", "--seed", "5")  # raw s16le, the same samples
    assert pcm.returncode == 0 and np.array_equal(np.frombuffer(pcm.stdout, np.int16), y)
    for ext in ("flac", "ogg", "mp3"):
        out = tmp_path / f"out.{ext}"
        res = _run(source, "-m", nano_q4, "-o", str(out), "--seed", "5", "--cfm-steps", "1", text=True)
        assert res.returncode == 0, res.stderr
        z, zr = sf.read(out) if ext != "mp3" else real_speech.read(out)
        assert zr == 24000 and abs(z.shape[0] / zr - 1.6) < 0.1


def test_revoice_with_a_voice_cloned_from_ref(nano_q4, source, tmp_path):
    try:
        ref = real_speech.codec2("raw/speech_orig_16k.wav")
    except real_speech.FetchError as e:
        pytest.skip(str(e))
    res = _run(source, "-m", nano_q4, "--ref", str(ref), "-o", str(tmp_path / "o.wav"), text=True)
    assert res.returncode == 0 and "voice     cloned from" in res.stderr, res.stderr


def _one_error_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and lines[-1].startswith("chatterbox-studio: error: "), res.stderr
    return lines[-1]


def test_bad_input_gets_one_clear_line(nano_q4, source, tmp_path):
    out = str(tmp_path / "o.wav")
    line = _one_error_line(_run(str(tmp_path / "missing.wav"), "-m", nano_q4, "-o", out, text=True))
    assert "missing.wav: no such file" in line
    notes = tmp_path / "notes.wav"
    notes.write_text("#EXTM3U\nfile:///etc/passwd\n")
    assert "cannot re-voice" in _one_error_line(_run(str(notes), "-m", nano_q4, "-o", out, text=True))
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(48000, np.float32), 16000)
    assert "no speech in the source" in _one_error_line(_run(str(silent), "-m", nano_q4, "-o", out, text=True))
    short = tmp_path / "short.wav"
    sf.write(short, sf.read(source)[0][:1600], 8000)
    assert "too short to tokenize" in _one_error_line(_run(str(short), "-m", nano_q4, "-o", out, text=True))
    line = _one_error_line(_run(source, "-m", nano_q4, "--voice", str(tmp_path / "nobody.voice.gguf"), "-o", out,
                                text=True))
    assert "nobody.voice.gguf" in line
    line = _one_error_line(_run(source, "-m", nano_q4, "--voice", source, "-o", out, text=True))
    assert f"use --ref {source}" in line
    assert "cannot export to .txt" in _one_error_line(_run(source, "-m", nano_q4, "-o", str(tmp_path / "o.txt"),
                                                           text=True))
    assert not os.path.exists(out)


def test_ctrl_c_keeps_what_is_done(nano_q4, tmp_path):
    """pyannote's 30 s conversation; SIGINT after the first progress line (10 s converted)."""
    try:
        wav, _ = real_speech.pyannote_sample()
    except real_speech.FetchError as e:
        pytest.skip(str(e))
    out = tmp_path / "part.wav"
    p = subprocess.Popen([_cli(), "revoice", str(wav), "-m", nano_q4, "-o", str(out), "--progress", "lines",
                          "--cfm-steps", "1"], stderr=subprocess.PIPE, text=True)
    seen = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        seen.append(line)
        if line.startswith("progress") or not line:
            break
    p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=300)[1]
    log = "".join(seen) + rest
    print("\n" + log)
    assert p.returncode == 130, log
    assert "stopped   after" in log and f"keeping what is done in {out}" in log
    y, rate = sf.read(out)
    assert 10 <= y.size / rate < 30
