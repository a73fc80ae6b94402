"""⋯ > "Check a recording for a watermark…" (app/qt/watermark_dialog.py): a recording dropped on
the dialog (or chosen) is checked off the GUI thread, and the dialog shows marked / not marked
with the confidence, or one line on what is wrong with the file."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")
import soundfile as sf  # noqa: E402

from engine_native.watermark import default_watermarker  # noqa: E402
from tests.helpers.main_window import _wait, drop_file  # noqa: E402
from tests.helpers.speech_samples import real_speech  # noqa: E402

from app.qt.gui import qt_problem  # noqa: E402

if qt_problem():
    pytest.fail(qt_problem(), pytrace=False)

RATE = 24000


def test_drop_a_recording_see_the_verdict(qapp, qtbot, tmp_path):
    from app.qt.watermark_dialog import WatermarkCheckDialog

    x = real_speech(3.0, RATE, fetch=False)
    sf.write(tmp_path / "made.wav", default_watermarker().apply(x, RATE), RATE)
    sf.write(tmp_path / "recorded.flac", x, RATE)
    (tmp_path / "notes.txt").write_text("not audio")
    dlg = WatermarkCheckDialog()
    qtbot.addWidget(dlg)
    dlg.show()
    for name, want in (("made.wav", "Marked"), ("recorded.flac", "Not marked"), ("notes.txt", "Cannot check")):
        drop_file(dlg, str(tmp_path / name))
        assert dlg.busy and "Checking" in dlg.verdict.text()   # the GUI thread does not wait for it
        _wait(qtbot, lambda: not dlg.busy, 60, f"the check of {name}")
        text = dlg.verdict.text()
        print(name, "->", text)
        assert want in text and name in text
        if want != "Cannot check":
            assert "confidence 1.00" in text if want == "Marked" else "confidence 0.00" in text
    assert dlg.verdict.text() == "Cannot check notes.txt: is a text file, not an audio file"
