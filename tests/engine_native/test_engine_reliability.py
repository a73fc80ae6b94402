"""Hostile and unusual input (issue 18): each class of failure gets a clear error, nothing is
lost, nothing is silently cut — through the API and the command line.

Nano Q4_0 (the smallest random model), small token budgets. Random weights never draw
the stop token, so every sentence runs to max_tokens and lengths are exact.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import soundfile as sf

from engine_native import EmptyTextError, Engine, ParameterError, SilentAudioError, Voice, VoiceError
from engine_native.text import MAX_TEXT_CHARS
from tests.helpers.models import model_path

N = 6  # speech tokens per sentence


@pytest.fixture(scope="module")
def model():
    return str(model_path("nano", "q4_0"))


@pytest.fixture(scope="module")
def engine(model):
    return Engine(model, threads=2)


def _len(engine, n_sentences: int, n_tokens: int = N) -> int:
    return n_sentences * (n_tokens + 3) * 960  # 3 silence tokens per sentence, 960 samples a token


def _in_threads(run, n: int = 2) -> None:
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, timeout=600, **kw)


# 1. Text of any size -------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_a_huge_paste_streams_at_once(engine):
    unit = "This is a sentence, Mr. Jones said. "
    big = unit * (1_000_000 // len(unit))           # 1 MB (test_text.py: its split is linear)
    stream = engine.stream(big, seed=1, max_tokens=N)   # returns at once; the split runs lazily
    stream.cancel()
    assert list(stream) == []
    with pytest.raises(ParameterError, match="at most"):
        engine.synthesize("a" * (MAX_TEXT_CHARS + 1))
    first = next(iter(engine.stream(big[:20_000], seed=1, max_tokens=N)))
    assert first.n_sentences == big[:20_000].count("said.") + 1 and first.text == unit.strip()


def test_cli_say_of_a_big_file_starts_speaking_and_a_closed_pipe_ends_quietly(model, tmp_path):
    book = tmp_path / "book.txt"
    book.write_text("It was a dark and stormy night. " * 40_000)     # 1.3 MB
    r = subprocess.run(f"{sys.executable} -m app say -f {book} -m {model} --max-tokens {N} -o - | head -c 100",
                       shell=True, capture_output=True, timeout=600, cwd=tmp_path)
    assert len(r.stdout) == 100
    assert b"Traceback" not in r.stderr and b"Error" not in r.stderr, r.stderr.decode()


# 2. Two callers on one Engine -----------------------------------------------------------

def test_two_threads_synthesize_at_once_and_each_gets_its_whole_result(engine):
    texts = ["One. Two. Three.", "Alpha beta. Gamma delta."]
    fast = dict(seed=5, max_tokens=N, prompt_seconds=1.0, cfm_steps=1)  # a short S3Gen prompt: cheap passes
    alone = [engine.synthesize(t, **fast) for t in texts]
    got, errors = [None, None], []

    def run(i):
        try:
            got[i] = engine.synthesize(texts[i], **fast)
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    _in_threads(run)
    assert not errors, errors
    for a, g, n in zip(alone, got, (3, 2)):
        assert g.size == _len(engine, n) and np.array_equal(a, g)


def test_two_streams_from_two_threads_interleave_and_both_complete(engine):
    """Each stream has its own T3 session (KV cache): neither can step the other's."""
    texts = ["First voice speaks. Then more.", "Second one here. And again."]
    opts = dict(seed=9, max_tokens=12, first_chunk_tokens=4, chunk_tokens=4, prompt_seconds=1.0, cfm_steps=1)
    alone = [np.concatenate([c.samples for c in engine.stream(t, **opts)]) for t in texts]
    got, order, errors = [[], []], [], []
    barrier = threading.Barrier(2)

    def run(i):
        try:
            s = engine.stream(texts[i], **opts)
            barrier.wait()
            for c in s:
                got[i].append(c.samples)
                order.append(i)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    _in_threads(run)
    assert not errors, errors
    for i in range(2):
        assert np.array_equal(np.concatenate(got[i]), alone[i])
    switches = sum(1 for a, b in zip(order, order[1:]) if a != b)
    assert switches >= 2, order   # chunk by chunk, in arrival order: neither waited for the other to end


# 3. Numbers of any size -------------------------------------------------------------------

@pytest.mark.parametrize("name,value", [
    ("seed", 2**64), ("top_k", 2**64), ("max_tokens", 2**64), ("cfm_steps", 2**70), ("temperature", 10**400),
    ("top_p", float("inf")), ("min_p", "0.5"), ("seed", True), ("max_tokens", 2.5), ("repetition_penalty", None),
    ("seed", -(2**80)), ("temperature", [1.0]), ("top_k", np.int64(-3)),
])
def test_any_number_is_a_parameter_error_naming_the_option(engine, name, value):
    kwargs = {name: value}
    if value is None:  # None means "the default" for an option; a required positional is different
        return
    with pytest.raises(ParameterError, match=name):
        engine.synthesize("Hello.", **kwargs)


def test_threads_and_sample_rates_of_any_size(model, engine):
    for threads in (0, 257, 2**64, 1.5):
        with pytest.raises(ParameterError, match="threads"):
            Engine(model, threads=threads)
    for rate in (2**64, 0, 44100.5):
        with pytest.raises(ParameterError, match="sample_rate"):
            engine.voice_from_audio(np.zeros(24000 * 6, np.float32), rate)


def test_cli_huge_numbers_give_one_line(model, tmp_path):
    for flag, value in (("--seed", "18446744073709551616"), ("--top-k", "99999999999999999999"),
                        ("--temperature", "1e400"), ("--threads", "300")):
        r = _cli("say", "Hi.", "-m", model, "-o", "x.wav", flag, value, cwd=tmp_path)
        err = r.stderr.decode()
        assert r.returncode != 0 and "Traceback" not in err and flag.lstrip("-").replace("-", "_") in err, err
    assert not (tmp_path / "x.wav").exists()


# 4. Output that cannot be written -----------------------------------------------------------

def _limit_file_size(nbytes: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return apply


@pytest.mark.parametrize("ext", ["wav", "flac", "ogg", "mp3"])
def test_a_write_that_fails_midway_leaves_nothing_and_says_so(model, tmp_path, ext):
    """A full disk, simulated by a file size limit: every encoder's failure is caught (MP3's
    ffmpeg exits 0 after a failed write, so the result is decoded back and measured)."""
    out = tmp_path / f"out.{ext}"
    r = subprocess.run([sys.executable, "-m", "app", "say", "One. Two. Three.", "-m", model, "-o", str(out),
                        "--max-tokens", "20", "--seed", "1"], capture_output=True, timeout=600, cwd=tmp_path,
                       preexec_fn=_limit_file_size(4096))
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err and str(out) in err, err
    assert not out.exists()
    # No temporary file is left; the finished sentences stay in the resume folder (OUT.parts).
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".parts")] == [], list(tmp_path.iterdir())


@pytest.mark.parametrize("ext", ["wav", "flac", "ogg", "mp3"])
def test_every_encoder_failing_on_a_full_disk_is_an_export_error(tmp_path, ext):
    """The encoders themselves (libsndfile, ffmpeg) hitting a full disk, simulated by a file
    size limit: an ExportError naming the file, nothing under the target name, no temp file.
    ffmpeg exits 0 after a failed write: the decode-back check is what catches it."""
    code = ("import sys, numpy as np\n"
            "from app.core.take import ExportError, export_audio\n"
            "x = (0.3 * np.sin(np.arange(24000 * 20) * 0.05)).astype(np.float32)\n"
            "try:\n"
            "    export_audio(x, 24000, sys.argv[1])\n"
            "except ExportError as e:\n"
            "    print(e, file=sys.stderr)\n"
            "    sys.exit(1)\n")
    out = tmp_path / f"take.{ext}"
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, timeout=300,
                       preexec_fn=_limit_file_size(20_000))
    err = r.stderr.decode()
    assert r.returncode == 1 and str(out) in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_export_errors_stale_temps_and_umask(tmp_path):
    from app.core.take import ExportError, export_audio

    x = np.zeros(2400, np.float32)
    with pytest.raises(ExportError, match="does not exist"):
        export_audio(x, 24000, str(tmp_path / "missing" / "a.wav"))
    with pytest.raises(ExportError, match=r"\.xyz"):
        export_audio(x, 24000, str(tmp_path / "a.xyz"))
    stale = tmp_path / ".a.wav.partial-999999-0123abcd.wav"   # left by a process killed mid-write
    stale.write_bytes(b"junk")
    old = os.umask(0o022)
    try:
        export_audio(x, 24000, str(tmp_path / "a.wav"))
    finally:
        os.umask(old)
    assert not stale.exists()
    assert (os.stat(tmp_path / "a.wav").st_mode & 0o777) == 0o644
    assert sf.info(str(tmp_path / "a.wav")).frames == 2400


def test_stdout_into_a_full_device_is_one_line(model, tmp_path):
    with open("/dev/full", "wb") as full:
        r = subprocess.run([sys.executable, "-m", "app", "say", "Hi.", "-m", model, "-o", "-", "--max-tokens", "4"],
                           stdout=full, stderr=subprocess.PIPE, timeout=600, cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err and "standard output" in err, err


def test_bad_output_format_is_refused_before_synthesis(model, tmp_path):
    r = _cli("say", "Hi. " * 500, "-m", model, "-o", "out.xyz", cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 1 and ".xyz" in err and "said" not in err and "Traceback" not in err, err


# 5. Damaged voice files ----------------------------------------------------------------------

def _damaged(engine, tmp_path, **change) -> str:
    v = engine.builtin_voice
    fields = {k: getattr(v, k).copy() for k in ("speaker_emb", "cond_prompt_speech_tokens", "embedding",
                                                "prompt_token", "prompt_feat")}
    fields.update(change)
    path = tmp_path / "damaged.voice.gguf"
    Voice(**fields, variant=v.variant, meta={"name": "damaged"}).save(path)
    return str(path)


def test_damaged_voice_files_are_refused_naming_the_file(engine, tmp_path):
    v = engine.builtin_voice
    nan_emb = v.speaker_emb.copy()
    nan_emb[3] = np.nan
    feat = v.prompt_feat.copy()
    feat[5, 5] = np.inf
    cases = [({"speaker_emb": nan_emb}, "invalid numbers"),
             ({"prompt_feat": feat}, "invalid numbers"),
             ({"speaker_emb": np.zeros_like(v.speaker_emb)}, "zeros"),
             ({"prompt_feat": np.concatenate([v.prompt_feat] * 6)}, "inconsistent"),
             ({"prompt_token": v.prompt_token[:10]}, "inconsistent")]
    for change, message in cases:
        path = _damaged(engine, tmp_path, **change)
        with pytest.raises(VoiceError, match=message) as e:
            engine.synthesize("Hello.", Voice.load(path), max_tokens=N)
        assert "damaged.voice.gguf" in str(e.value)


def test_cli_damaged_voice_is_one_line(engine, model, tmp_path):
    nan_emb = engine.builtin_voice.speaker_emb.copy()
    nan_emb[:] = np.nan
    path = _damaged(engine, tmp_path, speaker_emb=nan_emb)
    r = _cli("say", "Hi.", "-m", model, "--voice", path, "-o", "x.wav", cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 1 and "damaged.voice.gguf" in err and "Traceback" not in err, err


# 6. Recordings that hold no speech -------------------------------------------------------------

def test_noise_without_speech_is_refused_on_every_cloning_path(engine, model, tmp_path):
    rng = np.random.default_rng(0)
    hiss = (10 ** (-80 / 20) * rng.standard_normal(24000 * 8)).astype(np.float32)  # -80 dBFS for 8 s
    with pytest.raises(SilentAudioError, match="no speech found"):
        engine.voice_from_audio(hiss, 24000)
    path = tmp_path / "hiss.wav"
    sf.write(path, hiss, 24000, subtype="FLOAT")
    for args in (["bake", str(path), "-m", model, "-o", "h.voice.gguf"],
                 ["say", "Hi.", "-m", model, "--ref", str(path), "-o", "h.wav"]):
        r = _cli(*args, cwd=tmp_path)
        err = r.stderr.decode()
        assert r.returncode == 1 and "no speech found" in err and "Traceback" not in err, err
    assert not (tmp_path / "h.voice.gguf").exists() and not (tmp_path / "h.wav").exists()


def test_channels_first_arrays_are_recognised(engine):
    from tests.helpers import audio_fixtures as af

    if not af.tools_available():
        pytest.skip("espeak-ng not installed")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        speech = af.speech_stream(d)[: 7 * af.ESPEAK_RATE]
    stereo_first = np.stack([speech, speech])               # (2, n), torchaudio's layout
    a = engine.voice_from_audio(stereo_first, af.ESPEAK_RATE)
    b = engine.voice_from_audio(stereo_first.T.copy(), af.ESPEAK_RATE)
    assert np.array_equal(a.speaker_emb, b.speaker_emb) and a.meta["duration_s"] == pytest.approx(7.0, abs=0.01)


# 7. A context overflow caused by max_tokens -----------------------------------------------------

def test_context_overflow_names_max_tokens(engine):
    limit = engine.info["hparams"]["n_ctx"] - engine.info["hparams"]["speech_cond_prompt_len"] - 1 - 300
    dense = "中文" * 145 + "。"        # one sentence of ~300 characters but far more than 300 text tokens
    with pytest.raises(ParameterError, match="max_tokens") as e:
        engine.synthesize(dense, max_tokens=limit)
    assert "context" in str(e.value)
    with pytest.raises(EmptyTextError):
        engine.synthesize("   ")


def test_the_largest_documented_seed_works_for_a_text_of_many_sentences(engine):
    """Sentence i runs with seed + i (and a retry further still): the documented maximum must
    leave room for them, for the engine and the command line alike."""
    from engine_native.options import option

    top = option("seed").max
    wav = engine.synthesize("One. Two. Three. Four.", seed=top, max_tokens=N, prompt_seconds=1.0, cfm_steps=1)
    assert wav.size == _len(engine, 4)
    chunks = list(engine.stream("Alpha. Beta.", seed=top, max_tokens=N, prompt_seconds=1.0, cfm_steps=1))
    assert sum(c.samples.size for c in chunks) == _len(engine, 2)
    with pytest.raises(ParameterError, match="seed"):
        engine.synthesize("One.", seed=top + 1, max_tokens=N)
