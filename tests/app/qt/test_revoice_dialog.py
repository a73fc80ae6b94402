"""Re-voice with… (app/qt/revoice_dialog.py) in the main window, with the real engine (Nano Q4_0)
and real recordings (codec2's hts1a, 3 s; pyannote's 30 s conversation): read off the GUI
thread, converted and played as it streams, exported, cancelled; the GUI thread never blocks."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import Qt  # noqa: E402

from tests.helpers import real_speech  # noqa: E402
from tests.helpers.main_window import STREAM, TimerProbe, _close, _make_window, _wait, load_and_wait  # noqa: E402

from app.qt.gui import qt_problem  # noqa: E402

if qt_problem():
    pytest.fail(qt_problem(), pytrace=False)


@pytest.fixture(scope="module")
def studio(qapp, tmp_path_factory):
    from tests.helpers.models import model_path

    w = _make_window(tmp_path_factory.mktemp("studio"))
    w.show()
    w.controller.stream_options = dict(STREAM)
    load_and_wait(w, str(model_path("nano", "q4_0")))
    w.toolbar.preset_combo.setCurrentText("Low latency")  # one CFM step, 4 s of voice prompt
    yield w
    _close(w)


def _recording(name: str) -> str:
    try:
        return str(real_speech.codec2(name) if name.startswith("wav/") else real_speech.pyannote_sample()[0])
    except real_speech.FetchError as e:
        pytest.skip(str(e))


def test_revoice_plays_as_it_converts_and_exports(studio, qtbot, tmp_path):
    import soundfile as sf

    w = studio
    d = w.revoice_recording(_recording("wav/hts1a.wav"))
    _wait(qtbot, lambda: d.samples is not None, 60, "the recording to be read")
    assert "hts1a.wav (3.0 s)" in d.source_label.text() and d.convert.isEnabled() and not d.export.isEnabled()
    probe = TimerProbe()
    probe.start()
    arrivals = []
    w.controller.takeChanged.connect(lambda t: arrivals.append(t.frames))
    qtbot.mouseClick(d.convert, Qt.LeftButton)
    assert d.stop.isEnabled() and not d.convert.isEnabled()
    take = d.take
    _wait(qtbot, lambda: take.complete, 300, "the conversion")
    probe.stop()
    probe.check("while re-voicing")
    assert len(arrivals) >= 2 and arrivals == sorted(arrivals)  # streamed: chunk after chunk
    assert abs(take.duration - 3.0) < 0.05 and np.sqrt(np.mean(take.samples ** 2)) > 1e-3
    assert w.takes.current is take and take.text == f"hts1a.wav, re-voiced as {d.voice_combo.currentText()}"
    assert d.progress.value() == 1000 and "done" in d.status.text() and d.export.isEnabled()
    out = tmp_path / "revoiced.wav"
    w.takes.export_take(str(out))
    _wait(qtbot, out.exists, 60, "the export")
    y, rate = sf.read(out)
    assert rate == w.client.sample_rate and abs(y.size / rate - 3.0) < 0.05
    d.close()


def test_stop_cancels_a_long_conversion(studio, qtbot):
    w = studio
    d = w.revoice_recording(_recording("pyannote"))
    _wait(qtbot, lambda: d.samples is not None, 60, "the recording to be read")
    qtbot.mouseClick(d.convert, Qt.LeftButton)
    take, job = d.take, w.controller.jobs[0]
    _wait(qtbot, lambda: take.frames > 0, 300, "the first audio")
    qtbot.mouseClick(d.stop, Qt.LeftButton)
    assert job.cancelled and take.complete and not d.stop.isEnabled() and d.convert.isEnabled()
    frames = take.frames
    _wait(qtbot, lambda: job.finished, 120, "the engine to let the job go")
    time.sleep(0.2)
    qtbot.wait(100)
    assert take.frames == frames and take.duration < 29.0  # nothing after Stop
    d.close()


def test_the_voice_lab_offers_re_voice(studio, qtbot):
    from app.qt.revoice_dialog import RevoiceDialog

    w = studio
    path = _recording("wav/hts1a.wav")
    w.open_voice_lab(path)
    before = len(w.findChildren(RevoiceDialog))
    _wait(qtbot, lambda: w.lab.session.path == path, 30, "the Voice Lab to open the recording")
    qtbot.mouseClick(w.lab.revoice_button, Qt.LeftButton)
    dialogs = w.findChildren(RevoiceDialog)
    assert len(dialogs) == before + 1 and dialogs[-1].path == path
    _wait(qtbot, lambda: dialogs[-1].samples is not None and w.lab.session.analysis is not None, 60,
          "the recording to be read and analysed")
    dialogs[-1].close()
    w.show_studio()


def test_a_voice_picked_in_the_dialog_is_readied_and_the_toolbars_again_on_close(studio, qtbot):
    """The engine keeps one voice readied for streaming (its cached stream prefix): the dialog
    readies the voice picked in it, so that conversion's first audio does not pay for the prefix,
    and on close readies the toolbar's voice again for the next Play."""
    w = studio
    engine = w.client.worker.engine
    v = engine.builtin_voice
    other = type(v)(speaker_emb=v.speaker_emb, cond_prompt_speech_tokens=v.cond_prompt_speech_tokens,
                    embedding=v.embedding, prompt_token=v.prompt_token[:-10], prompt_feat=v.prompt_feat[:-20],
                    variant=v.variant, meta={})  # a shorter prompt: another voice as the prefix cache sees it
    path = w.store.add(other, "Shorter prompt")
    w.library.reload()
    _wait(qtbot, lambda: not w.library.busy and w.toolbar.voice_combo.findData(path) >= 0, 60, "the library read")
    flow = engine.stages.flow

    def readied():  # the engine's background jobs done: the one cached prefix
        return not (w.client.waiting or w.client.pending) and len(flow.cached_prefixes) == 1

    _wait(qtbot, readied, 120, "the toolbar's voice readied")
    toolbar_key = next(iter(flow.cached_prefixes))
    d = w.revoice_recording(_recording("wav/hts1a.wav"))
    d.voice_combo.setCurrentIndex(d.voice_combo.findData(path))
    _wait(qtbot, lambda: readied() and toolbar_key not in flow.cached_prefixes, 120, "the dialog's voice readied")
    d.close()
    _wait(qtbot, lambda: readied() and toolbar_key in flow.cached_prefixes, 120, "the toolbar's voice readied again")
