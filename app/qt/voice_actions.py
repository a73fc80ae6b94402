"""The voice that speaks: the toolbar's voice picker and the library panel kept in step, adding
a voice (a recording opens in the Voice Lab; a .voice.gguf joins the library), a voice's
sample, and readying the chosen voice for streaming."""

from __future__ import annotations

import os

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog

from app.core.open_files import AUDIO_EXTENSIONS
from app.qt.background import BackgroundOp, error_text
from app.qt.icons import icon
from app.qt.library_panel import BUILTIN

SAMPLE_SENTENCE = "Hello! This is a short sample of my voice."


class VoiceActions(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.settings = window.settings
        self.library = window.library
        self.combo = window.toolbar.voice_combo
        lib = self.library
        lib.voiceChosen.connect(self._chosen)
        lib.addRequested.connect(lambda: self.add_voice())
        lib.sampleRequested.connect(self.play_sample)
        lib.changed.connect(self.sync_combo)
        lib.error.connect(lambda t: self.w.show_error(t))
        self.combo.currentIndexChanged.connect(self._combo_changed)
        window.toolbar.add_voice_action.triggered.connect(lambda: self.add_voice())
        self.sync_combo()
        lib.select(self.settings.voice if os.path.exists(self.settings.voice or "") else BUILTIN)

    def voice(self) -> str:
        """The chosen voice as the engine's operations take it: a library path, "" for the built-in."""
        v = self.settings.voice
        return v if v and os.path.exists(v) else ""

    def name(self) -> str:
        return self.library.name_of(self.voice())

    def sync_combo(self) -> None:
        self.combo.blockSignals(True)
        self.combo.clear()
        for e in self.library.entries():
            self.combo.addItem(icon("model" if not e.path else "voice"), e.name, e.path)
        i = self.combo.findData(self.voice())
        self.combo.setCurrentIndex(max(0, i))
        self.combo.blockSignals(False)

    def _combo_changed(self, i: int) -> None:
        path = self.combo.itemData(i)
        if path is not None:
            self.library.select(path)

    def _chosen(self, path: str) -> None:
        changed = path != self.settings.voice
        self.settings.voice = path
        if changed:
            self.prepare_stream()
        i = self.combo.findData(path)
        if i >= 0 and i != self.combo.currentIndex():
            self.combo.blockSignals(True)
            self.combo.setCurrentIndex(i)
            self.combo.blockSignals(False)

    def prepare_stream(self) -> None:
        """The chosen voice readied for streaming with the current settings, in the background
        (Engine.prepare_stream): its first Play then speaks as soon as later ones do."""
        if self.w.client.info is not None:
            self.w.client.prepare_stream(self.voice(), self.w.params())

    def saved(self, path: str) -> None:
        """A voice the Voice Lab saved to the library: listed and chosen."""
        self.library.reload(select=path)
        self.w.statusBar().showMessage(f"Saved {os.path.basename(path)} to the library", 6000)

    def add_voice(self, path: str | None = None) -> None:
        """Clone a voice from a recording: the file dialog, then the Voice Lab."""
        if path is None:
            exts = " ".join(f"*{e}" for e in sorted(AUDIO_EXTENSIONS))
            path, _ = QFileDialog.getOpenFileName(self.w, "Clone a voice from a recording",
                                                  self.settings.last_open_dir or os.path.expanduser("~"),
                                                  f"Audio and video ({exts});;All files (*)")
            if not path:
                return
        self.settings.last_open_dir = os.path.dirname(path)
        self.w.open_voice_lab(path)

    def add_voice_file(self, path: str, use: bool = True) -> BackgroundOp:
        """A .voice.gguf into the library (a copy, under its own name), in the background;
        `use`: it becomes the voice that speaks."""
        store, name = self.w.store, os.path.basename(path)

        def added(copy: str) -> None:
            self.library.reload(select=copy if use else None)
            self.w.statusBar().showMessage(f"Added {name} to the voice library", 6000)

        return BackgroundOp(lambda _report: store.add_file(path), success=added,
                            failure=lambda e: self.w.show_error(f"Cannot add {name} to the library: {error_text(e)}")
                            ).start()

    def play_sample(self, path: str) -> None:
        self.w.editor.live_button.setChecked(False)
        self.w.controller.play(SAMPLE_SENTENCE, 0, path, self.w.params(), self.library.name_of(path),
                               in_history=False)
