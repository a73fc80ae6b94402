"""The server's encoders (app/server/encode.py) without a server: what soundfile.read, the usual
way a Python client reads a response, makes of each format as the server sends it."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import threading

import numpy as np
import pytest
import soundfile as sf

from app.core.provenance import Provenance
from app.core.take import to_s16le
from app.server.encode import SAMPLE_RATE, make_encoder


def encode(fmt: str, chunks, speed: float = 1.0, provenance=None) -> list[bytes]:
    """The pieces an encoder emits for `chunks` (as the engine's worker feeds it)."""
    out, done, errors = [], threading.Event(), []

    def emit(item) -> None:
        if item is None:
            done.set()
        elif isinstance(item, Exception):
            errors.append(item)
            done.set()
        else:
            out.append(item)

    enc = make_encoder(fmt, emit, speed, provenance)
    for c in chunks:
        enc.write(c)
    enc.end()
    assert done.wait(30) and not errors, errors
    return out


@pytest.fixture
def speech():
    t = np.arange(int(2.5 * SAMPLE_RATE)) / SAMPLE_RATE
    x = (0.4 * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 2 * t)).astype(np.float32)
    return x, [x[i:i + 4800] for i in range(0, x.size, 4800)]


def test_flac_reads_back_with_soundfile_bit_exact(speech):
    x, chunks = speech
    pieces = encode("flac", chunks)
    assert len(pieces) == 1  # whole: its header holds the length
    y, rate = sf.read(io.BytesIO(pieces[0]), dtype="int16")
    assert rate == SAMPLE_RATE and np.array_equal(y, np.frombuffer(to_s16le(x), "<i2"))


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg")
def test_flac_at_another_speed_reads_back_with_soundfile(speech):
    x, chunks = speech
    (data,) = encode("flac", chunks, speed=2.0)
    y, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == SAMPLE_RATE and abs(y.size - x.size / 2) < 0.02 * x.size


def test_a_streamed_wav_reads_back_with_soundfile(speech):
    x, chunks = speech
    pieces = encode("wav", chunks)
    assert len(pieces) == len(chunks)  # streamed chunk by chunk
    y, rate = sf.read(io.BytesIO(b"".join(pieces)), dtype="int16")
    assert rate == SAMPLE_RATE and np.array_equal(y, np.frombuffer(to_s16le(x), "<i2"))


@pytest.mark.skipif(shutil.which("ffprobe") is None or shutil.which("ffmpeg") is None, reason="needs ffmpeg")
@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_the_whole_flac_carries_its_provenance_for_ffprobe(speech, speed):
    tags = Provenance("chatterbox-nano-q4_0.gguf", "nano", "q4_0", ("Me",), watermarked=True)
    (data,) = encode("flac", speech[1], speed, tags)
    r = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "json", "-"],
                       input=data, capture_output=True, check=True)
    assert json.loads(r.stdout)["format"]["tags"]["comment"] == tags.comment
    assert tags.comment.endswith("voice: Me; watermark: perth")
    y, rate = sf.read(io.BytesIO(data), dtype="int16")   # still whole: soundfile knows its length
    assert rate == SAMPLE_RATE and abs(y.size - speech[0].size / speed) < 0.02 * speech[0].size
