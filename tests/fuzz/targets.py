"""Python-level fuzz targets: every parser of outside bytes written in Python.

Each target takes one input (bytes) and either handles it or refuses it with the error its
module documents (the `refusals`); any other exception, a hang or a runaway allocation is a
finding. They run under atheris (tests/fuzz/run_python.py: coverage-guided, as long as
asked) and in the CI smoke (tests/fuzz/test_fuzz_smoke.py: a few hundred inputs each).

    lexicon   engine_native.lexicon: a pronunciation list file (JSON or TSV; the first byte
              picks the format) loaded, then applied to a text naming its words
    script    engine_native.script: parse_script (tags, pauses, SSML breaks, paragraphs, cast
              lines) with each speaker mode, strip_timed_pauses, chapters, speaker lines
    pickle    engine_native.convert.torch_pickle: a .pt file; odd first byte: the rest is the
              whole file (zip level), even: the rest is data.pkl inside an archive whose
              storage records exist (pickle level)
    voice     engine_native.voice.Voice.load: a .voice.gguf file, then the engine's check of
              the voice against a (tiny) model of its variant
    wav       decoded audio: soundfile reads the bytes as a recording file, then the voice
              recipe's steps up to the native features (mono, resampling, loudness, the 24 kHz
              mel, fbank, VoiceEncoder, CAMPPlus, S3Tokenizer) on a tiny model
"""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable

import numpy as np

SCRATCH = Path(tempfile.mkdtemp(prefix="cbs_fuzz_py_"))
# Seconds of decoded audio the wav target keeps (a longer file costs time, not coverage).
WAV_MAX_SECONDS = 3.0


@dataclass(frozen=True)
class Target:
    name: str
    one_input: Callable[[bytes], None]
    refusals: Callable[[], tuple[type[BaseException], ...]]  # imported lazily

    def __call__(self, data: bytes) -> None:
        try:
            self.one_input(data)
        except self.refusals():
            pass


def _scratch(name: str, data: bytes) -> Path:
    p = SCRATCH / name
    p.write_bytes(data)
    return p


# ------------------------------------------------------------------------------ lexicon
def lexicon_input(data: bytes) -> None:
    from engine_native.lexicon import Lexicon

    if not data:
        return
    suffix = ".json" if data[0] & 1 else ".tsv"
    lex = Lexicon.load(_scratch("lexicon" + suffix, data[1:]))
    words = [w for w, _ in lex.items()]
    text = "Say " + ", ".join(words + [w.upper() for w in words]) + " now."
    spoken, spans = lex.apply(text)
    last = 0
    for ns, ne, os_, oe in spans.edits:
        assert 0 <= os_ <= oe <= len(text) and 0 <= ns <= ne <= len(spoken), (ns, ne, os_, oe)
        assert os_ >= last, "edits out of order"
        last = oe
    for pos in range(len(spoken) + 1):
        assert 0 <= spans.to_original(pos) <= len(text)


def lexicon_refusals():
    from engine_native.lexicon import LexiconError

    return (LexiconError,)


# ------------------------------------------------------------------------------ script
def script_input(data: bytes) -> None:
    from engine_native import script as s

    if not data:
        return
    mode = data[0] % 3
    text = data[1:].decode("utf-8", "replace")
    speakers = (None, True, {"Alice", "Bob", "Mary Ann"})[mode]
    items = s.parse_script(text, speakers=speakers)
    for it in items:
        assert 0 <= it.start <= it.end <= len(text), it
        if isinstance(it, s.Pause):
            assert 0.0 <= it.seconds <= s.MAX_PAUSE_SECONDS, it
        else:
            assert it.text.strip(), it
    s.strip_timed_pauses(text)
    s.chapters(text, "headings" if mode else "blocks")
    for name in s.speaker_names(text)[:3]:
        s.assign_speaker(text, name)
    s.speaker_at(text, len(text) // 2)
    s.speaker_label(text[:40])


def script_refusals():
    from engine_native.errors import ParameterError

    return (ParameterError,)


# ------------------------------------------------------------------------------ torch pickle
# Storage records present in the pickle-level archive: enough for any seed's tensors.
_STORAGE_KEYS = [str(i) for i in range(16)] + ["archive"]


def pickle_input(data: bytes) -> None:
    import zipfile

    from engine_native.convert.torch_pickle import load_pt

    if not data:
        return
    if data[0] & 1:
        path = _scratch("whole.pt", data[1:])
    else:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("archive/data.pkl", data[1:])
            zf.writestr("archive/byteorder", "little")
            for key in _STORAGE_KEYS:
                zf.writestr(f"archive/data/{key}", bytes(range(256)) * 8)
        path = _scratch("pickle.pt", buf.getvalue())
    load_pt(path)


def pickle_refusals():
    from engine_native.convert.torch_pickle import TorchPickleError

    return (TorchPickleError,)


# ------------------------------------------------------------------------------ voice / wav
@cache
def tiny_model_path() -> Path:
    """The tiny Nano model (tests/fuzz/tiny_model.py), written once per process."""
    from tests.fuzz import tiny_model

    return tiny_model.write(SCRATCH / "tiny-nano.gguf", "nano")


@cache
def tiny_engine():
    from engine_native import Engine

    return Engine(tiny_model_path(), device="cpu", threads=1)


def voice_input(data: bytes) -> None:
    from engine_native.voice import Voice

    voice = Voice.load(_scratch("input.voice.gguf", data))
    engine = tiny_engine()
    if voice.variant == engine.variant:
        engine.check_voice(voice)


def voice_refusals():
    from engine_native.errors import VoiceError

    return (VoiceError,)


@cache
def tiny_features():
    """The encoders the voice recipe runs (Engine.voice_from_audio), on the tiny model."""
    from engine_native import _core

    mf = _core.ModelFile(str(tiny_model_path()), device="cpu", threads=1)
    rate = mf.get_int("chatterbox.s3gen.sample_rate")
    return rate, {"mel": _core.Mel24k(mf), "fbank": _core.KaldiFbank(mf), "logmel": _core.S3TokLogMel(mf),
                  "ve": _core.VoiceEncoder(mf), "campplus": _core.CampPlus(mf), "s3tok": _core.S3Tokenizer(mf)}


def wav_input(data: bytes) -> None:
    import soundfile as sf

    from engine_native.audio import norm_loudness, resample_sinc, resample_soxr, usable_mono
    from engine_native.errors import VoiceError

    try:
        info = sf.info(io.BytesIO(data))
        frames = min(info.frames, int(WAV_MAX_SECONDS * max(info.samplerate, 1)))
        samples, rate = sf.read(io.BytesIO(data), frames=frames, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError, TypeError, EOFError, OverflowError):
        return  # what soundfile says of a file it cannot decode: the app reports it as such
    if rate <= 0 or samples.size == 0:
        return
    try:
        mono = usable_mono(samples)  # as Engine.voice_from_audio takes any audio
    except VoiceError:
        return  # refused before any feature (e.g. a file of 33 channels: regressions/wav)
    sr24, enc = tiny_features()
    wav24 = resample_soxr(mono, rate, sr24)
    if wav24.size and np.any(wav24):
        wav24 = norm_loudness(wav24, sr24)
    wav16 = resample_sinc(wav24, sr24, 16000)
    for f in (lambda: enc["mel"].compute(wav24), lambda: enc["fbank"].compute(wav16),
              lambda: enc["logmel"].compute(wav16), lambda: enc["ve"].embed(wav16, threads=1),
              lambda: enc["campplus"].embed(wav16), lambda: enc["s3tok"].tokens(wav16)):
        try:
            out = np.asarray(f())
        except wav_refusals():
            continue
        assert out.size == 0 or out.dtype.kind in "iu" or np.all(np.isfinite(out)), "non-finite features"


def wav_refusals():
    from engine_native.errors import EngineError

    return (EngineError,)


TARGETS = {t.name: t for t in (
    Target("lexicon", lexicon_input, lexicon_refusals),
    Target("script", script_input, script_refusals),
    Target("pickle", pickle_input, pickle_refusals),
    Target("voice", voice_input, voice_refusals),
    Target("wav", wav_input, wav_refusals),
)}
# The modules whose lines count as each target's coverage (atheris instruments them).
MODULES = {
    "lexicon": ["engine_native.lexicon"],
    "script": ["engine_native.script", "engine_native.text"],
    "pickle": ["engine_native.convert.torch_pickle"],
    "voice": ["engine_native.voice", "gguf"],
    "wav": ["engine_native.audio", "soundfile"],
}


def corpus_dir(name: str) -> Path:
    return Path(__file__).resolve().parent / "corpus" / name


def cleanup() -> None:
    for p in SCRATCH.glob("*"):
        p.unlink(missing_ok=True)
    os.rmdir(SCRATCH)
