"""Voice cloning end to end: `Engine.voice_from_audio` against the reference's
`prepare_conditionals` on the same files, the resamplers, .voice.gguf files, bad input.

Full-size random-weight Turbo (F32). Tolerances: embeddings cosine >= 0.99999, token
agreement >= 98 %, prompt_feat rel <= 1e-5 (float32 rounding through different but
equivalent arithmetic); the resamplers rel <= 1e-5.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import soundfile as sf

from engine_native import (Engine, IncompatibleVoiceError, SilentAudioError, Voice, VoiceError,
                           VoiceTooShortError)
from engine_native.audio import resample_sinc, resample_soxr
from tests.helpers import audio_fixtures as af
from tests.helpers.models import model_path
from tests.helpers.parity import check_voice_matches, rel
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

TENSORS = ("speaker_emb", "cond_prompt_speech_tokens", "embedding", "prompt_token", "prompt_feat")


@pytest.fixture(scope="module")
def engine():
    return Engine(model_path("turbo", "f32"), threads=2)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """Three different recordings: espeak-ng speech at 22.05 kHz (12 s), the same voice
    as stereo 44.1 kHz with different channel gains and noise (17 s: past both the 10 s
    and 15 s windows), and a clipped, very loud 48 kHz mono take (8 s)."""
    if not af.tools_available():
        pytest.skip("espeak-ng / ffmpeg not installed")
    folder = tmp_path_factory.mktemp("voices")
    speech = af.speech_stream(str(folder))
    rng = np.random.default_rng(7)
    r22 = af.ESPEAK_RATE
    out = {}
    x = speech[: 12 * r22]
    out["espeak22k"] = (x, r22)
    y = resample_soxr(np.tile(speech, 2)[: 17 * r22], r22, 44100)
    stereo = np.stack([0.9 * y, 0.6 * y], axis=1) + 0.003 * rng.standard_normal((y.size, 2)).astype(np.float32)
    out["stereo44k"] = (stereo.astype(np.float32), 44100)
    z = resample_soxr(speech[3 * r22: 11 * r22], r22, 48000)
    out["clipped48k"] = (np.clip(z * 8.0, -1.0, 1.0).astype(np.float32), 48000)
    paths = {}
    for name, (samples, rate) in out.items():
        path = folder / f"{name}.wav"
        sf.write(path, samples, rate, subtype="FLOAT")
        paths[name] = str(path)
    return paths


@pytest.fixture(scope="module")
def reference(recordings):
    names = list(recordings)
    out = run_stage("prepare", snapshot_dir("turbo"), paths=np.array([recordings[n] for n in names]),
                    threads=np.asarray(2))
    return {n: {t: out[f"{i}.{t}"] for t in (*TENSORS, "seconds")} for i, n in enumerate(names)}


@pytest.fixture(scope="module")
def cloned(engine, recordings):
    voices, seconds = {}, {}
    for name, path in recordings.items():
        samples, rate = sf.read(path, dtype="float32", always_2d=True)
        t0 = time.perf_counter()
        voices[name] = engine.voice_from_audio(samples, rate, name=name)
        seconds[name] = time.perf_counter() - t0
    return voices, seconds


@pytest.mark.parametrize("name", ["espeak22k", "stereo44k", "clipped48k"])
def test_voice_from_audio_matches_prepare_conditionals(name, cloned, reference):
    voice, ref = cloned[0][name], reference[name]
    check_voice_matches(voice, ref, [f"{name}: clone {cloned[1][name]:.2f} s native vs {float(ref['seconds']):.2f} s "
                                     "reference"])


def test_resamplers_match_librosa_and_torchaudio():
    t = np.arange(3 * 44100) / 44100
    x = (0.4 * np.sin(2 * np.pi * (200 + 3000 * t) * t) + 0.05 * np.random.default_rng(1).standard_normal(t.size))
    x = x.astype(np.float32)
    for src, dst in ((44100, 24000), (24000, 16000), (8000, 24000)):
        ref = run_stage("resample", snapshot_dir("turbo"), wav=x, src=np.asarray(src), dst=np.asarray(dst))
        for got, want, what in ((resample_soxr(x, src, dst), ref["soxr"], "soxr"),
                                (resample_sinc(x, src, dst), ref["sinc"], "sinc")):
            assert got.shape == want.shape, (what, src, dst)
            r = rel(got, want)
            print(f"{what} {src}->{dst}: rel {r:.2e} max_abs {np.abs(got - want).max():.2e}")
            assert r <= 1e-5, (what, src, dst, r)


def test_voice_file_round_trip_is_exact_and_small(cloned, engine, tmp_path):
    voice = cloned[0]["stereo44k"]
    path = voice.save(tmp_path / "me.voice.gguf", name="Me", lab_chain='{"steps": []}')
    size = path.stat().st_size
    print(f"voice file {size} bytes")
    assert size < 1_000_000
    back = Voice.load(path)
    for t in TENSORS:
        a, b = getattr(voice, t), getattr(back, t)
        assert a.dtype == b.dtype and np.array_equal(a, b), t
    assert back.name == "Me" and back.variant == engine.variant
    assert back.meta["lab_chain"] == '{"steps": []}' and back.meta["duration_s"] == pytest.approx(17.0, abs=0.01)
    engine.check_voice(back)
    # The same voice gives the same audio as the in-memory one.
    a = engine.synthesize("Hi.", voice, seed=1, max_tokens=8)
    b = engine.synthesize("Hi.", back, seed=1, max_tokens=8)
    assert np.array_equal(a, b)


def test_bad_recordings_get_clear_errors(engine, tmp_path):
    with pytest.raises(VoiceTooShortError, match=r"3\.0 s long.*more than 5 s"):
        engine.voice_from_audio(np.full(3 * 16000, 0.1, np.float32), 16000)
    with pytest.raises(SilentAudioError, match="silent"):
        engine.voice_from_audio(np.zeros((8 * 44100, 2), np.float32), 44100)
    with pytest.raises(VoiceError, match="NaN"):
        engine.voice_from_audio(np.full(8 * 16000, np.nan, np.float32), 16000)
    with pytest.raises(VoiceError):
        engine.voice_from_audio(np.zeros((2, 2, 2), np.float32), 16000)
    bad = tmp_path / "bad.voice.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 10)
    with pytest.raises(VoiceError, match="bad.voice.gguf"):
        Voice.load(bad)
    with pytest.raises(VoiceError, match="not a Chatterbox voice"):
        Voice.load(model_path("nano", "q4_0"))
    with pytest.raises(VoiceError, match="not found"):
        Voice.load(tmp_path / "missing.voice.gguf")
    other = dataclasses.replace(engine.builtin_voice, variant="nano")
    with pytest.raises(IncompatibleVoiceError, match="nano"):
        engine.synthesize("Hello.", other, max_tokens=4)


# ---------------------------------------------------------------- the command line


def _cli(*args, **kw):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, timeout=900, **kw)


def test_cli_bake_and_lab_bake_write_voices_that_load(tmp_path):
    """`bake` clones a recording; `lab --bake` clones the Voice Lab's clip and keeps the
    chain and spans in the voice's metadata. Nano Q4_0 (the smallest model)."""
    if not af.tools_available():
        pytest.skip("espeak-ng / ffmpeg not installed")
    rec = af.build_recording(str(tmp_path), layout=(0.5, 7.0, 0.8, 5.0, 0.5))
    src = af.write_wav(str(tmp_path / "talk.wav"), rec)
    model = str(model_path("nano", "q4_0"))
    r = _cli("bake", src, "-m", model, "-o", "talk.voice.gguf", "--name", "Talker", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    v = Voice.load(tmp_path / "talk.voice.gguf")
    assert v.name == "Talker" and v.variant == "nano" and len(v.meta["source_sha256"]) == 64
    r = _cli("lab", src, "-o", "clip.wav", "--bake", "-m", model, "--name", "Lab voice", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    v = Voice.load(tmp_path / "clip.voice.gguf")
    assert v.name == "Lab voice" and "steps" in v.meta["lab_chain"] and v.meta["lab_spans"].startswith("[[")
    # Bad input: a file that is not audio, and one too short to clone; nothing is written.
    (tmp_path / "notes.txt").write_text("not audio")
    short = tmp_path / "short.wav"
    sf.write(short, rec.samples[: 2 * rec.rate], rec.rate)
    for path, message in ((tmp_path / "notes.txt", "notes.txt"), (short, "more than 5 s")):
        r = _cli("bake", str(path), "-m", model, "-o", "bad.voice.gguf", cwd=tmp_path)
        err = r.stderr.decode()
        assert r.returncode == 1 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "bad.voice.gguf").exists()
