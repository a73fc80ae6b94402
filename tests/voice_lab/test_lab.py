"""Voice Lab: decode/probe, silence detection vs ffmpeg, window choice, chains, loudness, CLI, errors.

Recordings are generated (espeak-ng speech with known silence layout and -60 dBFS noise)
and encoded as wav, flac, mp3 128k, opus 18k and m4a, each as stereo 44.1 kHz and mono 8 kHz.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import audio_fixtures as af  # noqa: E402

import voice_lab  # noqa: E402
from voice_lab import (  # noqa: E402
    CLONING_MIN_SECONDS,
    ChainError,
    EmptyAudioError,
    FfmpegMissingError,
    NoSpeechError,
    NotAudioError,
    TooLittleSpeechError,
    VoiceLabError,
)
from voice_lab import chain as vchain  # noqa: E402
from voice_lab import decode as vdecode  # noqa: E402
from voice_lab import ffmpeg_run  # noqa: E402
from voice_lab.loudness import integrated_lufs, true_peak_db  # noqa: E402
from voice_lab.silence import Span, detect_silence, speech_regions  # noqa: E402
from voice_lab.window import choose_window  # noqa: E402

needs_tools = pytest.mark.skipif(not af.tools_available(), reason="needs ffmpeg, ffprobe and espeak-ng")

# (format, layout) -> expected automatic preset. mp3 at 8 kHz is MPEG-2.5, whose
# ceiling is 64 kbps (lame clamps 128k); AAC at 8 kHz mono tops out near 40 kbps.
EXPECTED_PRESET = {
    ("wav", "stereo44k"): "clean", ("wav", "mono8k"): "clean",
    ("flac", "stereo44k"): "clean", ("flac", "mono8k"): "clean",
    ("mp3_128k", "stereo44k"): "clean", ("mp3_128k", "mono8k"): "lossy",
    ("opus_18k", "stereo44k"): "lossy", ("opus_18k", "mono8k"): "lossy",
    ("m4a", "stereo44k"): "clean", ("m4a", "mono8k"): "lossy",
}
EXPECTED_CODEC = {"wav": "pcm_s16le", "flac": "flac", "mp3_128k": "mp3", "opus_18k": "opus", "m4a": "aac"}
CASES = [(f, lay) for lay, _, _ in af.LAYOUTS for f, _, _ in af.FORMATS]
IDS = [f"{f}-{lay}" for f, lay in CASES]


@pytest.fixture(scope="session")
def fx(tmp_path_factory):
    if not af.tools_available():
        pytest.skip("needs ffmpeg, ffprobe and espeak-ng")
    d = str(tmp_path_factory.mktemp("voice_lab_audio"))
    rec = af.build_recording(d)
    src = af.write_wav(os.path.join(d, "source.wav"), rec)
    files = {}
    for lay, rate, ch in af.LAYOUTS:
        for name, ext, args in af.FORMATS:
            files[(name, lay)] = af.encode(src, os.path.join(d, f"{name}_{lay}.{ext}"), rate, ch, args)
    return {"dir": d, "rec": rec, "src": src, "files": files}


@pytest.fixture(scope="session")
def prepared(fx):
    """prepare_clip (defaults) for every encoded file, computed once."""
    from voice_lab.lab import prepare_clip

    return {k: prepare_clip(p) for k, p in fx["files"].items()}


# ---------------------------------------------------------------- probe / decode

@needs_tools
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_probe_and_decode(fx, case):
    fmt, lay = case
    rate, ch = {n: (r, c) for n, r, c in af.LAYOUTS}[lay]
    info = vdecode.probe(fx["files"][case])
    assert info.codec == EXPECTED_CODEC[fmt]
    assert info.channels == ch
    want_rate = 48000 if fmt == "opus_18k" else rate  # Opus always decodes at 48 kHz
    assert info.sample_rate == want_rate
    assert info.bit_rate and info.bit_rate > 0
    assert abs(info.duration - fx["rec"].duration) < 0.2
    x, sr = vdecode.decode(fx["files"][case], info=info)
    assert x.dtype == np.float32 and x.ndim == 2 and x.shape[1] == ch and sr == want_rate
    assert abs(x.shape[0] / sr - fx["rec"].duration) < 0.1
    y, sr2 = vdecode.decode(fx["files"][case], rate=24000, channels=1)
    assert sr2 == 24000 and y.shape[1] == 1 and abs(y.shape[0] / 24000 - fx["rec"].duration) < 0.1


@needs_tools
def test_video_file_audio_track(fx):
    mp4 = af.encode_video(fx["src"], os.path.join(fx["dir"], "video.mp4"))
    info = vdecode.probe(mp4)
    assert info.has_video and info.codec == "aac"
    x, sr = vdecode.decode(mp4, rate=24000, channels=1)
    regions = speech_regions(detect_silence(x, sr), x.shape[0] / sr)
    assert len(regions) == 2


@needs_tools
def test_without_ffmpeg_soundfile_formats_work_others_say_ffmpeg_needed(fx, monkeypatch):
    monkeypatch.setattr(ffmpeg_run, "_which", lambda name: None)
    info = vdecode.probe(fx["files"][("flac", "stereo44k")])
    assert info.probed_with == "soundfile" and info.codec == "flac" and info.channels == 2
    x, sr = vdecode.decode(fx["files"][("wav", "mono8k")], rate=24000, channels=1)
    assert sr == 24000 and abs(x.shape[0] / sr - fx["rec"].duration) < 0.01
    with pytest.raises(FfmpegMissingError, match="needs ffmpeg"):
        vdecode.probe(fx["files"][("m4a", "stereo44k")])
    with pytest.raises(FfmpegMissingError, match="needs ffmpeg"):
        vchain.render(np.zeros(24000, np.float32), 24000, vchain.preset("clean"))


# ---------------------------------------------------------------- silence detection

@needs_tools
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_silence_matches_ffmpeg_silencedetect(fx, case):
    path = fx["files"][case]
    x, sr = vdecode.decode(path)
    ours = detect_silence(x, sr, -30.0, 0.3)
    theirs = af.ffmpeg_silencedetect(path, "-30dB", 0.3)
    dur = x.shape[0] / sr
    theirs = [(s, dur if e is None else e) for s, e in theirs]
    assert len(ours) == len(theirs), (ours, theirs)
    for o, (s, e) in zip(ours, theirs):
        assert abs(o.start - s) <= 0.020 and abs(o.end - e) <= 0.020, (o, s, e)


@needs_tools
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_detected_speech_regions_match_layout(fx, case):
    x, sr = vdecode.decode(fx["files"][case])
    regions = speech_regions(detect_silence(x, sr), x.shape[0] / sr)
    known = fx["rec"].speech
    assert len(regions) == len(known) == 2
    for r, (a, b) in zip(regions, known):
        assert abs(r.start - a) < 0.03 and abs(r.end - b) < 0.03, (r, a, b)


def test_silence_semantics_on_synthetic_signal():
    sr = 1000
    x = np.full((10 * sr, 2), 0.5, np.float32)
    x[1000:1400] = 0.0          # 0.4 s: a silence
    x[3000:3200] = 0.0          # 0.2 s: too short
    x[5000:6000, 0] = 0.0       # only one channel quiet: not a silence
    x[7000:7500] = 0.01         # below -30 dB (0.0316): a silence
    x[9500:] = 0.0              # trailing silence runs to the end
    sil = detect_silence(x, sr, -30.0, 0.3)
    assert [(s.start, s.end) for s in sil] == [(1.0, 1.4), (7.0, 7.5), (9.5, 10.0)]
    reg = speech_regions(sil, 10.0)
    assert [(r.start, r.end) for r in reg] == [(0.0, 1.0), (1.4, 7.0), (7.5, 9.5)]


# ---------------------------------------------------------------- window choice

def test_window_continuous_from_middle_of_longest():
    w = choose_window([Span(0, 3), Span(4, 16), Span(17, 20)], 10.0, CLONING_MIN_SECONDS)
    assert w.method == "continuous" and len(w.spans) == 1
    assert w.spans[0].start == pytest.approx(5.0) and w.spans[0].end == pytest.approx(15.0)


def test_window_joins_best_regions_in_order():
    w = choose_window([Span(0, 2), Span(3, 9), Span(10, 10.3), Span(11, 15)], 10.0, CLONING_MIN_SECONDS)
    assert w.method == "joined"
    assert [(s.start, s.end) for s in w.spans] == [(3, 9), (11, 15)]
    assert w.duration == pytest.approx(10.0)
    w = choose_window([Span(0, 4), Span(5, 9), Span(10, 13)], 10.0, CLONING_MIN_SECONDS)
    assert w.duration == pytest.approx(10.0) and len(w.spans) == 3
    assert w.spans[2].start == pytest.approx(10.5) and w.spans[2].end == pytest.approx(12.5)  # middle of the 3rd


def test_window_errors():
    with pytest.raises(NoSpeechError):
        choose_window([], 10.0, CLONING_MIN_SECONDS)
    with pytest.raises(TooLittleSpeechError, match="cloning needs more than 5.0 s"):
        choose_window([Span(0, 2), Span(3, 5.5)], 10.0, CLONING_MIN_SECONDS)


# ---------------------------------------------------------------- chains

def test_presets_render_to_their_documented_chains():
    assert vchain.preset("clean").to_ffmpeg_filter() == "highpass=f=60,alimiter=limit=0.85:level=disabled:latency=1"
    lossy = vchain.preset("lossy").to_ffmpeg_filter()
    assert lossy == (
        "highpass=f=60,afftdn=nr=6:nf=-50:nt=w,equalizer=f=200:t=h:w=150:g=-1,"
        "equalizer=f=3200:t=h:w=2200:g=2.5,equalizer=f=7500:t=h:w=2500:g=3,"
        "loudnorm=I=-18:TP=-2:LRA=8,alimiter=limit=0.85:level=disabled:latency=1"
    )


def test_chain_json_round_trip_and_editing(tmp_path):
    c = vchain.preset("lossy")
    c.steps[1].enabled = False                       # switch denoise off
    c.steps.append(vchain.Step("gain", {"db": -3}))  # add a step
    c.steps.insert(1, vchain.Step("lowpass", {"f": 9000}))
    text = c.to_json()
    d = json.loads(text)
    assert d["steps"][2] == {"type": "denoise", "enabled": False, "params": {"nr": 6.0, "nf": -50.0}}
    back = vchain.Chain.from_json(text)
    assert back.to_dict() == c.to_dict()
    f = back.to_ffmpeg_filter()
    assert "afftdn" not in f and f.startswith("highpass=f=60,lowpass=f=9000,") and f.endswith("volume=-3dB")
    p = tmp_path / "my.json"
    p.write_text(text)
    assert vchain.resolve(str(p), None)[0].to_dict() == c.to_dict()


def test_chain_validation_errors():
    with pytest.raises(ChainError, match="unknown filter step"):
        vchain.Step("reverb")
    with pytest.raises(ChainError, match="unknown parameter"):
        vchain.Step("highpass", {"freq": 60})
    with pytest.raises(ChainError, match="outside"):
        vchain.Step("limiter", {"limit": 2.0})
    with pytest.raises(ChainError, match="must be a number"):
        vchain.Step("gain", {"db": "loud"})
    with pytest.raises(ChainError, match="not valid JSON"):
        vchain.Chain.from_json("{nope")
    with pytest.raises(ChainError, match="unknown chain"):
        vchain.resolve("bright", None)


@pytest.mark.parametrize("codec,br,want", [
    ("pcm_s16le", 705600, "clean"), ("flac", 400000, "clean"), ("aac", 96000, "clean"),
    ("aac", 95999, "lossy"), ("aac", None, "lossy"), ("mp3", 128000, "clean"), ("mp3", 112000, "lossy"),
    ("opus", 256000, "lossy"), ("vorbis", 320000, "lossy"), ("opus", 18000, "lossy"),
])
def test_choose_preset_rules(codec, br, want):
    info = vdecode.Probe("x", "", codec, 10.0, br, 1, 48000, False, "ffprobe")
    assert vchain.choose_preset(info)[0] == want


# ---------------------------------------------------------------- loudness

def test_loudness_reference_values():
    sr = 48000
    t = np.arange(10 * sr) / sr
    sine = 0.5 * np.sin(2 * np.pi * 997 * t)  # -6.02 dBFS peak sine: -9.03 LUFS (mono, BS.1770)
    assert integrated_lufs(sine, sr) == pytest.approx(-9.03, abs=0.1)
    # fs/4 sine sampled at 45 degrees: sample peak 0.707, true peak 1.0 (0 dBTP)
    x = np.sin(2 * np.pi * (sr / 4) * t[:4800] + np.pi / 4)
    assert np.max(np.abs(x)) == pytest.approx(math.sqrt(0.5), abs=1e-6)
    assert true_peak_db(x, sr) == pytest.approx(0.0, abs=0.2)
    assert integrated_lufs(np.zeros(sr), sr) is None


# ---------------------------------------------------------------- the pipeline

@needs_tools
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_prepare_clip_on_every_format(fx, prepared, case):
    res = prepared[case]
    rep = res.report
    assert res.rate == 24000 and res.samples.dtype == np.float32 and res.samples.ndim == 1
    assert rep["output"]["rate"] == 24000 and rep["output"]["channels"] == 1
    # 6 s + 4 s of speech is less than the 10 s target: both regions, whole, joined
    w = rep["window"]
    assert w["method"] == "joined" and len(w["spans"]) == 2
    for (a, b), (ka, kb) in zip(w["spans"], fx["rec"].speech):
        assert abs(a - ka) < 0.03 and abs(b - kb) < 0.03
    assert abs(res.duration - w["duration"]) < 0.02
    assert res.duration > CLONING_MIN_SECONDS
    assert rep["chain"]["name"] == EXPECTED_PRESET[case] and rep["chain_reason"].startswith("auto")
    assert len(rep["analysis"]["speech_regions"]) == 2
    after = rep["loudness"]["after"]
    if rep["chain"]["name"] == "lossy":
        assert abs(after["integrated_lufs"] - (-18.0)) <= 1.0
        assert after["true_peak_dbtp"] <= -1.0
    assert rep["loudness"]["before"]["integrated_lufs"] is not None
    json.dumps(rep, allow_nan=False)  # the report is plain JSON


@needs_tools
def test_continuous_window_and_forced_lossy_chain(fx):
    from voice_lab.lab import prepare_clip

    res = prepare_clip(fx["files"][("wav", "stereo44k")], target=5.5, chain="lossy")
    w = res.report["window"]
    (a, b), = w["spans"]
    ka, kb = fx["rec"].speech[0]
    mid = (ka + kb) / 2
    assert w["method"] == "continuous" and b - a == pytest.approx(5.5, abs=1e-3)
    assert (a + b) / 2 == pytest.approx(mid, abs=0.01)
    assert abs(res.duration - 5.5) < 0.02
    assert abs(integrated_lufs(res.samples, 24000) - (-18.0)) <= 1.0
    assert res.report["chain_reason"] == "chosen by name"


@needs_tools
def test_target_never_below_cloning_minimum(fx):
    from voice_lab.lab import MIN_CLIP_SECONDS, prepare_clip

    res = prepare_clip(fx["files"][("flac", "mono8k")], target=2.0, chain="clean")
    assert res.duration > CLONING_MIN_SECONDS
    assert res.report["window"]["target"] == pytest.approx(MIN_CLIP_SECONDS)
    assert res.report["window"]["target_requested"] == 2.0


# ---------------------------------------------------------------- bad input

@needs_tools
def test_bad_inputs_give_clear_errors(fx, tmp_path):
    from voice_lab.lab import prepare_clip

    text = tmp_path / "notes.wav"
    text.write_text("this is not audio at all\n" * 50)
    with pytest.raises(NotAudioError, match="not an audio file"):
        prepare_clip(str(text))

    import soundfile as sf

    empty = tmp_path / "empty.wav"
    sf.write(str(empty), np.zeros(0, np.float32), 16000)
    with pytest.raises(EmptyAudioError, match="zero length"):
        prepare_clip(str(empty))

    noise = tmp_path / "room.flac"
    sf.write(str(noise), np.random.default_rng(1).normal(0, 0.002, 5 * 16000), 16000)
    with pytest.raises(NoSpeechError, match="no speech found"):
        prepare_clip(str(noise))

    digital = tmp_path / "zeros.wav"
    sf.write(str(digital), np.zeros(3 * 16000, np.float32), 16000)
    with pytest.raises(NoSpeechError):
        prepare_clip(str(digital))

    short = af.build_recording(fx["dir"], layout=(1.0, 3.0, 1.0))
    short_path = af.write_wav(str(tmp_path / "short.wav"), short)
    with pytest.raises(TooLittleSpeechError, match=r"only 3\.\d+ s of speech.*more than 5\.0 s"):
        prepare_clip(short_path)

    with pytest.raises(VoiceLabError, match="no such file"):
        prepare_clip(str(tmp_path / "missing.mp3"))
    for err in (NotAudioError, EmptyAudioError, NoSpeechError, TooLittleSpeechError, FfmpegMissingError):
        assert issubclass(err, voice_lab.VoiceLabError)


# ---------------------------------------------------------------- CLI

@needs_tools
def test_cli_lab_writes_clip_and_report(fx, tmp_path, capsys):
    import soundfile as sf
    from app.cli import main

    out = tmp_path / "clip.wav"
    assert main(["lab", fx["files"][("opus_18k", "stereo44k")], "-o", str(out)]) == 0
    x, sr = sf.read(str(out), dtype="float32", always_2d=True)
    assert sr == 24000 and x.shape[1] == 1 and sf.info(str(out)).subtype == "FLOAT"
    assert x.shape[0] / sr > CLONING_MIN_SECONDS
    report = json.loads((tmp_path / "clip.lab.json").read_text())
    assert report["chain"]["name"] == "lossy" and report["source"]["codec"] == "opus"
    assert sorted(os.listdir(tmp_path)) == ["clip.lab.json", "clip.wav"]  # no temp files left
    assert "window    joined" in capsys.readouterr().out

    # a user-edited chain file
    c = vchain.preset("clean")
    c.steps.append(vchain.Step("gain", {"db": -6}))
    cfile = tmp_path / "chain.json"
    cfile.write_text(c.to_json())
    out2 = tmp_path / "clip2.wav"
    assert main(["lab", fx["files"][("wav", "mono8k")], "-o", str(out2), "--target", "5.5",
                 "--chain", str(cfile), "--report", str(tmp_path / "r.json")]) == 0
    r2 = json.loads((tmp_path / "r.json").read_text())
    assert r2["chain"] == c.to_dict() and r2["window"]["method"] == "continuous"


@needs_tools
def test_cli_lab_errors_and_bake(fx, tmp_path, capsys):
    from app.cli import main

    bad = tmp_path / "x.mp3"
    bad.write_bytes(b"\x00garbage" * 100)
    assert main(["lab", str(bad), "-o", str(tmp_path / "o.wav")]) == 1
    assert "not an audio file" in capsys.readouterr().err
    assert not (tmp_path / "o.wav").exists()

    assert main(["lab", fx["files"][("wav", "mono8k")], "-o", str(tmp_path / "no" / "o.wav")]) == 1
    assert "does not exist" in capsys.readouterr().err

    rc = main(["lab", fx["files"][("wav", "mono8k")], "-o", str(tmp_path / "o.wav"),
               "--bake", "-m", str(tmp_path / "model.gguf"), "--name", "me"])
    assert rc == 1  # checked before any work: no clip, no voice
    assert "model file not found" in capsys.readouterr().err
    assert not (tmp_path / "o.wav").exists()
    assert main(["lab", fx["files"][("wav", "mono8k")], "-o", str(tmp_path / "o.wav"), "--bake"]) == 1
    assert "--bake needs" in capsys.readouterr().err


@needs_tools
def test_cli_entry_point_runs(fx, tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "chatterbox-studio")
    if not os.path.exists(exe):
        pytest.skip("console script not installed")
    r = subprocess.run([exe, "lab", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--chain" in r.stdout and "--bake" in r.stdout


def test_voice_lab_imports_no_qt_or_torch():
    code = ("import sys, voice_lab, voice_lab.lab, voice_lab.chain, voice_lab.decode, voice_lab.silence, "
            "voice_lab.window, voice_lab.loudness; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'torch', 'torchaudio')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
