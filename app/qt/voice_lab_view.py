"""The Voice Lab view: a recording's speech/silence regions, the chosen window (drag its edges),
the probe and loudness, the filter chain, A/B preview, Clone (in the background), a test
sentence in the new voice, Save to library and Export voice.

Analysis and rendering run as background ops (voice_lab is pure numpy/ffmpeg); cloning runs
on the engine thread. Nothing here blocks the GUI thread.
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

from app.qt import theme
from app.qt.background import BackgroundOp, error_text
from app.qt.chain_editor import ChainEditor
from app.qt.engine_worker import JobCancel
from app.qt.icons import icon
from app.core.voice_lab_ops import Analysis, analyse, render_clip
from app.qt.waveform import WaveformView

DEFAULT_TARGET_S = 10.0
TEST_SENTENCE = "Hello! This is my new voice. How does it sound?"


def _fmt_loud(m: dict | None) -> str:
    if not m:
        return "–"
    lufs, tp = m.get("integrated_lufs"), m.get("true_peak_dbtp")
    return f"{lufs if lufs is not None else '–'} LUFS · peak {tp if tp is not None else '–'} dBTP"


class VoiceLabView(QWidget):
    backRequested = Signal()
    voiceSaved = Signal(str)  # path in the library
    playAudio = Signal(object)  # 24 kHz mono samples to preview
    stopAudio = Signal()
    speakRequested = Signal(str, object, str)  # text, Voice, name
    error = Signal(str)

    def __init__(self, client, store, parent=None):
        super().__init__(parent)
        self.client = client  # EngineClient
        self.store = store  # VoiceStore
        self.analysis: Analysis | None = None
        self.clip: dict | None = None  # render_clip() result for clip_key
        self.clip_key = None
        self.voice = None  # the cloned Voice
        self.voice_key = None
        self.voice_clip = None  # (samples, rate) the voice was cloned from: kept beside a saved voice
        self.saved_path: str | None = None
        self._pending_after_render = None
        self._render_op: BackgroundOp | None = None
        self._clone_job = None
        self.speakers = None  # voice_lab.speakers.Speakers of the recording, once found
        self.baked_path: str | None = None
        self.busy = ""  # "analysing" / "speakers" / "rendering" / "cloning" / "baking" / ""
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
        self.waveform.windowChanged.connect(self._window_dragged)
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
        self.speaker_combo.activated.connect(lambda _i: self.auto_window())
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
        self.chain_editor.changed.connect(self._invalidate_clip)
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
        self.busy = what
        self.spinner.setVisible(bool(what))
        self.status.setText({"analysing": "Analysing the recording…", "rendering": "Applying the filter chain…",
                             "cloning": "Cloning the voice…", "speakers": "Telling the speakers apart…",
                             "baking": "Writing the model…"}.get(what, ""))
        self._update_buttons()

    def _update_buttons(self) -> None:
        has = self.analysis is not None and bool(self.waveform.windows)
        idle = self.busy == ""
        for b in (self.a_button, self.b_button):
            b.setEnabled(has and idle)
        self.clone_button.setEnabled(has and idle)
        self.auto_button.setEnabled(self.analysis is not None and idle)
        cloned = self.voice is not None
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

    def spans(self) -> list[tuple[float, float]]:
        return [tuple(w) for w in self.waveform.windows]

    def _key(self):
        return (tuple(self.spans()), self.chain_editor.chain.to_json(indent=None))

    # --- loading a recording -----------------------------------------------------------------------

    def open_file(self, path: str) -> BackgroundOp:
        self.analysis = self.speakers = None
        self.clip = self.clip_key = self.voice = self.voice_key = self.voice_clip = self.saved_path = None
        self.speaker_combo.hide()
        self.speakers_label.setText("")
        self.waveform.clear()
        self.title.setText(f"Voice Lab · {os.path.basename(path)}")
        base = os.path.basename(path)
        for suffix in (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".mp4", ".mkv", ".webm", ".mov"):
            if base.lower().endswith(suffix):
                base = base[: -len(suffix)]
        self.name_edit.setText(base.replace("_", " ").strip() or "New voice")
        self._show_note("Clone turns the chosen window into a voice (in the background); then try it and save it.")
        for v in self.info.values():
            v.setText("–")
        self._set_busy("analysing")
        target = self.target_spin.value()
        return BackgroundOp(lambda _r: analyse(path, target), success=self._analysed,
                            failure=self._analyse_failed).start()

    def _analyse_failed(self, e: BaseException) -> None:
        self._set_busy("")
        self._show_error(f"Cannot use this recording: {error_text(e)}")

    def _analysed(self, a: Analysis) -> None:
        self.analysis = a
        self._set_busy("")
        self.waveform.set_audio(a.mono, a.rate)
        self.waveform.regions = ([(s.start, s.end, "silence") for s in a.silences]
                                 + [(r.start, r.end, "speech") for r in a.regions])
        self.waveform.set_windows(a.window)
        p = a.probe
        self.info["file"].setText(os.path.basename(a.path))
        self.info["codec"].setText(f"{p.codec} in {p.container}" + (" (video file)" if p.has_video else ""))
        self.info["format"].setText(f"{p.sample_rate} Hz · {p.channels} ch")
        self.info["bitrate"].setText(f"{p.bit_rate / 1000:.0f} kbps" if p.bit_rate else "unknown")
        self.info["duration"].setText(f"{a.duration:.2f} s")
        speech = sum(r.duration for r in a.regions)
        self.info["speech"].setText(f"{speech:.1f} s in {len(a.regions)} region{'s' if len(a.regions) != 1 else ''}")
        self.info["loud_src"].setText(_fmt_loud(a.source_loudness))
        self.chain_editor.set_auto(a.chain_name, f"Chosen for this file: {a.chain_reason}.")
        if not a.window:
            self._show_error(a.window_note)
        self._window_info()
        self._update_buttons()
        self.find_speakers()

    # --- speakers (engine thread) ---------------------------------------------------------------------

    def find_speakers(self):
        """Tell the recording's speakers apart with the engine's speaker encoder; with two, the
        window comes from one of them (the one with the most speech, or the one picked)."""
        a = self.analysis
        if a is None or not a.regions:
            return None
        if self.client.info is None:
            self.speakers_label.setText("Load a model to tell speakers apart")
            return None
        self._set_busy("speakers")

        def fn(worker, _job):
            from voice_lab.speakers import find_speakers

            return find_speakers(a.mono, a.rate, a.regions, worker.require_engine().speaker_xvector)

        def ok(found):
            self._set_busy("")
            if self.analysis is a:
                self.show_speakers(found)

        def bad(e):
            self._set_busy("")
            self.speakers_label.setText(f"Speakers not told apart: {error_text(e)}")

        return self.client.submit(fn, label="find speakers", success=ok, failure=bad)

    def show_speakers(self, found) -> None:
        """Show who speaks where (the second speaker's speech in its own colour) and take the
        window from the chosen speaker."""
        self.speakers = found
        self.speaker_combo.clear()
        if found.count < 2:
            self.speakers_label.setText("One speaker")
            self.speaker_combo.hide()
            return
        self.speakers_label.setText(f"{found.count} speakers")
        for i in range(found.count):
            self.speaker_combo.addItem(f"Speaker {i + 1} · {found.seconds[i]:.1f} s", i)
        self.speaker_combo.show()
        second = found.spans_of(1)
        regions = [(s.start, s.end, "silence") for s in self.analysis.silences]
        regions += [(s.start, s.end, "speech") for s in found.spans_of(0)]
        regions += [(s.start, s.end, "speech2") for s in second]
        self.waveform.regions = regions
        self.auto_window()
        if self.spans():
            self._show_note(f"{found.count} speakers: the clone window comes from speaker "
                            f"{self.chosen_speaker() + 1} only. Pick another beside the waveform.")

    def chosen_speaker(self) -> int:
        return int(self.speaker_combo.currentData() or 0)

    def auto_window(self) -> None:
        if self.analysis is None:
            return
        from voice_lab.lab import MIN_CLIP_SECONDS
        from voice_lab.window import choose_window

        regions, who = self.analysis.regions, ""
        if self.speakers is not None and self.speakers.count > 1:
            regions, who = self.speakers.spans_of(self.chosen_speaker()), f"speaker {self.chosen_speaker() + 1}: "
        try:
            w = choose_window(regions, max(self.target_spin.value(), MIN_CLIP_SECONDS), CLONING_MIN_SECONDS)
        except VoiceLabError as e:
            if who:  # never leave another speaker's window in place
                self.waveform.set_windows([])
                self._window_dragged([])
            self._show_error(who + str(e))
            return
        self.waveform.set_windows([(s.start, s.end) for s in w.spans])
        self._window_dragged(self.spans())

    def _window_dragged(self, _spans) -> None:
        self._invalidate_clip()
        self._window_info()

    def _window_info(self) -> None:
        total = sum(b - a for a, b in self.spans())
        if not self.spans():
            self.window_label.setText("No window")
            self._update_buttons()
            return
        warn = "" if total > CLONING_MIN_SECONDS else f"  (needs > {CLONING_MIN_SECONDS:.0f} s)"
        self.window_label.setText(f"Window {total:.1f} s{warn}")
        self._update_buttons()

    def _invalidate_clip(self) -> None:
        self.clip = self.clip_key = None
        self.info["loud_win"].setText("–")
        self.info["loud_out"].setText("–")

    # --- rendering (background) --------------------------------------------------------------------------

    def ensure_clip(self, then) -> None:
        """Call then(clip) with the rendered window, rendering in the background when stale."""
        key = self._key()
        if self.clip is not None and self.clip_key == key:
            then(self.clip)
            return
        a = self.analysis
        if a is None or not self.spans():
            return
        spans, chain = self.spans(), self.chain_editor.chain.copy()
        self._set_busy("rendering")

        def ok(clip):
            self._set_busy("")
            self.clip, self.clip_key = clip, key
            self.info["loud_win"].setText(_fmt_loud(clip["before"]))
            self.info["loud_out"].setText(_fmt_loud(clip["after"]))
            then(clip)

        def bad(e):
            self._set_busy("")
            self._show_error(f"The filter chain failed: {error_text(e)}")

        self._render_op = BackgroundOp(lambda _r: render_clip(a.mono, a.rate, spans, chain), success=ok,
                                       failure=bad).start()

    def preview(self, which: str) -> None:
        self.ensure_clip(lambda clip: self.playAudio.emit(clip[which]))

    # --- cloning (engine thread) ---------------------------------------------------------------------------

    def clone(self) -> None:
        total = sum(b - a for a, b in self.spans())
        if total <= CLONING_MIN_SECONDS:
            self._show_error(f"The window is {total:.1f} s; cloning needs more than {CLONING_MIN_SECONDS:.0f} s "
                             "of speech. Drag its edges wider.")
            return
        self.ensure_clip(self._clone_clip)

    def _clone_clip(self, clip: dict) -> None:
        samples = clip["processed"]
        key = self.clip_key
        self._set_busy("cloning")
        self._show_note("Cloning in the background…")

        def fn(worker, _job):
            return worker.require_engine().voice_from_audio(samples, OUTPUT_RATE)

        def ok(voice):
            self._set_busy("")
            self.voice, self.voice_key, self.voice_clip = voice, key, (samples, OUTPUT_RATE)
            self.saved_path = None
            note = (f"Cloned from {samples.size / OUTPUT_RATE:.1f} s of audio. Try the test "
                    "sentence, then save it.")
            self._show_note(note)
            self._update_buttons()
            self.score_clone(voice, note)

        def bad(e):
            self._set_busy("")
            self._show_error(f"Cloning failed: {error_text(e)}")

        self._clone_job = self.client.submit(fn, label="clone voice", success=ok, failure=bad)

    #: options of the test take scored for likeness after cloning (tests use a small max_tokens)
    likeness_options: dict | None = None
    clone_likeness: float | None = None

    def score_clone(self, voice, note: str = ""):
        """The clone's likeness (engine_native.likeness): a take of the test sentence in the new
        voice, scored against it on the engine thread; shown under the Clone button."""
        text = self.test_edit.text().strip() or TEST_SENTENCE
        opts = dict(self.likeness_options or {})
        self.clone_likeness = None

        def fn(worker, job):
            from engine_native.likeness import best_take, plausible_seconds

            engine = worker.require_engine()
            # A test take needs no more tokens than its sentence can plausibly last; and it stops
            # when the job is cancelled (closing the window must not wait for a whole render).
            longest_tokens = int(plausible_seconds(text)[1] * engine.token_rate) + 1
            opts.setdefault("max_tokens", min(longest_tokens, engine.defaults["max_tokens"]))
            take = best_take(engine, text, voice, seeds=[0], options=opts, cancel=JobCancel(job))
            job.check()
            if take is None:
                return None
            return take.score

        def ok(score):
            if score is not None and self.voice is voice:
                self.clone_likeness = score
                self._show_note(f"{note} Likeness of a test take: {score:.2f}".strip())

        return self.client.submit(fn, label="clone likeness", success=ok, failure=lambda _e: None, background=True)

    def speak_test(self) -> None:
        if self.voice is not None:
            self.speakRequested.emit(self.test_edit.text(), self.voice, self.voice_name())

    def voice_name(self) -> str:
        return self.name_edit.text().strip() or "New voice"

    def _meta(self) -> dict:
        return {"chain": self.chain_editor.chain.to_json(indent=None)}

    def save_to_library(self) -> str | None:
        if self.voice is None:
            return None
        try:
            path = self.store.add(self.voice, self.voice_name(), clip=self.voice_clip, **self._meta())
        except Exception as e:  # noqa: BLE001
            self._show_error(f"Could not save the voice: {error_text(e)}")
            return None
        self.saved_path = path
        self._show_note(f"Saved to the library as “{self.voice_name()}”.")
        self.voiceSaved.emit(path)
        return path

    def export_voice(self, path: str | None = None) -> str | None:
        if self.voice is None:
            return None
        if path is None:
            from app.qt.voice_library import slug

            path, _ = QFileDialog.getSaveFileName(self, "Export voice", f"{slug(self.voice_name())}.voice.gguf",
                                                  "Chatterbox voice (*.voice.gguf)")
            if not path:
                return None
        if not path.endswith(".voice.gguf"):
            path += ".voice.gguf"
        try:
            self.voice.save(path, name=self.voice_name(), **self._meta())
        except Exception as e:  # noqa: BLE001
            self._show_error(f"Could not export the voice: {error_text(e)}")
            return None
        self._show_note(f"Exported to {path}")
        return path

    def export_model(self, path: str | None = None):
        """Write a copy of the loaded model whose built-in voice is the clone (in the background)."""
        model = self.client.model_path
        if self.voice is None or model is None:
            return None
        if path is None:
            from app.qt.voice_library import slug

            stem = os.path.splitext(os.path.basename(model))[0]
            path, _ = QFileDialog.getSaveFileName(self, "Export model with this voice",
                                                  f"{stem}-{slug(self.voice_name())}.gguf", "Chatterbox model (*.gguf)")
            if not path:
                return None
        if not path.endswith(".gguf"):
            path += ".gguf"
        voice, name = self.voice, self.voice_name()
        voice.meta.update(name=name, **self._meta())  # the baked voice's name and chain, as `info` shows them
        self._set_busy("baking")

        def ok(out):
            self._set_busy("")
            self.baked_path = str(out)
            self._show_note(f"Wrote {out}: the model with “{name}” as its built-in voice.")

        def bad(e):
            self._set_busy("")
            self._show_error(f"Could not write the model: {error_text(e)}")

        from engine_native.bake import bake_into_model

        return BackgroundOp(lambda _r: bake_into_model(model, voice, path), success=ok, failure=bad).start()
