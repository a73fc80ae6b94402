"""The Multilingual model through the public Engine API, against the PyTorch reference.

The reduced random-weight snapshot (`mtl-small`: 14 Llama layers, the real widths,
vocabularies, conditioning and S3Gen), F32, so that the file runs in a few minutes on two
cores. One reference process (`mtl_engine`) clones the recordings with
`ChatterboxMultilingualTTS.prepare_conditionals` and follows `generate` up to its speech
tokens with greedy draws.

- The MTL voice recipe (no loudness step, 6 s / 150 prompt tokens for T3, 10 s for S3Gen):
  embeddings cosine >= 0.99999, token agreement >= 98 %, prompt_feat rel <= 1e-5 (as the
  Turbo voice test measures `prepare_conditionals`).
- generate's text ids (punc_norm, tokenizer, language tag, start/stop) exact, and its greedy
  speech tokens identical up to the stop (the analyzer's forced stops included), with the
  built-in voice and with a cloned one, at several exaggeration / guidance settings.
- Audio (needs the guided CFM): batch length = speech tokens x samples per token, stream
  vs batch, seeds, cancellation.
- Languages: 23 codes with names, detection from the script (logged when implicit), an
  unknown code refused with the list; Turbo refuses the Multilingual options.
- A voice of another variant re-made from the recording kept beside its file.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from engine_native import Engine, EngineError, IncompatibleVoiceError, ParameterError, Voice
from engine_native.audio import resample_soxr
from engine_native.pipeline.concurrency import CancelToken
from engine_native.text import Sentence
from engine_native.voice import save_clip
from tests.helpers import audio_fixtures as af
from tests.helpers.models import model_path
from tests.helpers.mtl_corpus import BASE
from tests.helpers.parity import check_voice_matches
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

SNAPSHOT = dict(size="small")
N_TOKENS = 24
# (text, language, voice: -1 built-in / 0 the first recording, exaggeration, cfg_weight)
GREEDY = [
    ("Hello world, it is a test.", "en", -1, 0.5, 0.5),
    ("Bonjour le monde !", "fr", -1, 0.9, 0.3),
    ("今天天气很好。", "zh", 0, 0.5, 0.5),
    ("Привет, мир!", "ru", 0, 0.3, 0.0),
]
VOICE_TENSORS = ("speaker_emb", "cond_prompt_speech_tokens", "embedding", "prompt_token", "prompt_feat")


def rel(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


@pytest.fixture(scope="module")
def engine():
    return Engine(model_path("mtl", "f32", **SNAPSHOT), threads=2)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """espeak-ng speech at 22.05 kHz (12 s: past T3's 6 s and S3Gen's 10 s windows), and a
    loud, clipped 48 kHz take of it (8 s): the recipe has no loudness step, so the level
    reaches the voice. (A 22.05 kHz clip shorter than 10 s puts the resampler's last
    samples into S3Gen's prompt: there the last 2 mel frames differ by up to 0.26, as they
    would for Turbo; the resampler test covers whole signals only.)"""
    if not af.tools_available():
        pytest.skip("espeak-ng / ffmpeg not installed")
    folder = tmp_path_factory.mktemp("mtl-voices")
    speech = af.speech_stream(str(folder))
    r22 = af.ESPEAK_RATE
    out = {"espeak22k": (speech[: 12 * r22], r22),
           "clipped48k": (np.clip(resample_soxr(speech[3 * r22: 11 * r22], r22, 48000) * 6.0, -1, 1), 48000)}
    paths = {}
    for name, (samples, rate) in out.items():
        paths[name] = str(folder / f"{name}.wav")
        sf.write(paths[name], np.asarray(samples, np.float32), rate, subtype="FLOAT")
    return paths


@pytest.fixture(scope="module")
def reference(recordings):
    names = list(recordings)
    return run_stage("mtl_engine", snapshot_dir("mtl", **SNAPSHOT), paths=np.array([recordings[n] for n in names]),
                     texts=np.array([g[0] for g in GREEDY]), langs=np.array([g[1] for g in GREEDY]),
                     voices=np.array([g[2] for g in GREEDY]), exaggerations=np.array([g[3] for g in GREEDY]),
                     cfg_weights=np.array([g[4] for g in GREEDY]), n=np.asarray(N_TOKENS), threads=np.asarray(2))


@pytest.fixture(scope="module")
def cloned(engine, recordings):
    out = {}
    for name, path in recordings.items():
        samples, rate = sf.read(path, dtype="float32", always_2d=True)
        out[name] = engine.voice_from_audio(samples, rate, name=name)
    return out


@pytest.mark.parametrize("index,name", [(0, "espeak22k"), (1, "clipped48k")])
def test_voice_recipe_matches_prepare_conditionals(index, name, engine, cloned, reference):
    voice = cloned[name]
    ref = {t: reference[f"voice{index}.{t}"] for t in (*VOICE_TENSORS, "emotion_adv")}
    assert voice.variant == "mtl"
    assert voice.cond_prompt_speech_tokens.size == 150  # 6 s of 16 kHz audio at 25 tokens a second
    check_voice_matches(voice, ref, [name])
    # emotion_adv: the exaggeration the voice is spoken with by default.
    assert float(ref["emotion_adv"][0]) == pytest.approx(engine.defaults["exaggeration"])


@pytest.mark.parametrize("j", range(len(GREEDY)))
def test_greedy_tokens_match_generate(j, engine, cloned, reference):
    text, lang, which, exaggeration, cfg_weight = GREEDY[j]
    assert engine.text_tokens(text, lang) == reference[f"text_ids{j}"].tolist()
    voice = None if which < 0 else cloned["espeak22k"]
    got = engine.speech_tokens(text, voice, language=lang, seed=0, top_k=1, max_tokens=N_TOKENS,
                               exaggeration=exaggeration, cfg_weight=cfg_weight)
    want = reference[f"tokens{j}"].tolist()
    print(f"{lang}: {len(want)} tokens, native {got[0][:12]}..., reference {want[:12]}...")
    assert len(got) == 1 and got[0] == want


def test_languages_and_detection(engine, caplog):
    langs = engine.languages
    assert len(langs) == 23 and langs["zh"] == "Chinese" and langs["sw"] == "Swahili"
    for lang in ("ar", "el", "he", "hi", "ja", "ko", "ru", "zh"):  # the script names the language
        for text in BASE[lang][:3]:
            assert engine.detect_language(text) == lang, (lang, text)
    for text, lang in (("Hello there, how are you?", "en"), ("Die Straße ist groß.", "de"),
                       ("¿Cómo estás?", "es"), ("Ça va ? Très bien.", "fr"), ("1 2 3", "en")):
        assert engine.detect_language(text) == lang, text
    with caplog.at_level(logging.INFO, logger="engine_native.pipeline.text_frontend"):
        ids = engine.text_tokens("Привет, мир!")
    assert ids == engine.text_tokens("Привет, мир!", "ru") and "detected ru" in caplog.text
    assert engine.text_tokens("Hello.", "EN") == engine.text_tokens("Hello.", "en")  # as generate's lower()
    with pytest.raises(ParameterError, match="unknown language 'xx'.*ar, da, de"):
        engine.stream("Hello.", language="xx")
    with pytest.raises(ParameterError, match="unknown language"):
        engine.text_tokens("Hello.", 5)


def test_options_schema(engine):
    d = engine.defaults
    assert d["exaggeration"] == pytest.approx(0.5) and d["cfg_weight"] == pytest.approx(0.5)
    assert d["top_k"] is None and d["repetition_penalty"] == pytest.approx(2.0) and d["cfm_steps"] == 10
    for bad in ({"exaggeration": 2.5}, {"exaggeration": -0.1}, {"cfg_weight": 3.0}, {"cfg_weight": float("nan")},
                {"exaggeration": 2**64}, {"exaggeration": True}, {"cfg_weight": "0.5"}, {"cfg_weight": 10**400},
                {"top_k": 0}, {"max_tokens": 5000}):
        with pytest.raises(ParameterError, match=next(iter(bad))):
            engine.stream("Hello.", language="en", **bad)
    engine.stream("Hello.", language="en", exaggeration=0.0, cfg_weight=0.0, top_k=1).close()


def test_text_budget_in_tokens(engine):
    """A Chinese sentence whose Cangjie codes exceed T3's 2050 text positions is cut into
    pieces that fit, each keeping its span in the text."""
    text = "前言。" + "今天天气很好" * 100 + "。"   # 600 glyphs of about 4 ids each in the table
    assert len(engine.text_tokens(text[3:], "zh")) > 2050
    pieces = engine.stages.text.fit_budget(Sentence(text[3:], 3, len(text)), "zh")
    assert len(pieces) > 1 and pieces[0].start == 3 and pieces[-1].end >= len(text) - 1  # (a lone 。 is no piece)
    for p in pieces:
        assert len(engine.text_tokens(p.text, "zh")) <= 2050 and text[p.start:p.end] == p.text
    # The splitter's 300-character pieces fit already.
    assert all(len(engine.text_tokens(p.text, "zh")) <= 2050 for p in engine.stages.text.sentences(text, CancelToken(), "zh"))


def test_voice_of_another_variant_is_remade_from_its_clip(engine, cloned, recordings, tmp_path):
    voice = cloned["espeak22k"]
    foreign = dataclasses.replace(voice, variant="turbo", meta={"name": "Mine"})
    lonely = Voice.load(foreign.save(tmp_path / "lonely.voice.gguf"))
    with pytest.raises(IncompatibleVoiceError, match="no recording"):
        engine.stream("Hello.", lonely, language="en")
    kept = Voice.load(foreign.save(tmp_path / "mine.voice.gguf"))
    shutil.copy(recordings["espeak22k"], tmp_path / "mine.wav")  # what `lab --bake` leaves beside it
    assert engine.voice_clip(kept) == str(tmp_path / "mine.wav")
    samples, rate = sf.read(recordings["espeak22k"], dtype="float32")
    save_clip(tmp_path / "other.voice.gguf", samples, rate)       # the same through the engine's writer
    assert np.array_equal(sf.read(tmp_path / "other.wav", dtype="float32")[0], samples)
    remade = engine.adapt_voice(kept)
    assert remade.variant == "mtl" and remade.name == "Mine" and remade.meta["remade_from"] == "turbo"
    for t in VOICE_TENSORS:
        assert np.array_equal(getattr(remade, t), getattr(voice, t)), t
    assert engine.adapt_voice(kept) is remade and engine.adapt_voice(voice) is voice
    # Synthesis re-makes it on its own (the same tokens as with the voice itself).
    a = engine.speech_tokens("Hello.", kept, language="en", seed=1, max_tokens=6)
    b = engine.speech_tokens("Hello.", voice, language="en", seed=1, max_tokens=6)
    assert a == b


def test_turbo_refuses_multilingual_options():
    turbo = Engine(model_path("turbo", "f32"), threads=2)
    assert turbo.languages == {} and "exaggeration" not in turbo.defaults
    for opts in ({"language": "en"}, {"exaggeration": 0.7}, {"cfg_weight": 0.3}):
        with pytest.raises(ParameterError, match="Multilingual"):
            turbo.stream("Hello.", **opts)
    turbo.stream("Hello.", language=None, exaggeration=None, cfg_weight=None).close()
    assert turbo.detect_language("Привет") == "ru"


@pytest.fixture(scope="module")
def audio_engine(engine):
    """The engine when it can make audio: the guided CFM (the `mtl` branch) is in this build."""
    try:
        engine.synthesize("Hi.", language="en", seed=0, max_tokens=4, **FAST)
    except EngineError as e:
        if "not implemented" in str(e):
            pytest.skip(f"no guided CFM in this build yet: {e}")
        raise
    return engine


def samples_per_token(engine) -> int:
    return engine.sample_rate // engine.token_rate


# Audio tests run S3Gen many times: 2 guided CFM steps over the last 2 s of the voice's
# prompt keep them to a few seconds each on two cores (the CFM itself: tests/engine_native/src/s3gen/test_s3gen_cfm_mtl.py).
FAST = dict(cfm_steps=2, prompt_seconds=2.0)


def test_synthesize_speaks_the_tokens_and_is_seeded(audio_engine):
    e, text = audio_engine, "Hello there. Bonjour le monde !"
    a = e.synthesize(text, language="en", seed=3, max_tokens=12, **FAST)
    assert a.dtype == np.float32 and np.all(np.isfinite(a)) and 0 < np.abs(a).max() <= 1.0
    # No silence tail: the audio is exactly the speech tokens of both sentences (greedy: the
    # first attempt's tokens, none retried).
    greedy = e.speech_tokens(text, language="en", seed=3, max_tokens=12, top_k=1)
    b = e.synthesize(text, language="en", seed=3, max_tokens=12, top_k=1, **FAST)
    n = sum(sum(1 for t in s if t < 6561) for s in greedy)
    assert b.size == n * samples_per_token(e)
    assert np.array_equal(a, e.synthesize(text, language="en", seed=3, max_tokens=12, **FAST))
    assert not np.array_equal(a, e.synthesize(text, language="en", seed=4, max_tokens=12, **FAST))


def test_stream_agrees_with_synthesize_and_cancels(audio_engine):
    e, text = audio_engine, "Hello there. This is a test!"
    opts = dict(language="en", seed=5, max_tokens=16, exaggeration=0.7, cfg_weight=0.4, **FAST)
    batch = e.synthesize(text, **opts)
    chunks = list(e.stream(text, first_chunk_tokens=4, chunk_tokens=5, **opts))
    assert [c.is_last for c in chunks][-1] and {c.sentence_index for c in chunks} == {0, 1}
    streamed = np.concatenate([c.samples for c in chunks])
    assert streamed.size == batch.size
    r = rel(streamed, batch)
    print(f"stream vs synthesize: {len(chunks)} chunks, rel {r:.4f}, max_abs {np.abs(streamed - batch).max():.4f}")
    assert r < 0.05
    it = e.stream("One two three. Four five six. Seven eight nine.", language="en", seed=1, max_tokens=16,
                  first_chunk_tokens=4, chunk_tokens=4, **FAST)
    got = [next(it)]
    it.cancel()
    got += list(it)
    assert len(got) == 1 and not got[0].is_last
    assert e.synthesize("Hi.", language="en", seed=0, max_tokens=4, top_k=1, **FAST).size % samples_per_token(e) == 0


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def test_cli_lists_languages_and_checks_the_multilingual_flags(tmp_path):
    model = str(model_path("mtl", "f32", **SNAPSHOT))
    r = _cli("info", model, cwd=tmp_path)
    assert r.returncode == 0 and "languages         23: ar (Arabic), da (Danish)" in r.stdout, r.stdout + r.stderr
    r = _cli("say", "Hello.", "-m", model, "-o", "x.wav", "--language", "xx", cwd=tmp_path)
    assert r.returncode == 1 and "unknown language 'xx'" in r.stderr, r.stderr
    r = _cli("say", "Hello.", "-m", model, "-o", "x.wav", "--exaggeration", "9", cwd=tmp_path)
    assert r.returncode == 1 and "exaggeration must be a number in [0.0, 2.0]" in r.stderr, r.stderr
    r = _cli("say", "Hello.", "-m", str(model_path("turbo", "f32")), "-o", "x.wav", "--cfg-weight", "0.3", cwd=tmp_path)
    assert r.returncode == 1 and "Multilingual models only" in r.stderr, r.stderr


def test_japanese_without_pykakasi_says_once_what_is_missing(tmp_path):
    """pykakasi (GPL) is the optional `ja` extra: without it kanji pass through (the
    reference's ImportError branch) and one warning names the package and the extra."""
    code = ("import sys; sys.modules['pykakasi'] = None\n"
            "from engine_native import Engine\n"
            f"e = Engine({str(model_path('mtl', 'f32', **SNAPSHOT))!r}, threads=1)\n"
            "a = e.text_tokens('日本語の文章です。', 'ja'); b = e.text_tokens('今日は天気がいいです。', 'ja')\n"
            "print(len(a), len(b))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("pykakasi is not installed") == 1, r.stderr
    assert "pip install 'chatterbox-studio[ja]'" in r.stderr
