"""Re-voicing parity against the reference's `ChatterboxVC.generate` (tests/reference/stages_vc.py),
shared by the re-voicing tests and the decoder tests: the real recordings, the target voices and
the stage-by-stage comparison (tests/engine_native/test_engine_revoice.py states the tolerances)."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from engine_native import Engine
from engine_native.pipeline.s3gen_flow import initial_noise
from tests.helpers import real_speech
from tests.helpers.parity import rel
from tests.reference.runner import run_stage

FULL = os.environ.get("CBS_REVOICE_FULL") == "1"
SEED = 7
# A token may differ only where the FSQ input is this close to a rounding boundary (float error:
# the S3Tokenizer's projection agrees to rel ~1.5e-6).
TIE = 1e-5


def mp3_44k_stereo(path, tmp) -> str:
    """A recording re-encoded as 44.1 kHz stereo MP3 (another rate, format and layout)."""
    out = str(tmp / "source.mp3")
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(path), "-ac", "2", "-ar", "44100",
                    out], check=True)
    return out


def sources(tmp_path_factory) -> dict[str, tuple[np.ndarray, int]]:
    """name -> (mono float32, rate) as the hardened decoder gives them."""
    try:
        hts1a = real_speech.codec2("wav/hts1a.wav")
        out = {"hts1a-8k-wav-3s": real_speech.read(hts1a)}
        if FULL:
            tmp = tmp_path_factory.mktemp("revoice-src")
            out["hts1a-44k-stereo-mp3-3s"] = real_speech.read(mp3_44k_stereo(hts1a, tmp))
            _, en = real_speech.asterisk_prompts("en")
            _, fr = real_speech.asterisk_prompts("fr")
            wav, _ = real_speech.pyannote_sample()
            for name, (x, sr), seconds in [("vk5qi-8k-wav-5s", real_speech.read(real_speech.codec2("wav/vk5qi.wav")), 5),
                                           ("allison-en-16k-g722-6s", real_speech.read_g722(en[0]), 6),
                                           ("june-fr-16k-g722-4s", real_speech.read_g722(fr[0]), 4),
                                           ("pyannote-16k-wav-8s", real_speech.read(wav), 8)]:
                out[name] = (x[: seconds * sr], sr)
    except real_speech.FetchError as e:
        pytest.skip(f"real recordings unavailable: {e}")
    return out


def voices(engine) -> dict:
    out = {"builtin": engine.builtin_voice}
    if FULL:
        x, sr = real_speech.read(real_speech.codec2("raw/speech_orig_16k.wav"))
        out["codec2-16k-clone"] = engine.voice_from_audio(x, sr, name="codec2")
    return out


def check_parity(engine: Engine, variant: str, snapshot, x: np.ndarray, sr: int, voice, label: str, *,
                 same_tokenizer: bool = True) -> None:
    """`variant`, `snapshot`: the reference S3Gen's. `same_tokenizer`: the reference tokenizes
    with the engine's own S3Tokenizer weights, so the tokens are compared too (False: an
    engine with another model's decoder, whose reference S3Gen holds that model's tokenizer)."""
    lines = [label]
    (tokens,) = engine.revoice_tokens(x, sr)
    config = engine.stages.config
    P, S = voice.prompt_token.size, tokens.size
    x0 = initial_noise(SEED, config.token_mel_ratio * (P + S), config.n_mels)
    mel = engine.stages.flow.mel(tokens.tolist(), voice, SEED, final=True)  # revoice's whole pass
    hift = engine.stages.vocoder.hift
    source = hift.excitation_continue(hift.f0(mel), hift.source_state(SEED))  # its vocoder's excitation
    ref = run_stage("vc_generate", snapshot, wav=x, sr=np.asarray(sr), variant=np.array(variant),
                    prompt_token=voice.prompt_token, prompt_feat=voice.prompt_feat, embedding=voice.embedding,
                    x0=x0, source=source, force_tokens=tokens)
    got = engine.revoice(x, sr, voice, seed=SEED)

    if same_tokenizer:
        assert tokens.shape == ref["tokens"].shape, (tokens.shape, ref["tokens"].shape)
        differ = np.flatnonzero(tokens != ref["tokens"])
        # The only difference allowed: a token whose FSQ input (tanh(proj) x 0.999, rounded to
        # {-1, 0, 1}) lies on a rounding boundary within float error on the reference's side.
        fsq = np.tanh(ref["proj"].astype(np.float64)) * 0.999
        tie = np.min(np.abs(np.abs(fsq) - 0.5), axis=1) < TIE
        lines.append(f"  tokens {S - differ.size}/{S} identical" + (
            f"; {differ.size} differ, each a rounding tie (reference FSQ input within "
            f"{np.min(np.abs(np.abs(fsq[differ]) - 0.5), axis=1).max():.1e} of 0.5): S3Gen continues "
            f"from ours on both sides" if differ.size else ""))
    else:
        lines.append(f"  {S} tokens of the model's own tokenizer, given to both sides (the reference's is the decoder's)")
    r_mel, a_mel = rel(mel, ref["mel"]), float(np.abs(mel - ref["mel"]).max())
    lines.append(f"  mel {mel.shape} rel {r_mel:.2e} max_abs {a_mel:.2e}")
    r_wav, a_wav = rel(got, ref["wav"]), float(np.abs(got - ref["wav"]).max())
    lines.append(f"  wav {got.shape} rel {r_wav:.2e} max_abs {a_wav:.2e} (ref rms {np.sqrt(np.mean(ref['wav'] ** 2)):.2e})")
    print("\n".join(lines))
    assert not same_tokenizer or tie[differ].all(), lines
    assert mel.shape == ref["mel"].shape and r_mel <= 2e-5, lines
    assert got.shape == ref["wav"].shape and r_wav <= 1e-4, lines
