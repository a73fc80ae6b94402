"""The first-run tour (app.qt.tour): one screen, shown once by the app (not by windows that tools
and tests make), remembered as shown however it is closed."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QLabel  # noqa: E402

from tests.helpers.main_window import _close, _make_window  # noqa: E402


def test_the_tour_shows_once_and_fits_one_screen(qtbot, tmp_path):
    from app.qt.tour import Tour

    w = _make_window(tmp_path)
    qtbot.addWidget(w)
    w.show()
    assert w.show_tour() is None and not w.settings.tour_shown  # a window made outside the app: no tour
    w.tour_enabled = True
    tour = w.show_tour()
    assert isinstance(tour, Tour) and tour.isVisible() and tour.windowModality() == Qt.WindowModal
    text = " ".join(label.text() for label in tour.findChildren(QLabel))
    for words in ("<b>Voices</b>", "Add voice…", "<b>Type and play</b>", "Play script", "<b>Takes</b>",
                  "Export take…"):
        assert words in text, words
    assert tour.height() <= 600 and tour.width() <= 800  # one screen
    assert w.settings.tour_shown
    tour.reject()  # Esc or the window's close button: dismissed all the same
    assert w.show_tour() is None
    _close(w)
