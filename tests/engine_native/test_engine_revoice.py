"""Engine.revoice (engine_native/pipeline/revoice.py) against the reference's `ChatterboxVC.generate`,
on real human recordings (tests/helpers/real_speech.py), and its refusals.

Parity, stage by stage, the noise fixed on both sides (the reference's stage `vc_generate`
takes our CFM noise, `s3gen_flow.initial_noise`, and our HiFT excitation):
- the source's speech tokens: identical (`Engine.revoice_tokens` vs the reference's tokenizer
  after its librosa.load), except a token whose FSQ input sits on a rounding boundary within
  TIE on the reference's side (one of 100 tokens of june-fr: -0.50000024 there, -0.5 here);
  S3Gen then continues from our tokens on both sides (`force_tokens`);
- the mel HiFT gets: rel <= 2e-5 (the S3Gen parity tests' tolerance);
- the waveform `Engine.revoice` returns vs `generate`'s (before its watermark): rel <= 1e-4,
  HiFT's decode tolerance (tests/engine_native/src/hift/test_hift.py).
Turbo's meanflow S3Gen (full size) and the Multilingual S3Gen (standard CFM with guidance,
size small). In CI one short clip per model; the full set (6 real recordings, 3 to 8 s, at 8, 16
and 44.1 kHz, WAV, G.722, MP3 stereo; two target voices: the built-in one and a clone of
codec2's 16 kHz reading):

    CBS_REVOICE_FULL=1 QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest -q -s \
        tests/engine_native/test_engine_revoice.py -k parity
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_native import Engine, NoSpeechError, ParameterError, SourceError, SourceTooShortError, VoiceError
from engine_native.pipeline import revoice
from engine_native.watermark import default_watermarker
from tests.helpers import real_speech, revoice_parity
from tests.helpers.models import model_path
from tests.helpers.parity import rel
from tests.reference.cache import snapshot_dir


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return revoice_parity.sources(tmp_path_factory)


@pytest.fixture(scope="module")
def turbo():
    return Engine(model_path("turbo"), threads=2, watermark=False)  # compared with generate() before its mark


def test_parity_turbo_meanflow_with_chatterbox_vc(turbo, sources):
    snap = snapshot_dir("turbo")
    for vname, voice in revoice_parity.voices(turbo).items():
        for sname, (x, sr) in sources.items():
            revoice_parity.check_parity(turbo, "turbo", snap, x, sr, voice, f"turbo {sname} -> {vname}")


def test_parity_multilingual_guided_cfm_with_chatterbox_vc(sources):
    engine = Engine(model_path("mtl", size="small"), threads=2, watermark=False)
    snap = snapshot_dir("mtl", size="small")
    for vname, voice in revoice_parity.voices(engine).items():
        for sname, (x, sr) in sources.items():
            revoice_parity.check_parity(engine, "mtl", snap, x, sr, voice, f"mtl-small {sname} -> {vname}")


# ------------------------------------------------------------------ the API, streams, long sources

@pytest.fixture(scope="module")
def nano():
    return Engine(model_path("nano"), threads=2)


def test_stream_gives_the_sources_length_in_chunks_with_the_first_small(nano, sources):
    x, sr = sources["hts1a-8k-wav-3s"]
    whole = nano.revoice(x, sr, seed=3)
    chunks = list(nano.revoice_stream(x, sr, seed=3, first_chunk_tokens=10, chunk_tokens=25))
    assert len(chunks) >= 3 and chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
    assert [c.index for c in chunks] == list(range(len(chunks)))
    streamed = np.concatenate([c.samples for c in chunks])
    assert streamed.size == whole.size and abs(whole.size / nano.sample_rate - x.size / sr) < 0.05  # its timing
    assert chunks[0].samples.size <= 10 / nano.token_rate * nano.sample_rate  # first_chunk_tokens' worth
    assert np.isfinite(streamed).all() and np.sqrt(np.mean(streamed ** 2)) > 1e-3
    # a stream's windows differ from the whole pass only a little (the CFM's view of later tokens)
    assert rel(streamed, whole) < 1.0


def test_revoiced_audio_is_watermarked_as_chatterbox_vc_marks_its_output(nano, sources):
    x, sr = sources["hts1a-8k-wav-3s"]
    marked = nano.revoice(x, sr, seed=3)
    assert nano.watermark and default_watermarker().detect(marked, nano.sample_rate).marked
    assert all(c.watermarked for c in nano.revoice_stream(x, sr, seed=3))
    nano.watermark = False
    try:
        plain = nano.revoice(x, sr, seed=3)
    finally:
        nano.watermark = True
    assert not default_watermarker().detect(plain, nano.sample_rate).marked
    # one segment, marked whole: what apply_watermark does to generate()'s unmarked output
    want = default_watermarker().apply(plain, nano.sample_rate, keep_length=True)
    print(f"re-voiced and marked vs the unmarked conversion marked whole: rel {rel(marked, want):.2e}")
    assert marked.shape == plain.shape and rel(marked, want) <= 1e-4


def test_a_streams_first_segment_is_short_and_each_segment_tokenized_as_it_comes(nano, sources, monkeypatch):
    """The early first cut on a 3 s clip (FIRST_SEGMENT_SECONDS made 1-1.5 s for it): two
    segments, their chunks in order, each segment's tokenizing timed in its first chunk (the
    `tokenize` stage), the source's timing kept; the whole conversion is not cut."""
    x, sr = sources["hts1a-8k-wav-3s"]
    monkeypatch.setattr(revoice, "FIRST_SEGMENT_SECONDS", (1, 1.5))
    events = []
    with nano.profile(events.append):
        chunks = list(nano.revoice_stream(x, sr, seed=3))
    assert {c.n_sentences for c in chunks} == {2} and chunks[-1].is_last
    assert [c.sentence_index for c in chunks] == sorted(c.sentence_index for c in chunks)
    (a, cut), (cut2, end) = chunks[0].span, chunks[-1].span
    assert a == 0 and cut == cut2 and 16000 <= cut <= 24000 and cut % (16000 // nano.token_rate) == 0
    starts = [i for i, c in enumerate(chunks) if i == 0 or c.sentence_index != chunks[i - 1].sentence_index]
    assert [i for i, c in enumerate(chunks) if c.stages.tokenize_ms > 0] == starts
    assert [e.stage for e in events if e.phase == "end"].count("tokenize") == 2
    streamed = np.concatenate([c.samples for c in chunks])
    whole = nano.revoice(x, sr, seed=3)
    assert streamed.size == whole.size and abs(whole.size / nano.sample_rate - x.size / sr) < 0.05
    assert len(nano.revoice_tokens(x, sr)) == 1  # revoice's own segments: one pass
    assert np.isfinite(streamed).all() and np.sqrt(np.mean(streamed[: nano.sample_rate] ** 2)) > 1e-3


def test_stream_cancel_ends_quietly(nano, sources):
    x, sr = sources["hts1a-8k-wav-3s"]
    stream = nano.revoice_stream(x, sr, seed=3)
    first = next(iter(stream))
    stream.cancel()
    assert first.samples.size > 0 and list(stream) == []


def test_long_sources_are_cut_in_the_quietest_stretch_between_10_and_30_s(nano):
    """pyannote's 30 s conversation and codec2's 11 s reading, one after the other (41 s)."""
    try:
        a, _ = real_speech.read(real_speech.pyannote_sample()[0], rate=16000)
        b, _ = real_speech.read(real_speech.codec2("raw/speech_orig_16k.wav"), rate=16000)
    except real_speech.FetchError as e:
        pytest.skip(str(e))
    config = nano.stages.config
    wav = np.concatenate([a, b])
    cuts = revoice.segments(wav, config)
    hop = config.tokenizer_rate // config.token_rate
    assert cuts[0][0] == 0 and cuts[-1][1] == wav.size and len(cuts) == 2
    assert all(e == s for (_, e), (s, _) in zip(cuts, cuts[1:]))
    for s, e in cuts:
        assert s % hop == 0 and 10 * 16000 <= e - s <= 30 * 16000
    cut = cuts[0][1]
    level = lambda i: 10 * np.log10(np.mean(wav[i - 1600:i + 1600].astype(np.float64) ** 2) + 1e-12)  # noqa: E731
    speech = 10 * np.log10(np.mean(wav.astype(np.float64) ** 2))
    assert level(cut) < speech - 15, (level(cut), speech)  # a pause, well below the speech's level
    assert revoice.segments(wav[: 30 * 16000], config) == [(0, 30 * 16000)]

    # A stream's first segment ends within FIRST_SEGMENT_SECONDS, in the quietest 200 ms there;
    # the rest is cut as a whole conversion cuts a source (here 33-38 s: once more, 10-30 s on).
    lo, hi = revoice.FIRST_SEGMENT_SECONDS
    short = revoice.segments(wav, config, first_short=True)
    assert short[0][0] == 0 and short[-1][1] == wav.size and len(short) == 3
    assert all(e == s for (_, e), (s, _) in zip(short, short[1:]))
    first = short[0][1]
    assert first % hop == 0 and lo * 16000 <= first <= hi * 16000
    quietest = min(level(i) for i in range(lo * 16000, hi * 16000 + 1, hop))
    assert level(first) <= quietest + 1.0, (level(first), quietest)  # the window's own quietest 200 ms
    assert all(10 * 16000 <= e - s <= 30 * 16000 for s, e in short[1:-1])
    # A source no longer than the two bounds together is one segment, streamed or not.
    n = (lo + hi) * 16000
    assert revoice.segments(wav[:n], config, first_short=True) == [(0, n)]
    assert len(revoice.segments(wav[: n + 16000], config, first_short=True)) == 2


def test_bad_sources_get_one_clear_error(nano, sources):
    with pytest.raises(SourceError, match="empty"):
        nano.revoice(np.zeros(0, np.float32), 16000)
    with pytest.raises(SourceError, match="invalid samples"):
        nano.revoice(np.full(16000, np.nan, np.float32), 16000)
    with pytest.raises(SourceError, match="not usable audio"):
        nano.revoice(np.zeros((4, 4, 4), np.float32), 16000)
    with pytest.raises(SourceTooShortError, match="too short to tokenize"):
        nano.revoice(sources["hts1a-8k-wav-3s"][0][:2000], 8000)
    with pytest.raises(NoSpeechError, match="no speech in the source"):
        nano.revoice(np.zeros(48000, np.float32), 16000)
    with pytest.raises(NoSpeechError, match="no speech in the source"):
        nano.revoice(np.random.default_rng(0).normal(0, 1e-4, 48000).astype(np.float32), 16000)  # faint hiss
    with pytest.raises(ParameterError):
        nano.revoice(sources["hts1a-8k-wav-3s"][0], 10)  # a sample rate of 10 Hz
    with pytest.raises(ParameterError):
        nano.revoice_stream(*sources["hts1a-8k-wav-3s"], cfm_steps=0)
    with pytest.raises(VoiceError):
        nano.revoice(*sources["hts1a-8k-wav-3s"], voice="narrator")
