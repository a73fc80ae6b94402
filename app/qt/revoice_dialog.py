"""Re-voice with…: a recording spoken again in a voice of the library (Engine.revoice_stream).

The recording is read off the GUI thread (BackgroundOp, the hardened decoder of
app.core.revoice); the conversion is the engine's typed operation (EngineClient.revoice) through
the playback controller, so it plays as it converts and becomes the current take: Stop cancels
it, "Export…" writes it (TakeActions.export_take). "Play source" plays the recording itself
(A/B). The dialog holds no engine state of its own.
"""

from __future__ import annotations

import os

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QProgressBar, QPushButton,
                               QVBoxLayout)

from app.qt.background import BackgroundOp

# The main window's options that re-voicing takes (the rest are T3's).
REVOICE_OPTIONS = ("seed", "cfm_steps", "prompt_seconds", "first_chunk_tokens", "chunk_tokens")


class RevoiceDialog(QDialog):
    def __init__(self, window, path: str):
        super().__init__(window)
        self.w, self.path = window, path
        self.samples, self.rate = None, 0
        self.take = None
        self.setWindowTitle(f"Re-voice {os.path.basename(path)}")
        self.source_label = QLabel(f"Reading {os.path.basename(path)}…")
        self.voice_combo = QComboBox()
        combo = window.toolbar.voice_combo  # the library's voices, as the toolbar lists them
        for i in range(combo.count()):
            self.voice_combo.addItem(combo.itemIcon(i), combo.itemText(i), combo.itemData(i))
        self.voice_combo.setCurrentIndex(combo.currentIndex())
        self.voice_combo.currentIndexChanged.connect(self._ready_voice)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.status = QLabel("")
        self.play_source = QPushButton("Play source")
        self.convert = QPushButton("Re-voice and play")
        self.stop = QPushButton("Stop")
        self.export = QPushButton("Export…")
        buttons = QDialogButtonBox()
        for b in (self.play_source, self.convert, self.stop, self.export):
            buttons.addButton(b, QDialogButtonBox.ActionRole)
        buttons.addButton(QDialogButtonBox.Close).clicked.connect(self.close)
        form = QFormLayout()
        form.addRow("Recording", self.source_label)
        form.addRow("Re-voice with", self.voice_combo)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addWidget(buttons)
        self.play_source.clicked.connect(lambda: self.w.preview_audio(self.samples))
        self.convert.clicked.connect(self.start)
        self.stop.clicked.connect(self.w.controller.stop)
        self.export.clicked.connect(lambda: self.w.takes.export_take())
        self.w.controller.takeChanged.connect(self._changed)
        self.w.controller.takeFinished.connect(self._changed)
        self.w.controller.error.connect(self.status.setText)
        self.w.controller.stateChanged.connect(self._state)
        self._enable()
        self.reading = BackgroundOp(lambda _report: self._read(path), success=self._read_done,
                                    failure=self._read_failed).start()

    @staticmethod
    def _read(path: str):
        from app.core.revoice import decode_source

        return decode_source(path)

    def _read_done(self, result) -> None:
        self.samples, self.rate = result
        self.source_label.setText(f"{os.path.basename(self.path)} ({len(self.samples) / self.rate:.1f} s)")
        self._enable()

    def _read_failed(self, e) -> None:
        self.source_label.setText(str(e))
        self.status.setText(str(e))
        self._enable()

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.rate if self.samples is not None else 0.0

    def start(self):
        """Convert with the chosen voice and play it as it comes; returns the take."""
        from app.core.revoice import take_title

        if self.samples is None:
            return None
        params = {k: v for k, v in self.w.params().items() if k in REVOICE_OPTIONS}
        name = self.voice_combo.currentText()
        self.status.setText("Converting…")
        self.progress.setValue(0)
        self.take = self.w.controller.revoice(self.samples, self.rate, self.voice_combo.currentData(), params,
                                              name, take_title(self.path, name))
        self._enable()
        return self.take

    def _changed(self, take) -> None:
        if take is not self.take or take is None:
            return
        fraction = 1.0 if take.complete else min(1.0, take.duration / max(self.seconds, 1e-9))
        self.progress.setValue(int(round(1000 * fraction)))
        self.status.setText(f"Re-voiced {take.duration:.1f} of {self.seconds:.1f} s"
                            + (" (done)" if take.complete and fraction >= 0.999 else ""))
        self._enable()

    def _state(self, _state: str) -> None:
        self._enable()

    @property
    def running(self) -> bool:
        """Converting this dialog's take now (Stop ends it without completing it)."""
        c = self.w.controller
        return self.take is not None and c.take is self.take and not self.take.complete and bool(c.jobs) \
            and not all(j.cancelled for j in c.jobs)

    def _ready_voice(self, _index: int = -1) -> None:
        """The voice picked here readied for streaming in the background, as the toolbar's is
        (Engine.prepare_stream): its conversion's first audio comes as soon as later ones do."""
        if self.w.client.info is not None:
            self.w.client.prepare_stream(self.voice_combo.currentData(), dict(self.w.params(), t3=False))  # no T3 here

    def _enable(self) -> None:
        ready = self.samples is not None and self.w.client.info is not None
        running = self.running
        self.play_source.setEnabled(self.samples is not None)
        self.convert.setEnabled(ready and not running)
        self.stop.setEnabled(running)
        self.export.setEnabled(self.take is not None and self.take.frames > 0)

    def closeEvent(self, e):
        if self.voice_combo.currentData() != self.w.toolbar.voice_combo.currentData():
            self.w.voices.prepare_stream()  # the engine keeps one readied voice: the toolbar's again
        for signal, slot in ((self.w.controller.takeChanged, self._changed),
                             (self.w.controller.takeFinished, self._changed),
                             (self.w.controller.error, self.status.setText),
                             (self.w.controller.stateChanged, self._state)):
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
        super().closeEvent(e)
