"""The transport bar: play/stop, the current take's waveform, progress and elapsed/total time."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout

from app.qt.icons import icon
from app.qt.waveform import WaveformView


def fmt_time(seconds: float) -> str:
    seconds = max(0.0, seconds)
    m, s = divmod(seconds, 60)
    return f"{int(m)}:{s:04.1f}"


class Transport(QFrame):
    playClicked = Signal()
    stopClicked = Signal()
    exportClicked = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Card")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        lay.setSpacing(12)

        self.play_button = QPushButton()
        self.play_button.setObjectName("Round")
        self.play_button.setToolTip("Play the current take (the script's Play button makes a new one)")
        self.stop_button = QPushButton()
        self.stop_button.setObjectName("Round")
        self.stop_button.setToolTip("Stop synthesis and playback (Esc)")
        self.play_button.clicked.connect(self.playClicked)
        self.stop_button.clicked.connect(self.stopClicked)
        lay.addWidget(self.play_button)
        lay.addWidget(self.stop_button)

        middle = QVBoxLayout()
        middle.setSpacing(6)
        self.waveform = WaveformView(compact=True)
        self.waveform.placeholder = "Press Play to hear the script"
        middle.addWidget(self.waveform)
        row = QHBoxLayout()
        self.status = QLabel("Ready")
        self.status.setObjectName("Muted")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(6)
        row.addWidget(self.status, 0)
        row.addWidget(self.progress, 1)
        middle.addLayout(row)
        lay.addLayout(middle, 1)

        self.time_label = QLabel("0:00.0 / 0:00.0")
        self.time_label.setObjectName("Time")
        self.time_label.setAlignment(Qt.AlignRight | Qt.AlignVCenter)
        self.time_label.setMinimumWidth(130)
        lay.addWidget(self.time_label)

        self.export_button = QPushButton(" Export…")
        self.export_button.setToolTip("Export the current take as WAV, FLAC, OGG or MP3")
        self.export_button.clicked.connect(self.exportClicked)
        self.export_button.setEnabled(False)
        lay.addWidget(self.export_button)
        self.refresh_icons()
        self.set_running(False)

    def refresh_icons(self) -> None:
        self.play_button.setIcon(icon("play"))
        self.stop_button.setIcon(icon("stop"))
        self.export_button.setIcon(icon("export"))

    def set_running(self, running: bool) -> None:
        self.stop_button.setEnabled(running)

    def set_time(self, elapsed: float, total: float, fraction: float | None = None) -> None:
        self.time_label.setText(f"{fmt_time(elapsed)} / {fmt_time(total)}")
        if fraction is not None:
            self.progress.setValue(int(round(1000 * min(1.0, max(0.0, fraction)))))
        self.waveform.set_playhead(elapsed if total > 0 else None)
