"""The app's Voice Lab on a real two-speaker recording with the trained GE2E speaker encoder:
no model loaded (the encoder needs none), the picker offers both speakers, the window lies in
the chosen speaker's speech (by pitch, which owes nothing to the encoder), and the lab says
which encoder told them apart - or, without one, what it could not check."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from tests.helpers import real_speech as rs  # noqa: E402
from tests.helpers.main_window import _close, _make_window, _wait  # noqa: E402

from app.qt.gui import qt_problem  # noqa: E402

if qt_problem():
    pytest.fail(qt_problem(), pytrace=False)


@pytest.fixture
def lab_window(qapp, tmp_path):
    w = _make_window(tmp_path)
    w.resize(1100, 700)
    w.show()
    yield w
    _close(w)


def test_voice_lab_offers_each_real_speaker_with_the_trained_encoder(lab_window, speaker_encoder, harvard, qtbot,
                                                                      monkeypatch):
    monkeypatch.setenv("CBS_SPEAKER_ENCODER", speaker_encoder.path)
    w = lab_window
    assert w.client.info is None                                  # no model loaded
    w.open_voice_lab(str(harvard))
    _wait(qtbot, lambda: w.lab.session.speakers is not None and w.lab.session.busy == "", 60,
          "the analysis and the speaker search")
    lab, s = w.lab, w.lab.session
    assert s.speakers.count == 2 and lab.speakers_label.text() == "2 speakers (GE2E encoder)"
    assert s.speakers_by.trained and "GE2E speaker encoder" in lab.speakers_label.toolTip()
    assert lab.speaker_combo.isVisibleTo(lab) and lab.speaker_combo.count() == 2
    # each speaker's speech, as coloured and offered, is one voice, and the two differ
    assert [rs.voices_by_pitch(harvard, [(p.start, p.end) for p in s.speakers.spans_of(k)]) for k in (0, 1)] == [{"woman"}, {"man"}]
    # speaker 1 (the most speech): the window lies in her speech only
    assert s.window_seconds > 5.0 and rs.voices_by_pitch(harvard, s.windows) == {"woman"}
    theirs = [(p.start, p.end) for p in s.speakers.spans_of(0)]
    assert all(any(a - 1e-6 <= u < v <= b + 1e-6 for a, b in theirs) for u, v in s.windows), (s.windows, theirs)
    # speaker 2, picked: his 4.2 s are too little to clone, and the window is never hers
    lab.speaker_combo.setCurrentIndex(1)
    lab.speaker_combo.activated.emit(1)
    assert s.speaker == 1 and s.windows == [] and "speaker 2: " in lab.clone_status.text()
    assert not lab.clone_button.isEnabled()
    lab.speaker_combo.setCurrentIndex(0)
    lab.speaker_combo.activated.emit(0)
    assert rs.voices_by_pitch(harvard, s.windows) == {"woman"} and lab.clone_button.isEnabled()


def test_voice_lab_without_a_speaker_encoder_says_what_it_could_not_check(lab_window, harvard, qtbot, monkeypatch):
    from app.core.speaker_identity import NOT_CHECKED

    monkeypatch.setenv("CBS_SPEAKER_ENCODER", "/nonexistent/speaker-encoder.gguf")
    w = lab_window
    w.open_voice_lab(str(harvard))
    _wait(qtbot, lambda: w.lab.session.analysis is not None and w.lab.speakers_label.text(), 60, "the analysis")
    _wait(qtbot, lambda: w.lab.session.busy == "", 30, "the speaker search")
    assert w.lab.speakers_label.text() == "Speakers not checked (no speaker encoder)"
    assert NOT_CHECKED in w.lab.speakers_label.toolTip() and "scripts/setup.sh" in w.lab.speakers_label.toolTip()
    assert w.lab.session.speakers is None and w.lab.session.windows        # the window from all the speech
    assert not w.lab.speaker_combo.isVisibleTo(w.lab)
