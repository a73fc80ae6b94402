"""Likeness read on real voices: the verdict thresholds (engine_native.likeness.SAME_SPEAKER,
DIFFERENT_SPEAKER) and best-of-N's choice, with the trained GE2E speaker encoder on real
recordings (tests/helpers/real_speech.py). The thresholds come from benchmarks/bench_speakers.py
(12 speakers: same-speaker cosines median 0.90, different median 0.49).

Likeness itself is the cosine of the engine's VoiceEncoder embeddings (the same network); the
random-weight test models give ~1.0 for everything, so these checks need the trained encoder.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import real_speech as rs


@pytest.fixture(scope="module")
def voices(speaker_encoder, harvard):
    """{speaker: [embeddings of their clips]}: the codec2 man and woman, pyannote's speaker91."""
    from voice_lab.silence import detect_silence, speech_regions

    enc = speaker_encoder
    x, sr = rs.read(harvard)
    try:
        wav, _turns = rs.pyannote_sample()
    except rs.FetchError as e:
        pytest.skip(str(e))
    out: dict[str, list] = {"man": [], "woman": []}
    for r in speech_regions(detect_silence(x.reshape(-1, 1), sr, -30, 0.3), x.size / sr):
        part = x[int(r.start * sr):int(r.end * sr)]
        out["man" if rs.median_f0(part, sr) < rs.MALE_BELOW_HZ else "woman"].append(enc.embed(part, sr))
    y, ysr = rs.read(wav)
    # the long solo turns of pyannote's speaker91 (no one else speaks there, by its RTTM)
    out["speaker91"] = [enc.embed(y[int(a * ysr):int(b * ysr)], ysr) for a, b in ((14.7, 17.9), (21.8, 25.0))]
    return out


def test_verdicts_on_real_voices(voices):
    from engine_native.likeness import describe, verdict

    for who, (a, b) in voices.items():
        assert verdict(float(a @ b)) == "same voice", (who, float(a @ b))
    for x in voices["man"]:
        for y in voices["woman"] + voices["speaker91"]:
            assert verdict(float(x @ y)) == "different voice", float(x @ y)
    assert describe(0.873) == "0.87 (same voice)" and verdict(0.75) == "unsure"


def test_best_of_n_keeps_the_take_in_the_voice(voices):
    """best_take's choice (likeness.choose) on real scores: of "takes" by the woman, the man and
    another woman, scored against the woman's other clip, hers is kept."""
    from engine_native.likeness import choose

    ref = voices["woman"][0]
    takes = [("man", voices["man"][0]), ("woman", voices["woman"][1]), ("speaker91", voices["speaker91"][0]),
             ("man", voices["man"][1])]
    candidates = [(seed, float(e @ ref), 3.0, True) for seed, (_who, e) in enumerate(takes)]
    assert takes[choose(candidates)][0] == "woman"
    # a take of implausible length loses to a plausible one, however alike
    candidates[1] = (1, candidates[1][1], 30.0, False)
    assert takes[choose(candidates)][0] != "woman"
    assert np.isfinite([c[1] for c in candidates]).all()


# ------------------------------------------------------------------ which embeddings score a take


@pytest.fixture(scope="module")
def engine():
    from engine_native import Engine
    from tests.helpers.models import model_path

    return Engine(str(model_path("nano", "q4_0")))


@pytest.fixture(scope="module")
def harvard_voices(harvard):
    """The codec2 recording's woman and man: [(16 kHz samples of a speech region)] each, by pitch."""
    from voice_lab.silence import detect_silence, speech_regions

    x, sr = rs.read(harvard)
    out: dict[str, list] = {"man": [], "woman": []}
    for r in speech_regions(detect_silence(x.reshape(-1, 1), sr, -30, 0.3), x.size / sr):
        part = x[int(r.start * sr):int(r.end * sr)]
        out["man" if rs.median_f0(part, sr) < rs.MALE_BELOW_HZ else "woman"].append(part)
    return out, sr


def test_likeness_by_the_trained_encoder_against_the_voices_recording(engine, speaker_encoder, harvard_voices,
                                                                      tmp_path):
    """With a trained encoder and the voice's recording, a take is scored by the encoder on the
    measured scale (her other sentence: same voice; his: different); without either, by the
    model's VoiceEncoder - and `by` / `scored_by` say which."""
    from engine_native.audio import resample_soxr
    from engine_native.likeness import MODEL, TRAINED, Likeness, best_take, likeness, scored_by, verdict
    from engine_native.voice import Voice, save_clip

    parts, sr = harvard_voices
    her, his = parts["woman"], parts["man"]
    at_engine = [resample_soxr(p, sr, engine.sample_rate) for p in (her[1], his[0])]
    judge = Likeness(engine, engine.builtin_voice, encoder=speaker_encoder, reference=(her[0], sr))
    assert judge.trained and judge.by == TRAINED
    assert verdict(judge(at_engine[0])) == "same voice", judge(at_engine[0])
    assert verdict(judge(at_engine[1])) == "different voice", judge(at_engine[1])
    assert Likeness(engine).by == MODEL                     # no encoder: the model's own scale
    assert Likeness(engine, encoder=speaker_encoder).by == MODEL   # the built-in voice keeps no recording

    # a voice file with its recording kept beside it: the engine's likeness_encoder scores it
    path = str(tmp_path / "her.voice.gguf")
    engine.voice_from_audio(np.tile(her[0], 3), sr, name="her").save(path)   # cloning needs > 5 s
    save_clip(path, her[0], sr)
    voice = Voice.load(path)
    assert engine.likeness_encoder is None and scored_by(engine, voice) == MODEL
    engine.likeness_encoder = speaker_encoder
    try:
        assert scored_by(engine, voice) == TRAINED and scored_by(engine) == MODEL
        assert likeness(engine, at_engine[0], voice) == pytest.approx(judge(at_engine[0]), abs=1e-4)
        # best-of-N keeps the take the trained encoder likes best, and reports its score
        take = best_take(engine, "Hi there.", voice, seeds=[1, 2], options={"max_tokens": 12, "cfm_steps": 1})
        ours = Likeness(engine, voice, encoder=speaker_encoder, reference=(her[0], sr))(take.samples)
        assert take.score == pytest.approx(ours, abs=1e-4)
        assert take.score == max(c[1] for c in take.candidates if c[3]) or not any(c[3] for c in take.candidates)
        engine.likeness_encoder = None
        model_scale = Likeness(engine, voice)
        assert model_scale.by == MODEL
        assert abs(model_scale(take.samples) - take.score) > 1e-3   # the model's VoiceEncoder would say otherwise
    finally:
        engine.likeness_encoder = None
