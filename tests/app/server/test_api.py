"""The local speech server (app/server), driven through the official `openai` package against a
real uvicorn server on 127.0.0.1 (a free port, its own thread), on the random Nano Q4_0 model.

Random weights never draw the stop token, so every sentence runs to `max_tokens`: a sentence
of N speech tokens is exactly (N + 3 silence) x 2 frames x 480 samples long. Requests use a
1 s voice prompt and one CFM step so that each chunk costs little on a small machine.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from engine_native import Engine  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402

KEY = "test-key"
N = 8  # speech tokens per sentence
FAST = {"seed": 7, "max_tokens": N, "prompt_seconds": 1.0, "cfm_steps": 1, "first_chunk_tokens": 4, "chunk_tokens": 4}
TEXT = "Hello there."
RATE = 24000


def samples_for(n_tokens: int, sentences: int = 1) -> int:
    return sentences * (n_tokens + 3) * 2 * 480


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.helpers.speech_server import start_with_narrator

    handle = start_with_narrator(Engine(model_path("nano", "q4_0")), tmp_path_factory.mktemp("voices"), api_key=KEY,
                                 queue=16)
    yield handle
    t0 = time.perf_counter()
    handle.stop()
    assert handle.state == "stopped" and time.perf_counter() - t0 < 15


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=300)


def speak(client, **kw) -> bytes:
    body = {**FAST, **kw.pop("extra", {})}
    kw.setdefault("model", "tts-1")
    kw.setdefault("voice", "default")
    kw.setdefault("input", TEXT)
    return client.audio.speech.create(extra_body=body, **kw).read()


def decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    """Any response format -> (int16 samples, the stream's sample rate) through ffmpeg."""
    src = ["-f", "s16le", "-ar", "24000", "-ac", "1"] if fmt == "pcm" else []
    probe = subprocess.run(["ffprobe", "-v", "error", *src, "-show_entries", "stream=sample_rate", "-of", "json", "-"],
                           input=data, capture_output=True)
    rate = int(json.loads(probe.stdout)["streams"][0]["sample_rate"])
    out = []
    if fmt == "opus":  # Opus always decodes at 48 kHz; the stream's own rate is in its OpusHead header
        head = data.index(b"OpusHead")
        rate = int.from_bytes(data[head + 12:head + 16], "little")
        out = ["-ar", "24000"]
    r = subprocess.run(["ffmpeg", "-v", "error", *src, "-i", "-", *out, "-f", "s16le", "-ac", "1", "-"], input=data,
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    return np.frombuffer(r.stdout, "<i2"), rate


def health(client) -> dict:
    return client.get("/health", cast_to=object)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg")
def test_every_format_decodes_to_24khz_of_the_right_length(client):
    expected = samples_for(N)
    pcm = speak(client, response_format="pcm")
    assert len(pcm) == 2 * expected
    for fmt in ("wav", "flac", "opus", "mp3", "aac"):
        data = speak(client, response_format=fmt)
        x, rate = decode(data, fmt)
        slack = 0 if fmt in ("wav", "flac", "opus") else 2048  # mp3/aac: encoder delay and last-frame padding
        print(f"{fmt}: {len(data)} bytes, {x.size} samples at {rate} Hz (expected {expected})")
        assert rate == RATE
        assert expected <= x.size <= expected + slack, fmt
        if fmt == "wav":
            import io

            import soundfile as sf

            y, sr = sf.read(io.BytesIO(data), dtype="int16")
            assert sr == RATE and np.array_equal(y, np.frombuffer(pcm, "<i2"))  # same seed, same samples
        if fmt == "flac":  # lossless, and soundfile reads it as it came (its header holds the length)
            import io

            import soundfile as sf

            assert np.array_equal(x, np.frombuffer(pcm, "<i2"))
            y, sr = sf.read(io.BytesIO(data), dtype="int16")
            assert sr == RATE and np.array_equal(y, np.frombuffer(pcm, "<i2"))


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg")
def test_speed_is_a_time_stretch(client):
    x = np.frombuffer(speak(client, response_format="pcm", speed=2.0), "<i2")
    assert abs(x.size - samples_for(N) / 2) < 0.05 * samples_for(N)
    with pytest.raises(openai.BadRequestError) as e:
        speak(client, speed=5.0)
    assert e.value.status_code == 400 and "speed" in e.value.message and "0.25" in e.value.message


def test_audio_streams_before_generation_ends(client):
    n = 24  # 6 chunks of 4 tokens
    t0 = time.perf_counter()
    first = None
    got = bytearray()
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="default", input=TEXT, response_format="pcm", extra_body={**FAST, "max_tokens": n}) \
            as response:
        assert response.headers["content-type"].startswith("audio/pcm")
        assert "content-length" not in response.headers  # chunked
        for piece in response.iter_bytes():
            if piece and first is None:
                first = time.perf_counter() - t0
            got += piece
    total = time.perf_counter() - t0
    print(f"time to first byte {first * 1e3:.0f} ms, whole response {total * 1e3:.0f} ms "
          f"({len(got) / 2 / RATE:.2f} s of audio)")
    assert len(got) == 2 * samples_for(n)
    assert first < 0.7 * total


def test_sse_events_carry_the_audio(client):
    n = 16  # a few chunks
    plain = speak(client, response_format="pcm", extra={"max_tokens": n})
    events = []
    with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="default", input=TEXT, response_format="pcm", stream_format="sse",
            extra_body={**FAST, "max_tokens": n}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"} and len(kinds) >= 3
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    print(f"sse: {len(kinds) - 1} deltas, {len(audio)} bytes; usage {events[-1]['usage']}")
    assert len(audio) == len(plain) == 2 * samples_for(n)
    assert audio == plain
    assert events[-1]["usage"]["output_tokens"] == n


def test_library_voices_by_name_and_stem_and_listings(client):
    voices = client.get("/audio/voices", cast_to=object)
    ids = {v["id"] for v in voices["data"]}
    assert ids == {"default", "narrator"}
    assert {v["name"] for v in voices["voices"]} == {"Built-in", "The Narrator"}
    models = [m.id for m in client.models.list()]
    assert "chatterbox-nano" in models and "tts-1" in models
    builtin = speak(client, response_format="pcm")
    assert speak(client, response_format="pcm", voice="narrator") == builtin  # the same tensors
    assert speak(client, response_format="pcm", voice="the narrator") == builtin


def test_errors_have_the_right_status_and_message(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        speak(client, voice="nobody")
    assert e.value.status_code == 404 and "'nobody' not found" in e.value.message and "narrator" in e.value.message
    assert e.value.body["param"] == "voice" and e.value.body["code"] == "voice_not_found"
    for empty in ("", "   \n"):
        with pytest.raises(openai.BadRequestError) as e:
            speak(client, input=empty)
        assert e.value.status_code == 400 and "empty" in e.value.message and e.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as e:  # the engine's own check: nothing speakable
        speak(client, input="... !?")
    assert "nothing to say" in e.value.message and e.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as e:
        speak(client, extra={"temperature": -1})
    assert "temperature" in e.value.message and e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        speak(client, response_format="ogg")
    assert "response_format" in e.value.message
    with pytest.raises(openai.APIStatusError) as e:
        speak(client, input="Hello there. " * 8000)
    assert e.value.status_code == 413 and "100,000" in e.value.message and e.value.body["code"] == "input_too_long"
    for key in ("wrong-key", ""):
        bad = openai.OpenAI(base_url=server.url, api_key=key or "x", max_retries=0,
                            default_headers={} if key else {"Authorization": ""})
        with pytest.raises(openai.AuthenticationError) as e:
            speak(bad)
        assert e.value.status_code == 401 and "API key" in e.value.message
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    assert health(client)["busy"] is False


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="needs ffprobe")
def test_speech_is_watermarked_and_tagged_unless_the_server_says_otherwise(client, server):
    """A response is marked (the detector finds it) and its format's tags say what made it; a
    request cannot turn the mark off, a server run with --no-watermark (its engine's switch) does."""
    import io

    import soundfile as sf

    from engine_native.watermark import default_watermarker

    def comment(data: bytes) -> str:
        r = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment:stream_tags=comment",
                            "-of", "json", "-"], input=data, capture_output=True, check=True)
        info = json.loads(r.stdout)
        tags = {**info.get("format", {}).get("tags", {}), **(info.get("streams") or [{}])[0].get("tags", {})}
        return tags.get("comment", tags.get("COMMENT", ""))

    body = {**FAST, "max_tokens": 28}   # 1.24 s: long enough to read the mark
    raw = client.audio.speech.with_raw_response.create(model="tts-1", voice="narrator", input=TEXT,
                                                       response_format="wav", extra_body=body)
    wav = raw.content
    assert raw.headers["x-chatterbox-watermark"] == "perth"
    assert default_watermarker().detect(sf.read(io.BytesIO(wav), dtype="float32")[0], RATE).marked
    assert comment(wav).endswith("voice: The Narrator; watermark: perth") and "(nano, q4_0)" in comment(wav)
    for fmt in ("flac", "mp3", "opus"):
        assert comment(speak(client, response_format=fmt)).endswith("watermark: perth"), fmt
    with pytest.raises(openai.BadRequestError) as e:
        speak(client, extra={"watermark": False})
    assert e.value.body["param"] == "watermark" and "serve --no-watermark" in e.value.message
    engine = server.service.engine
    engine.watermark = False   # as `serve --no-watermark` loads it
    try:
        raw = client.audio.speech.with_raw_response.create(model="tts-1", voice="default", input=TEXT,
                                                           response_format="wav", extra_body={**body, "watermark": False})
        wav = raw.content
    finally:
        engine.watermark = True
    assert raw.headers["x-chatterbox-watermark"] == "none"
    assert not default_watermarker().detect(sf.read(io.BytesIO(wav), dtype="float32")[0], RATE).marked
    assert "watermark" not in comment(wav)


def test_disconnect_mid_stream_frees_the_engine(client):
    before = health(client)["cancelled"]
    long = {**FAST, "max_tokens": 200}  # ~50 chunks: minutes of work if not cancelled
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="default", input=TEXT, response_format="pcm", extra_body=long) as response:
        it = response.iter_bytes()
        assert next(it)
        t_close = time.perf_counter()
    # Leaving the block closes the connection; the next request must be served at once.
    t0 = time.perf_counter()
    data = speak(client, response_format="pcm")
    after = time.perf_counter()
    assert len(data) == 2 * samples_for(N)
    deadline = time.perf_counter() + 10
    while health(client)["cancelled"] == before and time.perf_counter() < deadline:
        time.sleep(0.05)
    assert health(client)["cancelled"] == before + 1
    print(f"after the disconnect the next request took {after - t0:.2f} s (from the close: {after - t_close:.2f} s)")
    # A whole 200-token sentence would take far longer than a short request plus one chunk.
    lone_t0 = time.perf_counter()
    speak(client, response_format="pcm")
    lone = time.perf_counter() - lone_t0
    print(f"the same request alone: {lone:.2f} s")
    assert after - t_close < 3 * lone + 5


@pytest.fixture(params=[(1, "0", 1), (4, "0", 1), (4, "1", 1), (4, "1", 2)],
                ids=["one-at-a-time", "parallel-4", "parallel-4-batched", "parallel-4-batched-replicas-2"])
def any_client(request, server, client, monkeypatch):
    """The module's server (one generation at a time), and a second one on the same engine that
    advances up to 4 generations in turn (round robin), their T3 steps also taken together
    (CBS_T3_BATCH=1, as on a GPU) or not; or spread over two replicas of the model (the second
    loaded by the server, as `serve --replicas 2` does), two generations each."""
    parallel, batch, replicas = request.param
    if parallel == 1:
        yield client
        return
    from app.server import ServerConfig, ServerHandle

    monkeypatch.setenv("CBS_T3_BATCH", batch)
    handle = ServerHandle(ServerConfig(model=server.config.model, port=0, api_key=KEY,
                                       voices_dir=server.config.voices_dir, parallel=parallel, replicas=replicas),
                          engine=server.engine).start()
    assert handle.wait_ready(60), handle.error
    state = health(openai.OpenAI(base_url=handle.url, api_key=KEY))
    assert state["batched"] == (batch == "1") and state["replicas"] == replicas and state["parallel"] == parallel
    yield openai.OpenAI(base_url=handle.url, api_key=KEY, max_retries=0, timeout=600)
    if replicas > 1:  # every replica served some of the eight clients
        served = [w.served for w in handle.service.worker.workers]
        assert all(n > 0 for n in served), served
    handle.stop()


def test_eight_concurrent_clients_get_complete_identical_audio(any_client):
    client = any_client
    text = "Hello there. How are you?"
    lone = speak(client, response_format="pcm", input=text)
    assert len(lone) == 2 * samples_for(N, sentences=2)
    t0 = time.perf_counter()
    firsts = []

    def one(i):
        c = openai.OpenAI(base_url=client.base_url, api_key=KEY, max_retries=0, timeout=600)
        s = time.perf_counter()
        out = bytearray()
        with c.audio.speech.with_streaming_response.create(model="tts-1", voice="default", input=text,
                                                            response_format="pcm", extra_body=FAST) as r:
            for piece in r.iter_bytes():
                if piece and not out:
                    firsts.append(time.perf_counter() - s)
                out += piece
        return bytes(out)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    wall = time.perf_counter() - t0
    parallel = health(client)["parallel"]
    print(f"8 concurrent clients, parallel {parallel}: {wall:.1f} s wall, first bytes after "
          f"{min(firsts):.2f}-{max(firsts):.2f} s (median {sorted(firsts)[4]:.2f} s)")
    for r in results:
        assert r == lone


def test_a_full_queue_answers_503(server):
    """queue=1 on the real engine: one generation running (a long stream held open) and one
    waiting fill the queue, so a third request is answered 503 with Retry-After at once; when
    the first client leaves, the waiting request is served whole."""
    from app.server import ServerConfig, ServerHandle

    handle = ServerHandle(ServerConfig(model=server.config.model, port=0, api_key=KEY, voices_dir=None, queue=1),
                          engine=server.engine).start()
    assert handle.wait_ready(60), handle.error
    worker = handle.service.worker
    try:
        c = openai.OpenAI(base_url=handle.url, api_key=KEY, max_retries=0, timeout=600)
        long = {**FAST, "max_tokens": 200}  # 40 sentences of up to 50 chunks: minutes of work while held open
        with ThreadPoolExecutor(1) as pool:
            with c.audio.speech.with_streaming_response.create(
                    model="tts-1", voice="default", input=" ".join([TEXT] * 40), response_format="pcm",
                    extra_body=long) as running:
                audio = running.iter_bytes()  # held: dropping the iterator would close the response
                assert next(audio)
                waiting = pool.submit(lambda: speak(c, response_format="pcm"))
                deadline = time.time() + 60
                while (worker.waiting < 1 or worker.active < 1) and time.time() < deadline:
                    time.sleep(0.02)
                assert (worker.active, worker.waiting) == (1, 1)
                with pytest.raises(openai.APIStatusError) as e:
                    speak(c, response_format="pcm")
                assert e.value.status_code == 503 and "busy" in e.value.message
                assert e.value.response.headers.get("retry-after") == "1"
            # leaving the block closed the running request's connection: it is cancelled
            assert len(waiting.result(timeout=300)) == 2 * samples_for(N)
    finally:
        handle.stop()


def test_the_app_runs_the_server_in_process(qtbot, tmp_path, server):
    """The desktop app's "Local API server": started from its dialog on its own threads (the GUI
    keeps ticking), its URL in the status bar and on the clipboard, then stopped."""
    pytest.importorskip("pytestqt")
    import socket

    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from app.qt.main_window import MainWindow
    from app.qt.settings import Settings

    window = MainWindow(Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)),
                        str(tmp_path / "data"))
    qtbot.addWidget(window)
    loaded = []
    window.client.modelChanged.connect(loaded.append)
    window.load_model(str(server.config.model))
    qtbot.waitUntil(lambda: bool(loaded and loaded[-1]), timeout=120_000)
    panel = window.api_server
    assert panel.controller.state == "off" and not panel.button.isVisible()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gaps, last = [], [time.perf_counter()]

    def tick():
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(10)
    dialog = panel.open_dialog()
    dialog.enabled.setChecked(True)
    dialog.port.setValue(port)
    dialog.key.setText("gui-key")
    dialog.apply()
    qtbot.waitUntil(lambda: panel.controller.state in ("running", "failed"), timeout=120_000)
    timer.stop()
    assert panel.controller.state == "running", panel.controller.detail
    url = f"http://127.0.0.1:{port}/v1"
    print(f"the app's server started; longest GUI pause while starting: {max(gaps) * 1e3:.0f} ms")
    # Loading the model alone takes seconds: a pause below 2 s means the GUI never waited for it (what
    # remains is GIL bursts of imports on the server thread and a busy shared machine).
    assert max(gaps) < 2.0
    assert url in panel.button.text() and url in dialog.status.text()
    panel.copy_url()
    assert QApplication.clipboard().text() == url
    c = openai.OpenAI(base_url=url, api_key="gui-key", max_retries=0, timeout=300)
    assert {v["id"] for v in c.get("/audio/voices", cast_to=object)["data"]} == {"default"}  # an empty library
    # Generation runs on the server's threads: the GUI stays live meanwhile.
    result = []
    t = threading.Thread(target=lambda: result.append(speak(c, response_format="pcm")))
    t.start()
    qtbot.waitUntil(lambda: not t.is_alive(), timeout=300_000)
    assert len(result[0]) == 2 * samples_for(N)
    dialog.enabled.setChecked(False)
    dialog.apply()
    qtbot.waitUntil(lambda: panel.controller.state == "off", timeout=30_000)
    with pytest.raises(openai.APIConnectionError):
        c.models.list()
    window.close()


def test_a_server_with_a_decoder_loads_it_in_every_replica_and_speaks_through_it(tmp_path):
    """`serve --decoder` (ServerConfig.decoder): each replica's engine decodes the Multilingual
    model's speech with Nano's S3Gen and HiFT (whole tokens of audio: the Multilingual T3 may stop
    before max_tokens, and Nano's decoder adds its 3 silence tokens)."""
    from app.server import ServerConfig, ServerHandle

    handle = ServerHandle(ServerConfig(model=str(model_path("mtl", size="small")), decoder=str(model_path("nano", "q4_0")),
                                       port=0, api_key=KEY, voices_dir=str(tmp_path), replicas=2)).start()
    try:
        assert handle.wait_ready(120), handle.error
        engines = [w.engine for w in handle.service.worker.workers]
        assert len(engines) == 2 and all(e.info["decoder"] == str(model_path("nano", "q4_0")) for e in engines)
        client = openai.OpenAI(base_url=handle.url, api_key=KEY, max_retries=0, timeout=300)
        pcm = speak(client, response_format="pcm", extra={"language": "fr"}, input="Bonjour.")
        assert len(pcm) % (2 * 2 * 480) == 0 and 2 * samples_for(1) <= len(pcm) <= 2 * samples_for(N)
    finally:
        handle.stop()
