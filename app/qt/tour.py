"""The first-run tour: one screen, three things (where voices come from, how to type and play,
where takes go), shown once after the first model is in; closing it in any way means it never
shows again (Settings.tour_shown)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout

from app.qt import theme
from app.qt.icons import icon

STEPS = (
    ("voice", "Voices",
     "The library on the left holds your voices; the model's own voice is always there. <b>Add voice…</b> "
     "(or drop any recording or video on the window) opens the Voice Lab, which finds the speech and clones "
     "it in seconds."),
    ("play", "Type and play",
     "Type in the script and press <b>Play script</b> (Ctrl+Enter): speech starts with the first sentence. "
     "<b>Live typing</b> speaks each sentence as you finish it; Esc stops."),
    ("history", "Takes",
     "Every Play is a take, listed under the script: double-click one to hear it again, Ctrl+R regenerates "
     "the sentence at the cursor, and <b>⋯ → Export take…</b> saves it as WAV, FLAC, OGG or MP3."),
)


class Tour(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Getting started")
        self.setFixedWidth(580)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(22, 20, 22, 18)
        lay.setSpacing(12)
        title = QLabel("Three things to know")
        title.setStyleSheet("font-size: 14pt; font-weight: 600;")
        lay.addWidget(title)
        for icon_name, heading, text in STEPS:
            frame = QFrame()
            frame.setObjectName("Card")
            row = QHBoxLayout(frame)
            row.setContentsMargins(12, 10, 12, 10)
            row.setSpacing(12)
            mark = QLabel()
            mark.setPixmap(icon(icon_name, theme.colors().accent).pixmap(28, 28))
            mark.setAlignment(Qt.AlignTop)
            row.addWidget(mark)
            body = QLabel(f"<b>{heading}</b><br>{text}")
            body.setWordWrap(True)
            body.setTextFormat(Qt.RichText)
            row.addWidget(body, 1)
            lay.addWidget(frame)
        bottom = QHBoxLayout()
        hint = QLabel("This shows once.")
        hint.setObjectName("Muted")
        bottom.addWidget(hint)
        bottom.addStretch(1)
        self.ok_button = QPushButton("Got it")
        self.ok_button.setObjectName("Primary")
        self.ok_button.clicked.connect(self.accept)
        bottom.addWidget(self.ok_button)
        lay.addLayout(bottom)
        self.setFixedHeight(lay.totalHeightForWidth(580))  # the wrapped text's own height, no gaps


def show_once(window) -> Tour | None:
    """Opens the tour unless it was shown before (window-modal, no nested event loop)."""
    if window.settings.tour_shown:
        return None
    tour = Tour(window)
    window.settings.tour_shown = True  # dismissed in any way: never again
    tour.finished.connect(tour.deleteLater)
    tour.open()
    return tour
