"""The app's engine-free parts: typed settings, the ring buffer and the player's pre-roll on the
real audio stack (ALSA null device), live-typing sentence detection, take export."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QByteArray, QSettings, Qt  # noqa: E402


def test_settings_are_typed_and_persist(tmp_path):
    from app.qt.settings import Settings

    path = str(tmp_path / "s.ini")
    s = Settings(QSettings(path, QSettings.IniFormat))
    # sampling options default to None: the loaded model's own defaults (engine_native.options)
    assert s.temperature is None and s.threads == 0 and s.model_choice_made is False
    s.temperature, s.threads, s.model_choice_made = 0.55, 3, True
    s.model_path, s.geometry = "/m/x.gguf", QByteArray(b"\x01\x02")
    s.sync()
    t = Settings(QSettings(path, QSettings.IniFormat))  # a new process would see this
    assert (t.temperature, t.threads, t.model_choice_made, t.model_path) == (0.55, 3, True, "/m/x.gguf")
    assert isinstance(t.temperature, float) and isinstance(t.threads, int) and isinstance(t.model_choice_made, bool)
    assert bytes(t.geometry) == b"\x01\x02"
    t.qsettings.setValue("sampling/top_k", "garbage")  # junk on disk falls back to the default
    assert t.top_k is None
    t.qsettings.setValue("sampling/top_k", "1e30")  # so does a value outside the schema's range
    assert t.top_k is None
    t.top_k = 50
    assert t.top_k == 50 and isinstance(t.top_k, int)
    assert t.sampling()["temperature"] == 0.55


def test_ring_buffer_wraps_and_grows():
    from app.core.player import RingBuffer

    rb = RingBuffer(capacity=8)
    out = np.zeros(5, np.float32)
    rb.push(np.arange(6, dtype=np.float32))
    assert rb.pull(out) == 5 and list(out) == [0, 1, 2, 3, 4]
    rb.push(np.arange(6, 12, dtype=np.float32))  # wraps around the end
    rb.push(np.arange(12, 20, dtype=np.float32))  # grows past the capacity
    got = np.zeros(30, np.float32)
    n = rb.pull(got)
    assert n == 15 and list(got[:n]) == list(range(5, 20))
    rb.push(np.ones(3, np.float32))
    rb.clear()
    assert len(rb) == 0


def test_preroll_follows_the_measured_speed():
    from app.core.player import MIN_PREROLL_S, Player

    p = Player(24000)
    p._speed = 2.0  # faster than real time: start almost at once
    p._expected_s = 10.0
    assert p._compute_preroll() == MIN_PREROLL_S
    p._speed = 0.5  # half real time: 10 s still to come needs >= 10 s buffered
    assert p._compute_preroll() == pytest.approx(10.0 * 0.5 / 0.5 * 1.15)
    p._expected_s = 0.0  # nothing more to come: play what there is
    assert p._compute_preroll() == MIN_PREROLL_S


def test_slow_generation_never_underruns_on_the_real_audio_stack():
    """Feed 2.4 s of audio at 0.6x real time: playback starts late but never runs dry."""
    from app.core.player import Player

    rate = 24000
    p = Player(rate)
    p.begin_segment(2.4)
    chunk_s, speed = 0.3, 0.6
    t0 = time.monotonic()
    for _ in range(8):
        time.sleep(chunk_s / speed)
        p.feed(np.full(int(chunk_s * rate), 0.01, np.float32), compute_s=chunk_s / speed)
    p.end_segment()
    while not p.snapshot().drained and time.monotonic() - t0 < 15:
        time.sleep(0.02)
    st = p.snapshot()
    assert st.error is None, st.error
    assert st.drained and st.played_s == pytest.approx(2.4, abs=1e-3)
    assert st.underruns == 0
    # it really played in real time after the pre-roll (the null sink is paced by the player)
    assert time.monotonic() - t0 >= 2.4 / speed


def test_fast_generation_starts_early_and_stop_flushes():
    from app.core.player import Player

    p = Player(24000)
    p.begin_segment(3.0)
    p.feed(np.zeros(24000, np.float32), compute_s=0.1)  # 10x real time
    t0 = time.monotonic()
    while p.snapshot().played_s == 0 and time.monotonic() - t0 < 2:
        time.sleep(0.01)
    assert 0 < p.snapshot().played_s < 1.0  # started before the segment was complete
    p.stop()
    st = p.snapshot()
    assert st.buffered_s == 0 and not st.playing


@pytest.mark.parametrize("text,start,expected,mark", [
    ("Hello there. How are", 0, ["Hello there."], 12),
    ("Wait!\nNext line\nand", 0, ["Wait!", "Next line"], 16),
    ("He said “hi.” Then", 0, ["He said “hi.”"], 13),
    ("Done. Again. ", 6, ["Again."], 12),
    ("No end yet", 0, [], 0),
])
def test_live_typing_sentence_boundaries(text, start, expected, mark):
    from app.qt.live_typing import split_completed

    got, new_mark = split_completed(text, start)
    assert [s for s, _a, _b in got] == expected
    assert new_mark == mark
    for s, a, b in got:
        assert text[a:b] == s


def test_live_typing_edits_before_the_mark_do_not_respeak(qtbot):
    from PySide6.QtWidgets import QPlainTextEdit

    from app.qt.live_typing import LiveTyping

    edit = QPlainTextEdit()
    qtbot.addWidget(edit)
    live = LiveTyping(edit)
    live.set_enabled(True)
    said = []
    live.sentenceTyped.connect(lambda s, a, b: said.append(s))
    qtbot.keyClicks(edit, "First one. Second")
    edit.moveCursor(edit.textCursor().MoveOperation.Start)
    qtbot.keyClicks(edit, "Oh. ")  # typed before the mark: nothing spoken again
    edit.moveCursor(edit.textCursor().MoveOperation.End)
    qtbot.keyClicks(edit, ". Third")
    qtbot.keyClick(edit, Qt.Key_Return)
    assert said == ["First one.", "Second.", "Third"]


def test_export_all_formats_exact_length(tmp_path):
    import soundfile as sf

    from app.core.take import ExportError, export_audio

    x = (0.3 * np.sin(np.arange(24000 + 777) / 7.0)).astype(np.float32)
    for ext in ("wav", "flac", "ogg", "mp3"):
        out = tmp_path / f"a.{ext}"
        export_audio(x, 24000, str(out))
        y, sr = sf.read(str(out), dtype="float32")
        assert sr == 24000 and abs(len(y) - x.size) <= (0 if ext in ("wav", "flac") else 1152), (ext, len(y))
    with pytest.raises(ExportError, match="choose one of"):
        export_audio(x, 24000, str(tmp_path / "a.xyz"))
    with pytest.raises(ExportError, match="does not exist"):
        export_audio(x, 24000, str(tmp_path / "missing" / "a.wav"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.flac", "a.mp3", "a.ogg", "a.wav"]  # no temp files
