"""The Voice Lab view: a recording's speech/silence regions, the chosen window (drag its edges),
the probe and loudness, the filter chain, A/B preview, Clone, a test sentence in the new
voice, Save to library, Export voice and Export model with this voice.

The view lays out and binds a VoiceLabSession (app.core.voice_lab_session: the state and the
jobs). The analysis, the rendering, every file written and the speaker search with the trained
speaker encoder run as background operations; the speaker search with the model's x-vectors
(no trained encoder installed), cloning and the clone's likeness run on the engine thread
through the EngineClient's operations. Nothing here blocks the GUI thread.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from voice_lab import CLONING_MIN_SECONDS, OUTPUT_RATE, VoiceLabError

from app.core import voice_lab_session as jobs
from app.core.voice_lab_session import DEFAULT_TARGET_S, TEST_SENTENCE, VoiceLabSession, suggested_name
from app.core.voice_library import slug
from app.qt import theme
from app.qt.background import BackgroundOp, error_text
from app.qt.chain_editor import ChainEditor
from app.qt.icons import icon
from app.qt.waveform import WaveformView
from engine_native.likeness import describe


def _fmt_loud(m: dict | None) -> str:
    if not m:
        return "–"
    lufs, tp = m.get("integrated_lufs"), m.get("true_peak_dbtp")
    return f"{lufs if lufs is not None else '–'} LUFS · peak {tp if tp is not None else '–'} dBTP"


class VoiceLabView(QWidget):
    backRequested = Signal()
    revoiceRequested = Signal(str)  # the recording's path: speak it again in another voice
    voiceSaved = Signal(str)  # path in the library
    playAudio = Signal(object)  # 24 kHz mono samples to preview
    stopAudio = Signal()
    speakRequested = Signal(str, object, str)  # text, Voice, name
    error = Signal(str)

    #: options of the test take scored for likeness after cloning (tests use a small max_tokens)
    likeness_options: dict | None = None

    def __init__(self, client, store, parent=None):
        super().__init__(parent)
        self.client = client  # EngineClient
        self.store = store  # VoiceStore
        self.session = VoiceLabSession()
        self._build()

    # --- layout ------------------------------------------------------------------------------------

    def _card(self, title: str) -> tuple[QFrame, QVBoxLayout]:
        f = QFrame()
        f.setObjectName("Card")
        lay = QVBoxLayout(f)
        lay.setContentsMargins(12, 10, 12, 12)
        lay.setSpacing(8)
        t = QLabel(title)
        t.setObjectName("CardTitle")
        lay.addWidget(t)
        return f, lay

    def _build(self) -> None:
        root = QVBoxLayout(self)
        root.setContentsMargins(12, 12, 12, 12)
        root.setSpacing(10)

        head = QHBoxLayout()
        self.back_button = QPushButton(" Back to studio")
        self.back_button.clicked.connect(self.backRequested)
        head.addWidget(self.back_button)
        self.title = QLabel("Voice Lab")
        self.title.setObjectName("CardTitle")
        head.addSpacing(8)
        head.addWidget(self.title, 1)
        self.revoice_button = QPushButton("Re-voice with…")
        self.revoice_button.setToolTip("Speak this recording again in a voice of the library: the same words and "
                                       "timing")
        self.revoice_button.clicked.connect(lambda: self.session.path and self.revoiceRequested.emit(self.session.path))
        head.addWidget(self.revoice_button)
        self.status = QLabel("")
        self.status.setObjectName("Muted")
        head.addWidget(self.status)
        self.spinner = QProgressBar()
        self.spinner.setRange(0, 0)
        self.spinner.setFixedWidth(120)
        self.spinner.setFixedHeight(6)
        self.spinner.hide()
        head.addWidget(self.spinner)
        root.addLayout(head)

        # waveform card
        wf, wlay = self._card("Recording")
        self.waveform = WaveformView(editable=True)
        self.waveform.setMinimumHeight(150)
        self.waveform.placeholder = "Drop an audio or video file here"
        self.waveform.windowChanged.connect(lambda _spans: self._window_dragged())
        wlay.addWidget(self.waveform, 1)
        legend = QHBoxLayout()
        self.swatches = []
        for text in ("speech", "silence", "clone window (drag the edges)"):
            sw = QLabel()
            sw.setFixedSize(12, 12)
            self.swatches.append(sw)
            legend.addWidget(sw)
            lab = QLabel(text)
            lab.setObjectName("Muted")
            legend.addWidget(lab)
            legend.addSpacing(10)
        legend.addStretch(1)
        self.speakers_label = QLabel("")
        self.speakers_label.setObjectName("Muted")
        legend.addWidget(self.speakers_label)
        self.speaker_combo = QComboBox()
        self.speaker_combo.setToolTip("The speaker the clone window is taken from")
        self.speaker_combo.hide()
        self.speaker_combo.activated.connect(self._speaker_chosen)
        legend.addWidget(self.speaker_combo)
        legend.addSpacing(12)
        self.window_label = QLabel("")
        legend.addWidget(self.window_label)
        legend.addSpacing(12)
        legend.addWidget(QLabel("Target"))
        self.target_spin = QDoubleSpinBox()
        self.target_spin.setRange(CLONING_MIN_SECONDS + 0.5, 60.0)
        self.target_spin.setValue(DEFAULT_TARGET_S)
        self.target_spin.setSuffix(" s")
        self.target_spin.setDecimals(1)
        legend.addWidget(self.target_spin)
        self.auto_button = QPushButton("Auto-pick")
        self.auto_button.setToolTip("Choose the window again from the speech regions")
        self.auto_button.clicked.connect(self.auto_window)
        legend.addWidget(self.auto_button)
        wlay.addLayout(legend)
        root.addWidget(wf, 3)

        grid = QGridLayout()
        grid.setSpacing(10)
        # probe card
        pf, play = self._card("Source")
        form = QFormLayout()
        form.setHorizontalSpacing(14)
        form.setVerticalSpacing(6)
        self.info = {}
        for key, label in (("file", "File"), ("codec", "Codec"), ("format", "Format"), ("bitrate", "Bitrate"),
                           ("duration", "Duration"), ("speech", "Speech"), ("loud_src", "Loudness"),
                           ("loud_win", "Window"), ("loud_out", "Processed")):
            v = QLabel("–")
            v.setObjectName("Value")
            v.setTextInteractionFlags(Qt.TextSelectableByMouse)
            v.setWordWrap(True)
            self.info[key] = v
            form.addRow(QLabel(label), v)
        play.addLayout(form)
        play.addStretch(1)
        grid.addWidget(pf, 0, 0)

        # chain card
        cf, clay = self._card("Filter chain")
        self.chain_editor = ChainEditor()
        self.chain_editor.changed.connect(self._chain_changed)
        clay.addWidget(self.chain_editor, 1)
        grid.addWidget(cf, 0, 1)

        # clone card
        kf, klay = self._card("Preview and clone")
        ab = QHBoxLayout()
        self.a_button = QPushButton(" A  Original")
        self.a_button.setToolTip("Play the chosen window as recorded")
        self.a_button.clicked.connect(lambda: self.preview("original"))
        self.b_button = QPushButton(" B  Processed")
        self.b_button.setToolTip("Play the chosen window through the filter chain")
        self.b_button.clicked.connect(lambda: self.preview("processed"))
        self.stop_button = QPushButton()
        self.stop_button.setToolTip("Stop the preview")
        self.stop_button.clicked.connect(self.stopAudio)
        ab.addWidget(self.a_button, 1)
        ab.addWidget(self.b_button, 1)
        ab.addWidget(self.stop_button)
        klay.addLayout(ab)
        nrow = QHBoxLayout()
        nrow.addWidget(QLabel("Name"))
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("Name of the new voice")
        nrow.addWidget(self.name_edit, 1)
        klay.addLayout(nrow)
        self.clone_button = QPushButton(" Clone voice")
        self.clone_button.setObjectName("Primary")
        self.clone_button.clicked.connect(self.clone)
        klay.addWidget(self.clone_button)
        self.clone_status = QLabel("")
        self.clone_status.setWordWrap(True)
        self.clone_status.setObjectName("Muted")
        klay.addWidget(self.clone_status)
        trow = QHBoxLayout()
        self.test_edit = QLineEdit(TEST_SENTENCE)
        self.test_edit.setCursorPosition(0)
        self.test_button = QPushButton()
        self.test_button.setToolTip("Speak the test sentence in the new voice")
        self.test_button.clicked.connect(self.speak_test)
        trow.addWidget(self.test_edit, 1)
        trow.addWidget(self.test_button)
        klay.addLayout(trow)
        srow = QHBoxLayout()
        self.save_button = QPushButton(" Save to library")
        self.save_button.clicked.connect(lambda: self.save_to_library())
        self.export_button = QPushButton(" Export voice…")
        self.export_button.clicked.connect(lambda: self.export_voice())
        srow.addWidget(self.save_button, 1)
        srow.addWidget(self.export_button, 1)
        klay.addLayout(srow)
        self.bake_button = QPushButton(" Export model with this voice…")
        self.bake_button.setToolTip("Write a copy of the loaded model whose built-in voice is this clone: "
                                    "one file carries both")
        self.bake_button.clicked.connect(lambda: self.export_model())
        klay.addWidget(self.bake_button)
        klay.addStretch(1)
        grid.addWidget(kf, 0, 2)
        grid.setColumnStretch(0, 4)
        grid.setColumnStretch(1, 5)
        grid.setColumnStretch(2, 4)
        holder = QWidget()
        holder.setLayout(grid)
        holder.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)
        root.addWidget(holder, 4)
        self.refresh_icons()
        self._update_buttons()

    def refresh_icons(self) -> None:
        c = theme.colors()
        for sw, color in zip(self.swatches, (c.speech, c.silence, c.window_sel)):
            sw.setStyleSheet(f"background:{color}; border-radius:3px;")
        self.back_button.setIcon(icon("back"))
        self.a_button.setIcon(icon("play"))
        self.b_button.setIcon(icon("play"))
        self.stop_button.setIcon(icon("stop"))
        self.clone_button.setIcon(icon("clone", c.accent_text))
        self.test_button.setIcon(icon("speaker"))
        self.save_button.setIcon(icon("save"))
        self.export_button.setIcon(icon("export"))
        self.bake_button.setIcon(icon("export"))
        self.chain_editor.refresh_icons()

    # --- state --------------------------------------------------------------------------------------

    def _set_busy(self, what: str) -> None:
        self.session.busy = what
        self.spinner.setVisible(bool(what))
        self.status.setText({"analysing": "Analysing the recording…", "rendering": "Applying the filter chain…",
                             "cloning": "Cloning the voice…", "speakers": "Telling the speakers apart…",
                             "saving": "Saving the voice…", "baking": "Writing the model…"}.get(what, ""))
        self._update_buttons()

    def _update_buttons(self) -> None:
        s = self.session
        has = s.analysis is not None and bool(s.windows)
        idle = s.busy == ""
        for b in (self.a_button, self.b_button, self.clone_button):
            b.setEnabled(has and idle)
        self.auto_button.setEnabled(s.analysis is not None and idle)
        cloned = s.voice is not None
        for b in (self.test_button, self.save_button, self.export_button):
            b.setEnabled(cloned and idle)
        self.bake_button.setEnabled(cloned and idle and self.client.model_path is not None)

    def _show_error(self, text: str) -> None:
        self.clone_status.setObjectName("Error")
        self.clone_status.setStyleSheet(f"color: {theme.colors().error};")
        self.clone_status.setText(text)
        self.error.emit(text)

    def _show_note(self, text: str) -> None:
        self.clone_status.setStyleSheet("")
        self.clone_status.setText(text)

    def _run(self, busy: str, fn, success, failure) -> BackgroundOp:
        """`fn()` as a background operation, the lab busy with `busy` meanwhile."""
        self._set_busy(busy)

        def ok(result):
            self._set_busy("")
            success(result)

        def bad(e):
            self._set_busy("")
            failure(e)

        return BackgroundOp(lambda _report: fn(), success=ok, failure=bad, owner=self).start()

    # --- loading a recording -----------------------------------------------------------------------

    def open_file(self, path: str) -> BackgroundOp:
        self.session.open(path)
        self.speaker_combo.hide()
        self.speakers_label.setText("")
        self.waveform.clear()
        self.title.setText(f"Voice Lab · {os.path.basename(path)}")
        self.name_edit.setText(suggested_name(path))
        self._show_note("Clone turns the chosen window into a voice (in the background); then try it and save it.")
        for v in self.info.values():
            v.setText("–")
        target = self.target_spin.value()
        from voice_lab.lab import analyse

        return self._run("analysing", lambda: analyse(path, target), self._analysed,
                         lambda e: self._show_error(f"Cannot use this recording: {error_text(e)}"))

    def _analysed(self, a) -> None:
        self.session.analysed(a)
        self.waveform.set_audio(a.mono, a.rate)
        self.waveform.regions = self.session.regions()
        self.waveform.set_windows(self.session.windows)
        p = a.probe
        self.info["file"].setText(os.path.basename(a.path))
        self.info["codec"].setText(f"{p.codec} in {p.container}" + (" (video file)" if p.has_video else ""))
        self.info["format"].setText(f"{p.sample_rate} Hz · {p.channels} ch")
        self.info["bitrate"].setText(f"{p.bit_rate / 1000:.0f} kbps" if p.bit_rate else "unknown")
        self.info["duration"].setText(f"{a.duration:.2f} s")
        speech = sum(r.duration for r in a.regions)
        self.info["speech"].setText(f"{speech:.1f} s in {len(a.regions)} region{'s' if len(a.regions) != 1 else ''}")
        self.info["loud_src"].setText(_fmt_loud(a.source_loudness))
        self.chain_editor.set_auto(a.chain_name, f"Chosen for this file: {a.chain_reason}.")  # -> _chain_changed
        if not a.window:
            self._show_error(a.window_note)
        self._window_info()
        self.find_speakers()

    # --- speakers (a background operation, or the engine thread) ---------------------------------------

    def find_speakers(self):
        """Tell the recording's speakers apart: with the trained speaker encoder where it is
        installed (a background operation, no model needed), else with the loaded model's
        x-vectors (the engine thread); with two, the window comes from one of them (the one
        with the most speech, or the one picked)."""
        a = self.session.analysis
        if a is None or not a.regions:
            return None

        def ok(result):
            if self.session.analysis is not a:
                return
            found, by = result
            if found is not None:
                self.show_speakers(found, by)
            elif self.client.info is not None:  # no trained encoder: the model's x-vectors
                self._set_busy("speakers")
                self.client.find_speakers(a.mono, a.rate, a.regions, success=on_engine, failure=bad)
            else:
                self.session.speakers_found(None, None)
                self.speakers_label.setText("Speakers not checked (no speaker encoder)")
                self.speakers_label.setToolTip(self.session.speakers_note())

        def on_engine(result):
            self._set_busy("")
            if self.session.analysis is a:
                self.show_speakers(*result)

        def bad(e):
            self._set_busy("")
            self.speakers_label.setText(f"Speakers not told apart: {error_text(e)}")

        return self._run("speakers", lambda: jobs.find_speakers(a.mono, a.rate, a.regions), ok, bad)

    def show_speakers(self, found, by=None) -> None:
        """Show who speaks where (the second speaker's speech in its own colour), which encoder
        told them apart, and take the window from the chosen speaker."""
        s = self.session
        s.speakers_found(found, by)
        self.speaker_combo.clear()
        self.speakers_label.setToolTip(s.speakers_note())
        by = f" ({by.short})" if by is not None else ""
        if not s.several_speakers:
            self.speakers_label.setText(f"One speaker{by}")
            self.speaker_combo.hide()
            return
        self.speakers_label.setText(f"{found.count} speakers{by}")
        for i in range(found.count):
            self.speaker_combo.addItem(f"Speaker {i + 1} · {found.seconds[i]:.1f} s", i)
        self.speaker_combo.show()
        self.waveform.regions = s.regions()
        self.auto_window()
        if s.windows:
            self._show_note(f"{found.count} speakers: the clone window comes from speaker "
                            f"{s.speaker + 1} only. Pick another beside the waveform.")

    def _speaker_chosen(self, _index: int) -> None:
        self.session.speaker = int(self.speaker_combo.currentData() or 0)
        self.auto_window()

    def auto_window(self) -> None:
        s = self.session
        if s.analysis is None:
            return
        before = s.windows
        try:
            s.choose_window(self.target_spin.value())
        except VoiceLabError as e:
            self._show_error(str(e))
            if s.windows == before:
                return
        self.waveform.set_windows(s.windows)
        self._window_changed()

    def _window_dragged(self) -> None:
        self.session.set_windows(self.waveform.windows)
        self._window_changed()

    def _window_changed(self) -> None:
        self._clip_changed()
        self._window_info()

    def _window_info(self) -> None:
        if not self.session.windows:
            self.window_label.setText("No window")
        else:
            total = self.session.window_seconds
            warn = "" if total > CLONING_MIN_SECONDS else f"  (needs > {CLONING_MIN_SECONDS:.0f} s)"
            self.window_label.setText(f"Window {total:.1f} s{warn}")
        self._update_buttons()

    def _chain_changed(self) -> None:
        self.session.set_chain(self.chain_editor.chain)
        self._clip_changed()

    def _clip_changed(self) -> None:
        self.info["loud_win"].setText("–")
        self.info["loud_out"].setText("–")

    # --- rendering (background) --------------------------------------------------------------------------

    def ensure_clip(self, then) -> None:
        """Call then(clip) with the rendered window, rendering it in the background when stale."""
        s = self.session
        clip = s.current_clip()
        if clip is not None:
            then(clip)
            return
        a = s.analysis
        if a is None or not s.windows:
            return
        key, spans, chain = s.key(), list(s.windows), s.chain.copy()

        def ok(clip):
            s.rendered(clip, key)
            self.info["loud_win"].setText(_fmt_loud(clip.before))
            self.info["loud_out"].setText(_fmt_loud(clip.after))
            then(clip)

        from voice_lab.lab import render_window

        self._run("rendering", lambda: render_window(a.mono, a.rate, spans, chain), ok,
                  lambda e: self._show_error(f"The filter chain failed: {error_text(e)}"))

    def preview(self, which: str) -> None:
        self.ensure_clip(lambda clip: self.playAudio.emit(getattr(clip, which)))

    # --- cloning (engine thread) ---------------------------------------------------------------------------

    def clone(self) -> None:
        problem = self.session.clone_problem()
        if problem:
            self._show_error(problem)
            return
        self.ensure_clip(self._clone_clip)

    def _clone_clip(self, clip) -> None:
        samples = clip.processed
        self._set_busy("cloning")
        self._show_note("Cloning in the background…")

        def ok(voice):
            self._set_busy("")
            self.session.cloned(voice, samples)
            note = (f"Cloned from {samples.size / OUTPUT_RATE:.1f} s of audio. Try the test "
                    "sentence, then save it.")
            self._show_note(note)
            self._update_buttons()
            self.score_clone(voice, note)

        def bad(e):
            self._set_busy("")
            self._show_error(f"Cloning failed: {error_text(e)}")

        self.client.clone_clip(samples, OUTPUT_RATE, success=ok, failure=bad)

    def score_clone(self, voice, note: str = ""):
        """The clone's likeness: a take of the test sentence in the new voice, scored against it
        on the engine thread (in the background); shown under the Clone button."""
        text = self.test_edit.text().strip() or TEST_SENTENCE
        self.session.clone_likeness = None

        recording = self.session.voice_clip if self.session.voice is voice else None

        def ok(result):
            if result is not None and self.session.voice is voice:
                score, by = result
                self.session.clone_likeness = score
                self._show_note(f"{note} Likeness of a test take: {describe(score)}, by {by}.".strip())

        return self.client.test_take_likeness(text, voice, dict(self.likeness_options or {}), recording=recording,
                                               success=ok, failure=lambda _e: None)

    def speak_test(self) -> None:
        if self.session.voice is not None:
            self.speakRequested.emit(self.test_edit.text(), self.session.voice, self.voice_name())

    def voice_name(self) -> str:
        return self.name_edit.text().strip() or "New voice"

    # --- saving (background) --------------------------------------------------------------------------

    def save_to_library(self) -> BackgroundOp | None:
        s = self.session
        if s.voice is None:
            return None
        name, voice, clip, meta = self.voice_name(), s.voice, s.voice_clip, s.meta()

        def ok(path):
            s.saved_path = path
            self._show_note(f"Saved to the library as “{name}”.")
            self.voiceSaved.emit(path)

        return self._run("saving", lambda: jobs.save_to_library(self.store, voice, name, clip, meta), ok,
                         lambda e: self._show_error(f"Could not save the voice: {error_text(e)}"))

    def export_voice(self, path: str | None = None) -> BackgroundOp | None:
        s = self.session
        if s.voice is None:
            return None
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, "Export voice", f"{slug(self.voice_name())}.voice.gguf",
                                                  "Chatterbox voice (*.voice.gguf)")
            if not path:
                return None
        name, voice, meta = self.voice_name(), s.voice, s.meta()
        return self._run("saving", lambda: jobs.export_voice(voice, path, name, meta),
                         lambda out: self._show_note(f"Exported to {out}"),
                         lambda e: self._show_error(f"Could not export the voice: {error_text(e)}"))

    def export_model(self, path: str | None = None) -> BackgroundOp | None:
        """Write a copy of the loaded model whose built-in voice is the clone (in the background)."""
        s, model = self.session, self.client.model_path
        if s.voice is None or model is None:
            return None
        if path is None:
            stem = os.path.splitext(os.path.basename(model))[0]
            path, _ = QFileDialog.getSaveFileName(self, "Export model with this voice",
                                                  f"{stem}-{slug(self.voice_name())}.gguf", "Chatterbox model (*.gguf)")
            if not path:
                return None
        name, voice, meta = self.voice_name(), s.voice, s.meta()

        def ok(out):
            s.baked_path = out
            self._show_note(f"Wrote {out}: the model with “{name}” as its built-in voice.")

        return self._run("baking", lambda: jobs.export_model(model, voice, path, name, meta), ok,
                         lambda e: self._show_error(f"Could not write the model: {error_text(e)}"))
