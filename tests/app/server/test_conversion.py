"""POST /v1/audio/voice-conversion (app/server/conversion.py) through `requests` against a real
uvicorn server on 127.0.0.1 with the random Nano Q4_0 model, the upload a real recording
(codec2's hts1a, a man, 8 kHz)."""

from __future__ import annotations

import io
import subprocess
import time

import numpy as np
import pytest
import soundfile as sf

requests = pytest.importorskip("requests")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("python_multipart")

from engine_native import Engine  # noqa: E402
from tests.helpers import real_speech  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402

KEY = "test-key"
FAST = {"seed": "7", "cfm_steps": "1", "prompt_seconds": "1.0"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.helpers.speech_server import start_with_narrator

    handle = start_with_narrator(Engine(model_path("nano", "q4_0")), tmp_path_factory.mktemp("voices"), api_key=KEY,
                                 max_upload_bytes=256 << 10, max_source_seconds=20)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """hts1a's first 2 s as an MP3 file's bytes (what a user uploads)."""
    try:
        x, sr = real_speech.read(real_speech.codec2("wav/hts1a.wav"))
    except real_speech.FetchError as e:
        pytest.skip(str(e))
    folder = tmp_path_factory.mktemp("upload")
    sf.write(folder / "a.wav", x[: 2 * sr], sr)
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(folder / "a.wav"), str(folder / "a.mp3")],
                   check=True)
    return (folder / "a.mp3").read_bytes()


def post(server, files=None, stream=False, key=KEY, **fields):
    return requests.post(f"{server.url}/audio/voice-conversion", headers={"Authorization": f"Bearer {key}"},
                         data={**FAST, **fields}, files=files, stream=stream, timeout=300)


def test_a_recording_comes_back_in_the_voice_streamed_as_wav_and_pcm(server, recording):
    r = post(server, files={"file": ("take.mp3", recording, "audio/mpeg")}, voice="narrator", response_format="wav")
    assert r.status_code == 200, r.text
    assert r.headers["X-Chatterbox-Voice"] == "narrator" and r.headers["X-Chatterbox-Seed"] == "7"
    y, rate = sf.read(io.BytesIO(r.content), dtype="int16")
    assert rate == 24000 and abs(y.size / rate - 2.0) < 0.1 and np.abs(y).max() > 300
    t0 = time.perf_counter()
    with post(server, files={"file": ("take.mp3", recording)}, voice="narrator", response_format="pcm",
              stream=True) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("audio/pcm")
        pieces = [(time.perf_counter() - t0, len(b)) for b in r.iter_content(chunk_size=None) if b]
    pcm = sum(n for _, n in pieces)
    assert len(pieces) >= 2 and pcm == 2 * y.size  # the same length, in pieces as converted


def test_bad_requests_get_clear_errors(server, recording):
    def error(r, status, *words):
        assert r.status_code == status, r.text
        message = r.json()["error"]["message"]
        assert all(w in message for w in words), message
        return r.json()["error"]

    mp3 = {"file": ("take.mp3", recording)}
    error(post(server, voice="narrator"), 400, "'file' is required")
    error(post(server, files=mp3), 400, "'voice' is required")
    assert error(post(server, files=mp3, voice="nobody"), 404, "nobody", "not found")["code"] == "voice_not_found"
    error(post(server, files=mp3, voice="narrator", response_format="midi"), 400, "response_format")
    error(post(server, files=mp3, voice="narrator", cfm_steps="lots"), 400, "cfm_steps must be an integer")
    error(post(server, files=mp3, voice="narrator", cfm_steps="0"), 400, "cfm_steps")
    error(post(server, files={"file": ("list.wav", b"#EXTM3U\nfile:///etc/passwd\n")}, voice="narrator"), 400,
          "cannot be re-voiced")
    silent = io.BytesIO()
    sf.write(silent, np.zeros(32000, np.float32), 16000, format="WAV")
    error(post(server, files={"file": ("s.wav", silent.getvalue())}, voice="narrator"), 400, "no speech in the source")
    short = io.BytesIO()
    sf.write(short, np.random.default_rng(0).normal(0, 0.3, 3200).astype(np.float32), 16000, format="WAV")
    error(post(server, files={"file": ("s.wav", short.getvalue())}, voice="narrator"), 400, "too short to tokenize")
    long = io.BytesIO()
    sf.write(long, np.zeros(16000 * 25, np.float32), 16000, format="FLAC")  # small, but 25 s long
    error(post(server, files={"file": ("l.flac", long.getvalue())}, voice="narrator"), 413, "limit of 20 s")
    error(post(server, files={"file": ("big.wav", b"\0" * (300 << 10))}, voice="narrator"), 413, "larger than 262,144")
    assert post(server, files=mp3, voice="narrator", key="wrong").status_code == 401
