"""Takes: the transport (play, stop, the growing waveform, the time), the take history (a take
shown again, its likeness scored in the background) and exporting a take to a file."""

from __future__ import annotations

import os

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QFileDialog

from app.core.take import EXPORT_FORMATS, export_audio
from app.qt.background import BackgroundOp, error_text
from app.qt.playback import estimate_seconds

STATE_TEXT = {"generating": "Generating…", "playing": "Playing", "live": "Live typing", "idle": "Idle"}


def export_filters() -> str:
    return ";;".join(f"{label} (*.{ext})" for ext, (label, _s) in EXPORT_FORMATS.items())


class TakeActions(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.controller = c = window.controller
        self.transport = tr = window.transport
        self.editor = ed = window.editor
        self.current = None  # the take shown in the transport
        self._dirty = False
        self._timer = QTimer(self)
        self._timer.setInterval(150)
        self._timer.timeout.connect(self.refresh_wave)
        self._timer.start()
        tr.playClicked.connect(self.play)
        tr.stopClicked.connect(c.stop)
        tr.exportClicked.connect(lambda: self.export_take())
        ed.takeActivated.connect(self.show_take)
        c.takeStarted.connect(self._started)
        c.takeChanged.connect(self._changed)
        c.takeFinished.connect(self._finished)
        c.position.connect(tr.set_time)
        c.stateChanged.connect(self._state_changed)
        c.statusText.connect(tr.status.setText)

    def play(self) -> None:
        """Replay the current take; without one, synthesize the script (or the selection)."""
        take = self.current
        if take is not None and take.complete and take.frames > 0 and not self.controller.live:
            self.controller.replay(take)
        else:
            self.editor.request_play()

    def _started(self, take) -> None:
        self.current = take
        self.transport.waveform.clear()
        self.transport.waveform.set_audio(take.samples, take.sample_rate,
                                          expected_s=0 if self.controller.live else estimate_seconds(take.text))
        self.transport.export_button.setEnabled(False)

    def _changed(self, _take) -> None:
        self._dirty = True

    def _finished(self, take) -> None:
        self.refresh_wave()
        self.transport.export_button.setEnabled(take.frames > 0)
        if take.in_history and take.frames > 0:
            if self.controller.live or take.text == "(live typing)":
                take.text = " ".join(s.text for _a, _b, s in take.sentence_ranges())
            self.editor.add_take(take)
            self.editor.set_regen_take(take)
            if take.likeness is None and take.complete:
                self.score_take(take)

    def score_take(self, take, voice=None):
        """The take's likeness to its voice, computed on the engine thread; shown in the history."""
        samples = take.samples.copy()

        def ok(score):
            take.likeness = score
            self.editor.update_take(take)

        return self.w.client.likeness(samples, self.w.voices.voice() if voice is None else voice, success=ok,
                                      failure=lambda _e: None)

    def refresh_wave(self) -> None:
        take = self.current
        if take is not None and (self._dirty or self.transport.waveform.n_samples != take.frames):
            self._dirty = False
            w = self.transport.waveform
            expected = 0 if take.complete or self.controller.live else estimate_seconds(take.text)
            w.set_audio(take.samples, take.sample_rate, expected_s=expected)
            w.marks = [a / take.sample_rate for a, _b, _s in take.sentence_ranges()[1:]]
            self.transport.export_button.setEnabled(take.frames > 0 and take.complete)
            if take.complete:
                self.editor.update_take(take)

    def show_take(self, take) -> None:
        """A take of the history back in the transport (and the one Regenerate works on)."""
        self.controller.stop()
        self.current = take
        self.controller.take = take
        self._dirty = True
        self.refresh_wave()
        self.transport.set_time(0.0, take.duration, 0.0)
        self.editor.set_regen_take(take)

    def _state_changed(self, state: str) -> None:
        self.transport.set_running(state in ("generating", "playing", "live"))
        self.w.status_engine.setText(STATE_TEXT.get(state, state))

    def export_take(self, path: str | None = None):
        """The current take to a file (the format from its extension), in the background."""
        take = self.current
        if take is None or take.frames == 0:
            self.w.show_error("There is no take to export yet: play the script first.")
            return None
        if path is None:
            start = os.path.join(self.w.settings.last_open_dir or os.path.expanduser("~"), "take.wav")
            path, _ = QFileDialog.getSaveFileName(self.w, "Export take", start, export_filters())
            if not path:
                return None
        samples, rate, tags = take.samples.copy(), take.sample_rate, take.provenance

        def ok(_r):
            self.w.statusBar().showMessage(f"Exported {take.duration:.1f} s to {path}", 8000)

        return BackgroundOp(lambda _rep: export_audio(samples, rate, path, tags), success=ok,
                            failure=lambda e: self.w.show_error(f"Export failed: {error_text(e)}")).start()
