"""One speaker per voice: a recording of two people taking turns gives a clone window from
one of them, and `lab` names the speakers and where they speak.

Two kinds of test:
- real recordings fetched from packages (tests/helpers/real_speech.py) with the trained GE2E
  speaker encoder (engine_native.speaker_encoder), checked by a measure that owes nothing to
  the embedder (the pitch of each chosen span);
- espeak-ng voices with the random-weight Nano model's CAMPPlus x-vectors and a plain spectral
  feature: the clustering rules on embeddings with no speaker identity (every cosine ~0.99).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from tests.helpers import real_speech as rs
from tests.helpers.models import model_path

pytestmark = pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("ffmpeg")),
                                reason="needs espeak-ng and ffmpeg")
NO_ENCODER = {"CBS_SPEAKER_ENCODER": "/nonexistent/speaker-encoder.gguf"}   # lab as without setup's encoder

@pytest.fixture(scope="module")
def engine():
    from engine_native import Engine

    return Engine(str(model_path("nano", "q4_0")))


def _voice_at(turns, t):
    return next((v for a, b, v in turns if a - 0.3 <= t <= b + 0.3), None)


def spectral_embedding(samples, rate):
    """A plain speaker feature (the mean log power in 32 mel-spaced bands, mean removed):
    enough to tell two espeak-ng voices apart; stands in for a trained speaker encoder."""
    x = np.asarray(samples, np.float64)
    n = 512
    frames = np.lib.stride_tricks.sliding_window_view(x, n)[::n // 2] * np.hanning(n)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    loud = power.sum(axis=1) > 1e-4 * power.sum(axis=1).max()
    freqs = np.fft.rfftfreq(n, 1 / rate)
    mel = 2595 * np.log10(1 + freqs / 700)
    edges = np.linspace(mel[1], mel[-1], 33)
    bands = np.stack([power[loud][:, (mel >= lo) & (mel < hi)].sum(axis=1) for lo, hi in itertools.pairwise(edges)], 1)
    v = np.log(bands.mean(axis=0) + 1e-10)
    return v - v.mean()


def _check_window(path, turns, embed):
    from voice_lab.decode import decode
    from voice_lab.lab import prepare_clip
    from voice_lab.silence import Span
    from voice_lab.speakers import find_speakers, windows

    result = prepare_clip(path, target=6.0, embed=embed)
    sp = result.report["speakers"]
    assert sp["count"] == 2, sp
    spans = result.report["window"]["spans"]
    voices = {_voice_at(turns, (a + b) / 2) for a, b in spans}
    assert len(voices) == 1, (spans, turns)                       # never a mix of speakers
    assert voices == {"en+m3"}                                    # the one with the most speech
    # each chosen span's embedding is nearer the chosen speaker's centroid than the other's
    x, rate = decode(path)
    mono = x.mean(axis=1)
    found = find_speakers(mono, rate, [Span(a, b) for a, b in result.report["analysis"]["speech_regions"]], embed)
    c0, c1 = found.centroid(0), found.centroid(1)
    for a, b in spans:
        for s in windows([Span(a, b)], 1.5) or [Span(a, b)]:
            e = np.asarray(embed(mono[int(s.start * rate):int(s.end * rate)], rate), np.float64).reshape(-1)
            e = e / np.linalg.norm(e)
            assert e @ c0 > e @ c1
    other = prepare_clip(path, target=4.0, embed=embed, speaker=1)  # the other speaker, on request
    v2 = {_voice_at(turns, (a + b) / 2) for a, b in other.report["window"]["spans"]}
    assert v2 == {"en+f4"}


def test_two_voices_taking_turns_give_a_window_from_one(dialogue):
    """The clustering and the window on a real recording, with a plain spectral embedder."""
    _check_window(*dialogue, spectral_embedding)


def test_one_voice_is_one_speaker(dialogue):
    from voice_lab.decode import decode
    from voice_lab.silence import Span
    from voice_lab.speakers import find_speakers

    path, turns = dialogue
    x, rate = decode(path)
    mine = [Span(a, b) for a, b, v in turns if v == "en+m3"]
    assert find_speakers(x.mean(axis=1), rate, mine, spectral_embedding).count == 1


def test_engine_embedder_tells_two_voices_apart(dialogue, engine):
    """The app's and `lab`'s embedder: CAMPPlus's x-vector (even with random weights its
    within-voice cosines, ~0.99998, stand clear of the between-voice ones, ~0.9990; the random
    VoiceEncoder's do not: every segment gets the same embedding)."""
    _check_window(*dialogue, engine.speaker_xvector)


def test_lab_reports_the_speakers(dialogue, tmp_path):
    import sys

    path, _turns = dialogue
    model = str(model_path("nano", "q4_0"))
    out = str(tmp_path / "clip.wav")
    env = {**os.environ, **NO_ENCODER}
    r = subprocess.run([sys.executable, "-m", "app", "lab", path, "-o", out, "--target", "5", "-m", model],
                       capture_output=True, text=True, timeout=600, check=False, env=env)
    assert r.returncode == 0, r.stderr
    assert "speaker   1:" in r.stdout and " found (separation " in r.stdout
    assert "told apart by the model's CAMPPlus x-vectors" in r.stdout
    with open(out[:-4] + ".lab.json", encoding="utf-8") as f:
        report = json.load(f)
    assert report["speakers"]["chosen"] == 1 and report["speakers"]["count"] >= 1
    r = subprocess.run([sys.executable, "-m", "app", "lab", path, "-o", out, "--target", "5"],
                       capture_output=True, text=True, timeout=600, check=False, env=env)
    assert r.returncode == 0 and "speakers  not analysed: without a speaker encoder" in r.stdout


# ------------------------------------------------------------------ real recordings, trained encoder

def test_real_man_and_woman_give_one_voice_windows(speaker_encoder, harvard):
    """Each speaker's clone window holds that speaker only (by pitch), and both are offered."""
    from voice_lab.lab import prepare_clip

    first = prepare_clip(harvard, target=10.0, embed=speaker_encoder.embed)
    sp = first.report["speakers"]
    assert sp["count"] == 2, sp
    assert rs.voices_by_pitch(harvard, first.report["window"]["spans"]) == {"woman"}      # the one with more speech
    # the man is offered too, with his own spans; his 4.2 s are too little to clone alone
    assert [rs.voices_by_pitch(harvard, s["spans"]) for s in sp["speakers"]] == [{"woman"}, {"man"}]
    from voice_lab.errors import TooLittleSpeechError

    with pytest.raises(TooLittleSpeechError, match="speech"):
        prepare_clip(harvard, target=10.0, embed=speaker_encoder.embed, speaker=1)


def test_real_one_voice_is_one_speaker(speaker_encoder):
    """A long recording of one radio amateur (codec2's ve9qrp, 8 kHz, 112 s): one speaker."""
    from voice_lab.silence import detect_silence, speech_regions
    from voice_lab.speakers import find_speakers

    try:
        x, sr = rs.read(rs.codec2("wav/ve9qrp.wav"))
    except rs.FetchError as e:
        pytest.skip(str(e))
    x = x[: 40 * sr]
    regions = speech_regions(detect_silence(x.reshape(-1, 1), sr, -30, 0.3), x.size / sr)
    assert find_speakers(x, sr, regions, speaker_encoder.embed).count == 1


def test_lab_names_real_speakers_and_times(speaker_encoder, harvard, tmp_path):
    import sys

    out = str(tmp_path / "clip.wav")
    r = subprocess.run([sys.executable, "-m", "app", "lab", str(harvard), "-o", out, "--speaker-encoder",
                        speaker_encoder.path], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    assert "told apart by the GE2E speaker encoder" in r.stdout
    assert "speaker   1: " in r.stdout and "speaker   2: " in r.stdout and "speakers  2 found" in r.stdout
    with open(out[:-4] + ".lab.json", encoding="utf-8") as f:
        report = json.load(f)
    assert report["speakers"]["encoder"].startswith("the GE2E speaker encoder")
    assert rs.voices_by_pitch(harvard, report["window"]["spans"]) == {"woman"}


def _known_seconds(spans, known) -> dict[str, float]:
    """Seconds of each known speaker inside the spans (the package's own times)."""
    out: dict[str, float] = {}
    for a, b in spans:
        for s, e, who in known:
            if min(b, e) > max(a, s):
                out[who] = out.get(who, 0.0) + min(b, e) - max(a, s)
    return out


def test_real_compilation_of_talkers_gives_one_talker_windows(speaker_encoder):
    """codec2's wav/all.wav: eight talkers one after another (men and women; several men). Two
    speakers are offered (MAX_SPEAKERS), each a group of talkers; each one's clone window holds
    one talker only, by the package's own times of each talker (tests/helpers/real_speech.py)."""
    from voice_lab.lab import prepare_clip

    try:
        path, known = rs.codec2_compilation()
    except rs.FetchError as e:
        pytest.skip(str(e))
    first = prepare_clip(str(path), target=10.0, embed=speaker_encoder.embed)
    sp = first.report["speakers"]
    assert sp["count"] == 2, sp
    talkers = []
    for k in range(2):
        r = first if k == 0 else prepare_clip(str(path), target=10.0, embed=speaker_encoder.embed, speaker=1)
        spans = r.report["window"]["spans"]
        held = {who: s for who, s in _known_seconds(spans, known).items() if s > 0.05}
        assert len(held) == 1 and sum(b - a for a, b in spans) > 5.0, (k, spans, held)
        talkers += list(held)
    assert talkers[0] != talkers[1]


@pytest.mark.xfail(strict=True, reason="the trained encoder keeps pyannote's two women one speaker (split centroids "
                                       "0.89; one person's speech splits up to 0.82-0.995) and the window then "
                                       "straddles a turn")
def test_real_two_women_conversation_window(speaker_encoder):
    """pyannote's sample: two women in a quick conversation, their turns in the package's RTTM.
    The clone window should hold one of them (by the RTTM's times); today it does not (see the
    mark): a strict expected failure, so the day it holds one this test says so. No statistic
    measured yet puts the women's split beyond every one-person recording's (centroid cosines at
    2 s and 1 s windows, the confident windows' centroids, the split projection's change inside a
    speech region, MFCC delta-BIC of the two sides): `benchmarks/bench_speakers.py split`."""
    from voice_lab.lab import prepare_clip

    try:
        wav, turns = rs.pyannote_sample()
    except rs.FetchError as e:
        pytest.skip(str(e))
    r = prepare_clip(str(wav), target=10.0, embed=speaker_encoder.embed)
    held = _known_seconds(r.report["window"]["spans"], turns)
    assert len([s for s in held.values() if s > 0.25]) == 1, (r.report["speakers"]["count"], held)
