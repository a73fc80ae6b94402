"""The public engine API on a random-weight model: synthesize, stream, seeds, stream vs
batch, cancellation, text splitting, errors, and the CLI's byte stream.

Nano Q4_0 (the smallest model; S3Gen is full size). Random weights never draw the stop
token in practice, so every sentence runs to `max_tokens`: lengths are exact.
Stream vs synthesize: the concatenated stream equals the batch audio in length and
within rel 0.05 (measured 0.005): the streamed CFM sees only the tokens sampled so far.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import soundfile as sf

from engine_native import EmptyTextError, Engine, EngineError, ModelError, ParameterError, Voice
from engine_native.bench import StageWatch
from tests.helpers.models import model_path

TEXT = "Hello there. This is a test!"
N = 12  # speech tokens per sentence


@pytest.fixture(scope="module")
def model():
    return model_path("nano", "q4_0")


@pytest.fixture(scope="module")
def engine(model):
    return Engine(model)


def samples_for(engine, n_tokens: int) -> int:
    """Audio length of a sentence of n speech tokens: (n + silence) tokens x 2 frames x 480."""
    return (n_tokens + 3) * 2 * 480


def test_info_and_defaults(engine):
    info = engine.info
    assert info["variant"] == "nano" and info["quantization"] == "q4_0" and info["sample_rate"] == 24000
    assert info["hparams"]["n_layer"] == 12 and info["ggml_version"]
    assert engine.defaults["temperature"] == pytest.approx(0.8) and engine.defaults["top_k"] == 1000
    assert engine.builtin_voice.variant == "nano" and engine.builtin_voice.name == "Built-in"


def test_synthesize_is_seeded_and_sentence_by_sentence(engine):
    a = engine.synthesize(TEXT, seed=3, max_tokens=N)
    assert a.dtype == np.float32 and a.ndim == 1
    assert a.size == 2 * samples_for(engine, N)  # two sentences
    assert np.all(np.isfinite(a)) and 0 < np.abs(a).max() <= 1.0
    assert np.array_equal(a, engine.synthesize(TEXT, seed=3, max_tokens=N))
    assert not np.array_equal(a, engine.synthesize(TEXT, seed=4, max_tokens=N))
    # Each sentence has its own seed (seed + index): the second sentence alone, at seed 4,
    # is the second half of the whole.
    second = engine.synthesize("This is a test!", seed=4, max_tokens=N)
    assert np.array_equal(second, a[a.size // 2:])


def test_stream_chunks_agree_with_synthesize(engine):
    batch = engine.synthesize(TEXT, seed=5, max_tokens=N)
    chunks = list(engine.stream(TEXT, seed=5, max_tokens=N, first_chunk_tokens=4, chunk_tokens=5))
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert [c.is_last for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert {c.sentence_index for c in chunks} == {0, 1} and all(c.n_sentences == 2 for c in chunks)
    assert chunks[0].text == "Hello there." and chunks[0].span == (0, 12)
    assert chunks[-1].text == "This is a test!" and TEXT[slice(*chunks[-1].span)] == "This is a test!"
    assert len(chunks) >= 4  # several chunks per sentence
    streamed = np.concatenate([c.samples for c in chunks])
    assert streamed.size == batch.size
    rel = np.linalg.norm(streamed - batch) / np.linalg.norm(batch)
    print(f"stream vs synthesize: {len(chunks)} chunks, rel {rel:.4f}, max_abs {np.abs(streamed - batch).max():.4f}")
    assert rel < 0.05
    again = np.concatenate([c.samples for c in engine.stream(TEXT, seed=5, max_tokens=N, first_chunk_tokens=4,
                                                             chunk_tokens=5)])
    assert np.array_equal(streamed, again)
    for c in chunks:
        assert {"t3_ms", "s3gen_ms", "hift_ms", "seed"} <= set(c.timings)


def test_stages_time_themselves_and_tell_the_profile_hooks(engine):
    """Every chunk carries its stages' timings (Chunk.stages; Chunk.timings as a dict), and
    Engine.profile's hook hears each stage start and end, in order, with its outcome."""
    events = []
    with engine.profile(events.append):
        chunks = list(engine.stream("Hello there.", seed=5, max_tokens=N, first_chunk_tokens=4, chunk_tokens=5))
    engine.synthesize("Hi.", seed=0, max_tokens=4)  # outside: not heard
    first = chunks[0].stages
    assert first.seed == 5 and first.attempts == 1 and first.t3_tokens == first.speech_tokens >= 4
    assert first.t3_prompt_ms > 0 and first.t3_steps_ms > 0 and first.hift_ms > 0
    assert 0 < first.encoder_ms + first.cfm_ms <= first.s3gen_ms
    assert sum(c.stages.t3_tokens for c in chunks) == N and chunks[-1].stages.speech_tokens == N
    assert chunks[0].timings["t3_ms"] == pytest.approx(first.t3_prompt_ms + first.t3_steps_ms)
    assert chunks[0].timings["audio_s"] == chunks[0].samples.size / engine.sample_rate
    open_stages = []
    for e in events:  # every end closes the innermost stage open
        if e.phase == "start":
            open_stages.append(e.stage)
        else:
            assert open_stages.pop() == e.stage and e.outcome == "finished" and e.ms >= 0
    assert open_stages == []
    names = [e.stage for e in events if e.phase == "start"]
    assert names[:2] == ["t3_prompt", "t3_steps"] and names.count("t3_prompt") == 1
    assert {"s3gen", "encoder", "cfm", "hift"} <= set(names)
    assert names.count("hift") == len(chunks)
    assert sum(e.ms for e in events if e.phase == "end" and e.stage == "hift") == pytest.approx(
        sum(c.stages.hift_ms for c in chunks))


def test_cancel_from_another_thread_stops_within_one_chunk(engine):
    text = "One two three. Four five six. Seven eight nine. Ten eleven twelve."
    it = engine.stream(text, seed=1, max_tokens=40, first_chunk_tokens=4, chunk_tokens=4)
    got, cancelled_at = [], []

    def consume():
        for c in it:
            got.append(c)
            if len(got) == 1:
                # Cancel from another thread while this one computes the next chunk.
                threading.Thread(target=lambda: (time.sleep(0.05), cancelled_at.append(len(got)), it.cancel())).start()

    t = threading.Thread(target=consume)
    t.start()
    t.join(timeout=600)
    assert not t.is_alive()
    assert cancelled_at and len(got) <= cancelled_at[0] + 1  # at most the chunk in flight
    assert not got[-1].is_last
    # The engine is free again at once.
    assert engine.synthesize("Hi.", seed=0, max_tokens=4).size == samples_for(engine, 4)


@pytest.mark.parametrize("stage", ["s3gen", "hift"])
def test_cancel_during_a_long_graph_computation_frees_the_engine_at_once(engine, stage):
    """Stop reaches the computation in flight (ggml's abort callback between graph nodes):
    cancelling 50 ms into a long S3Gen pass (or the HiFT pass after it: 0.2 s on a fast host)
    ends the stream without that chunk, and the engine is free within a bound far below the
    pass's length. The bound is generous (a loaded machine); the measured latency is printed."""
    watch = StageWatch({stage})  # the S3Gen pass (encoder and CFM), or HiFT's
    with engine.profile(watch):
        # One 200-token first chunk: one long S3Gen pass (prompt + 200 tokens) and HiFT on 8 s of audio.
        it = engine.stream("A long sentence to cancel.", seed=1, max_tokens=200, first_chunk_tokens=200)
        got, freed = [], []

        def consume():
            got.extend(it)

        t = threading.Thread(target=consume)
        t.start()
        assert watch.started.wait(600)
        time.sleep(0.05)
        t0 = time.perf_counter()
        it.cancel()
        with engine.stages.exclusive():  # the engine is free: the next caller gets in
            freed.append(time.perf_counter() - t0)
        t.join(timeout=60)
        assert not t.is_alive()
    interrupted = [outcome == "cancelled" for outcome in watch.outcome]
    print(f"cancel during {stage}: engine free after {freed[0] * 1e3:.0f} ms")
    assert interrupted == [True]       # the pass was cut short, not waited for
    assert got == []                   # no chunk of the cancelled sentence
    assert freed[0] < 2.0
    assert engine.synthesize("Hi.", seed=0, max_tokens=4).size == samples_for(engine, 4)


def test_another_generation_leaves_an_unfinished_stream_whole(engine):
    """Each generation has its own T3 session: a synthesis started while a stream is half
    read neither ends nor changes it (the stream used to be cut off here)."""
    opts = dict(seed=2, max_tokens=N, first_chunk_tokens=4, chunk_tokens=4)
    whole = np.concatenate([c.samples for c in engine.stream(TEXT, **opts)])
    it = engine.stream(TEXT, **opts)
    first = next(it)
    assert engine.synthesize("Hi.", seed=0, max_tokens=4).size == samples_for(engine, 4)
    rest = list(it)
    assert rest and rest[-1].is_last
    assert np.array_equal(np.concatenate([first.samples] + [c.samples for c in rest]), whole)


def test_freeing_a_model_lets_other_python_threads_run(model):
    """Dropping an Engine frees its buffers (50-170 ms on this machine class) with the GIL
    released: the app's engine thread drops the old model when another one loads, and the GUI
    thread's Python must keep running meanwhile (the GUI soak saw 180 ms freezes there)."""
    eng = Engine(model)
    eng.synthesize(TEXT, seed=0, max_tokens=N)  # graphs and caches allocated, as in the app
    ticks: list[float] = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            time.sleep(0.002)
            ticks.append(time.perf_counter())

    th = threading.Thread(target=ticker)
    th.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    del eng
    t1 = time.perf_counter()
    stop.set()
    th.join()
    during = sum(t0 < t < t1 for t in ticks)
    # The free itself must be long enough to tell: with the GIL held nothing ticks inside it.
    assert t1 - t0 < 0.02 or during >= 2, f"the free took {(t1 - t0) * 1000:.0f} ms and no thread ran ({during} ticks)"


def test_errors_name_their_cause(engine, model, tmp_path):
    with pytest.raises(ModelError, match="not found"):
        Engine(tmp_path / "missing.gguf")
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(open(model, "rb").read(4096))
    with pytest.raises(ModelError, match="corrupt.gguf"):
        Engine(bad)
    voice_file = engine.builtin_voice.save(tmp_path / "v.voice.gguf", name="V")
    with pytest.raises(ModelError, match="v.voice.gguf"):  # a voice is not a model
        Engine(voice_file)
    assert Voice.load(voice_file).name == "V"
    for text in ("", "   ", "... !!"):
        with pytest.raises(EmptyTextError, match="nothing to say"):
            engine.synthesize(text)
    for opts, what in (({"temperature": 0}, "temperature"), ({"top_p": 1.5}, "top_p"), ({"top_k": 0}, "top_k"),
                       ({"max_tokens": 0}, "max_tokens"), ({"cfm_steps": 0}, "cfm_steps"),
                       ({"repetition_penalty": -1}, "repetition_penalty"), ({"min_p": 2}, "min_p"),
                       ({"seed": -1}, "seed"), ({"temperature": float("nan")}, "temperature"),
                       ({"bogus": 1}, "bogus")):
        with pytest.raises(ParameterError, match=what):
            engine.synthesize("Hello.", **opts)
    with pytest.raises(ParameterError, match="chunk_tokens"):
        engine.stream("Hello.", chunk_tokens=0)
    assert issubclass(ParameterError, EngineError)


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, timeout=900, **kw)


def test_cli_say_stdout_pcm_equals_the_wav_file(model, tmp_path):
    common = ["say", "Hello there. This is a test!", "-m", str(model), "--seed", "7", "--max-tokens", "8"]
    out = tmp_path / "out.wav"
    r = _cli(*common, "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    r2 = _cli(*common, "-o", "-", cwd=tmp_path)
    assert r2.returncode == 0, r2.stderr.decode()
    wav, rate = sf.read(out, dtype="int16")
    assert rate == 24000 and wav.size == 2 * (8 + 3) * 960
    pcm = np.frombuffer(r2.stdout, "<i2")
    # the same audio: the raw PCM scales by 32767, libsndfile's WAV by 32768 (app.core.take.to_s16le)
    assert pcm.shape == wav.shape and np.abs(pcm.astype(np.int32) - wav).max() <= 2
    assert b"seed 7" in r2.stderr


def test_cli_say_reports_bad_input_without_a_traceback(model, tmp_path):
    cases = [(["say", "Hi.", "-m", str(tmp_path / "nope.gguf"), "-o", "x.wav"], "not found"),
             (["say", "...", "-m", str(model), "-o", "x.wav"], "nothing to say"),
             (["say", "Hi.", "-m", str(model), "-o", "x.wav", "--temperature", "-1"], "temperature"),
             (["say", "Hi.", "-m", str(model), "-o", "x.xyz", "--max-tokens", "2"], ".xyz"),
             (["say", "Hi.", "-m", str(model), "--voice", str(tmp_path / "none.voice.gguf")], "not found")]
    for args, message in cases:
        r = _cli(*args, cwd=tmp_path)
        assert r.returncode == 1, (args, r.stderr.decode())
        err = r.stderr.decode()
        assert message in err and "Traceback" not in err, (args, err)
    assert not os.path.exists(tmp_path / "x.wav") and not os.path.exists(tmp_path / "x.xyz")


def test_cli_live_speaks_each_piped_sentence_once_in_order(model, tmp_path):
    """`live` reading a pipe: every complete sentence is spoken once, in order, and the
    last unterminated line at end of input too (3 utterances x 4 speech tokens)."""
    text = "First one. Second one!\nand the last"
    r = _cli("live", "-m", str(model), "-o", "live.wav", "--seed", "1", "--max-tokens", "4", cwd=tmp_path,
             input=text.encode())
    assert r.returncode == 0, r.stderr.decode()
    err = r.stderr.decode()
    spoken = [line.split("'")[1] for line in err.splitlines() if line.startswith("spoke")]
    assert spoken == ["First one.", "Second one!", "and the last"]
    wav, rate = sf.read(tmp_path / "live.wav", dtype="float32")
    assert wav.size == 3 * (4 + 3) * 960
