"""Engine(model, decoder=other): the Multilingual model's speech tokens decoded by Turbo's S3Gen
(meanflow) and HiFT instead of its own (engine_native/engine.py, "Decoder").

Parity against the reference composed the same way: the reference's `ChatterboxVC` holding
Turbo's S3Gen (tests/reference/stages_vc.py) given the Multilingual model's tokens
(`force_tokens`) and the Multilingual voice's S3Gen conditioning, the noise fixed on both sides:
- a re-voicing (the Multilingual S3Tokenizer's tokens of a real recording), and
- a synthesis (the Multilingual T3's tokens of a sentence, as the decoder takes them: Turbo's
  silence tokens after the sentence's last pass),
each at the re-voicing parity tolerances (mel rel <= 2e-5, waveform rel <= 1e-4;
tests/engine_native/test_engine_revoice.py). The reduced-size Multilingual model (`mtl-small`)
with the full-size Turbo model as its decoder; the full-size pair is what bench measures.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine_native import Engine, ModelError
from engine_native.gguf_header import read_header
from engine_native.options import derived_seed
from engine_native.pipeline.s3gen_flow import initial_noise
from tests.helpers import revoice_parity
from tests.helpers.models import model_path
from tests.helpers.parity import rel
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

SEED = 5
TEXT = "Bonjour tout le monde, ceci est un essai."


@pytest.fixture(scope="module")
def mtl_path():
    return model_path("mtl", size="small")


@pytest.fixture(scope="module")
def turbo_path():
    return model_path("turbo")


@pytest.fixture(scope="module")
def engine(mtl_path, turbo_path):
    return Engine(mtl_path, threads=2, watermark=False, decoder=turbo_path)  # compared before any mark


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return revoice_parity.sources(tmp_path_factory)


def test_the_decoder_sets_the_steps_and_presets_and_leaves_t3_the_models_own(engine, mtl_path, turbo_path):
    assert engine.variant == "mtl" and engine.info["decoder"] == str(turbo_path)
    assert engine.info["hparams"]["meanflow"] and engine.defaults["cfm_steps"] == 2
    assert engine.presets["low-latency"]["cfm_steps"] == 1  # a meanflow decoder's, not the guided CFM's 7
    plain = Engine(mtl_path, threads=2, watermark=False)
    opts = {"seed": SEED, "language": "fr", "max_tokens": 60}
    assert engine.speech_tokens(TEXT, **opts) == plain.speech_tokens(TEXT, **opts)
    # Only what runs is read: the model's own S3Gen and HiFT stay unread, and the decoder's T3.
    s3gen = (lambda path: sum(t.nbytes for t in read_header(path).tensors if t.name.startswith(("s3gen.", "hift."))))
    assert engine.stages.file.buffer_bytes <= plain.stages.file.buffer_bytes - s3gen(mtl_path)
    assert engine.stages.decoder.file.buffer_bytes <= 1.05 * s3gen(turbo_path)


def test_revoicing_through_the_decoder_matches_chatterbox_vc_with_turbos_s3gen(engine, sources):
    snap = snapshot_dir("turbo")
    for vname, voice in revoice_parity.voices(engine).items():
        for sname, (x, sr) in sources.items():
            revoice_parity.check_parity(engine, "turbo", snap, x, sr, voice, f"mtl-small + turbo decoder {sname} -> {vname}",
                                        same_tokenizer=False)


def test_synthesis_through_the_decoder_matches_turbos_s3gen_on_the_models_tokens(engine, sources):
    opts = {"language": "fr", "max_tokens": 60}
    (tokens,) = engine.speech_tokens(TEXT, seed=SEED, **opts)
    flow, voice, config = engine.stages.flow, engine.builtin_voice, engine.stages.config
    speech = flow.speech_input(tokens, final=True)
    assert speech[-3:] == [4299] * 3  # Turbo's silence tokens, as its own generate appends them
    seed = derived_seed(SEED, 0)
    x0 = initial_noise(seed, config.token_mel_ratio * (voice.prompt_token.size + len(speech)), config.n_mels)
    mel = flow.mel(speech, voice, seed, final=True)
    hift = engine.stages.vocoder.hift
    source = hift.excitation_continue(hift.f0(mel), hift.source_state(seed))
    x, sr = next(iter(sources.values()))  # the reference tokenizes it; S3Gen goes on from `speech`
    ref = run_stage("vc_generate", snapshot_dir("turbo"), wav=x, sr=np.asarray(sr), variant=np.array("turbo"),
                    prompt_token=voice.prompt_token, prompt_feat=voice.prompt_feat, embedding=voice.embedding,
                    x0=x0, source=source, force_tokens=np.asarray(speech, np.int32))
    got = engine.synthesize(TEXT, seed=SEED, **opts)
    r_mel, r_wav = rel(mel, ref["mel"]), rel(got, ref["wav"])
    print(f"mtl-small T3 -> turbo decoder, {len(speech)} tokens: mel rel {r_mel:.2e} max_abs "
          f"{np.abs(mel - ref['mel']).max():.2e}; wav rel {r_wav:.2e} max_abs {np.abs(got - ref['wav']).max():.2e}")
    assert mel.shape == ref["mel"].shape and r_mel <= 2e-5
    assert got.shape == ref["wav"].shape and r_wav <= 1e-4


def test_a_low_latency_stream_through_the_decoder_and_its_cancel(engine):
    opts = {"seed": SEED, "language": "fr", "max_tokens": 60}
    whole = engine.synthesize(TEXT, **opts)
    chunks = list(engine.stream(TEXT, **opts, **engine.presets["low-latency"]))
    streamed = np.concatenate([c.samples for c in chunks])
    assert len(chunks) >= 2 and chunks[0].samples.size < streamed.size
    assert abs(streamed.size - whole.size) <= engine.sample_rate // 10  # the same tokens, cut in passes
    assert engine.stages.flow.cached_prefixes  # the voice prompt as a cached prefix of the decoder's CFM
    stream = engine.stream(TEXT, **opts)
    next(stream)
    stream.cancel()
    t0 = time.perf_counter()
    with engine.stages.exclusive():
        pass
    assert time.perf_counter() - t0 < 5.0  # the engine is free again (a cancel reaches the decoder's graphs)


def test_a_decoder_that_cannot_be_used_is_one_clear_error(mtl_path, tmp_path):
    from engine_native.watermark import find_model

    with pytest.raises(ModelError, match="decoder model file not found"):
        Engine(mtl_path, threads=2, watermark=False, decoder=tmp_path / "gone.gguf")
    junk = tmp_path / "notes.gguf"
    junk.write_text("not a model")
    for bad in (junk, find_model()):  # not a GGUF; a GGUF that is no Chatterbox model (the watermarker)
        with pytest.raises(ModelError, match="decoder") as e:
            Engine(mtl_path, threads=2, watermark=False, decoder=bad)
        assert str(bad) in str(e.value)
