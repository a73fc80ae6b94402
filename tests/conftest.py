"""Test-wide setup.

The tests exercise the *installed* package (its compiled engine_native._core lives in
site-packages, not in the source tree). pytest puts the repository root first on
sys.path, where the source folders would shadow the installed packages, so move it
to the end: `engine_native`, `app`, `voice_lab` resolve to the installation, while
`tests.reference` still imports from the tree.
"""

import os
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != ROOT] + [ROOT]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


import gc  # noqa: E402
import subprocess  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _watermark_model():
    """Every engine marks its audio (the default, as in the app): the suite's engines, command
    lines and servers find the Perth model through $CBS_WATERMARK_MODEL (a given one is kept)."""
    from engine_native.watermark import MODEL_ENV

    if not os.environ.get(MODEL_ENV):
        from tests.helpers.models import watermark_model_path

        os.environ[MODEL_ENV] = str(watermark_model_path())
    yield os.environ[MODEL_ENV]


@pytest.fixture(autouse=True, scope="module")
def _release_memory_after_each_module():
    """Engines are module fixtures; a Stream's generator and its Engine can form a reference
    cycle, which Python's collector does not hurry to free because the native weights it
    holds are invisible to its thresholds. Collect at the end of every module (after its
    fixtures are finalised) and hand free heap back, so one module's models never stack on
    the next one's in the suite's one process."""
    yield
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


TURNS = [("en+m3", 90, "the quick brown fox jumps over the lazy dog and keeps on running far away"),
         ("en+f4", 99, "she sells sea shells by the sea shore while the gulls circle overhead"),
         ("en+m3", 90, "a journey of a thousand miles begins with one small step forward today"),
         ("en+f4", 99, "every voice has a colour of its own that listeners recognise at once"),
         ("en+m3", 90, "the lighthouse keeper climbed the spiral stairs one last time tonight")]


def _say(folder, i, voice, pitch, text):
    import soundfile as sf

    path = os.path.join(folder, f"turn{i}.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", "150", "-w", path, text],
                   check=True, capture_output=True)
    x, sr = sf.read(path, dtype="float32")
    return x / np.max(np.abs(x)) * 0.5, sr


@pytest.fixture(scope="module")
def dialogue(tmp_path_factory):
    """(path, [(start, end, voice)]) of a recording of two voices taking turns, 0.8 s apart."""
    import soundfile as sf

    folder = str(tmp_path_factory.mktemp("speakers"))
    parts, turns, t = [], [], 0.5
    rate = None
    for i, (voice, pitch, text) in enumerate(TURNS):
        x, rate = _say(folder, i, voice, pitch, text)
        if not parts:
            parts.append(np.zeros(int(0.5 * rate), np.float32))
        parts += [x, np.zeros(int(0.8 * rate), np.float32)]
        turns.append((t, t + x.size / rate, voice))
        t += x.size / rate + 0.8
    path = os.path.join(folder, "dialogue.wav")
    sf.write(path, np.concatenate(parts), rate)
    return path, turns


@pytest.fixture(scope="module")
def speaker_encoder():
    """The trained GE2E speaker encoder (engine_native.speaker_encoder) over Resemblyzer's
    weights, fetched from PyPI and converted once (tests/helpers/real_speech.py)."""
    from engine_native.speaker_encoder import SpeakerEncoder
    from tests.helpers import real_speech as rs

    try:
        return SpeakerEncoder(rs.speaker_encoder())
    except rs.FetchError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def harvard():
    """codec2's recording of a man and a woman reading Harvard sentences in turn (16 kHz):
    its path (Debian codec2-examples)."""
    from tests.helpers import real_speech as rs

    try:
        return rs.codec2("raw/speech_orig_16k.wav")
    except rs.FetchError as e:
        pytest.skip(str(e))
