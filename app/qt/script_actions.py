"""The script: playing it (as a plain stream, or as a script when it has timed pauses, a cast, a
lexicon or best-of-N), regenerating one sentence, the cast and "speak the selected lines
with" (one undo step in the editor), the pronunciation lexicon, best-of-N and exporting the
script to a file. The dialogs are app.qt.script_panels'."""

from __future__ import annotations

import os

from PySide6.QtCore import QObject
from PySide6.QtGui import QActionGroup, QTextCursor
from PySide6.QtWidgets import QFileDialog

from app.qt.background import error_text
from app.qt.script_panels import (
    CastDialog,
    LexiconEditor,
    LexiconFile,
    export_script,
    load_cast,
    save_cast,
    script_options,
)
from app.qt.take_actions import export_filters
from engine_native.errors import Cancelled
from engine_native.script import assign_speaker, speaker_at, speaker_label, speaker_names

BEST_OF_CHOICES = (1, 2, 3, 4, 5)


class ScriptActions(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.settings = window.settings
        self.editor = window.editor
        self.controller = window.controller
        self.lexicon_file = LexiconFile(parent=self)  # the global lexicon (the CLI's too)
        self.lexicon_file.failed.connect(lambda t: self.w.statusBar().showMessage(t, 8000))
        self.cast_dialog = self.lexicon_dialog = self.script_export = None

    @property
    def lexicon_path(self) -> str:
        return self.lexicon_file.path

    @lexicon_path.setter
    def lexicon_path(self, path: str) -> None:  # tests use a lexicon of their own
        self.lexicon_file.set_path(path)

    def add_menu(self, m) -> None:
        """The ⋯ menu's Script submenu."""
        script = m.addMenu("Script")
        script.addAction("Cast…", lambda: self.edit_cast())
        script.addAction("Pronunciations…", lambda: self.edit_lexicon())
        self.assign_menu = script.addMenu("Speak selected lines with")
        self.assign_menu.aboutToShow.connect(self.fill_assign_menu)
        self.best_of_menu = script.addMenu("Best of N takes")
        best = QActionGroup(self.best_of_menu)
        for n in BEST_OF_CHOICES:
            a = self.best_of_menu.addAction("1 (no extra takes)" if n == 1 else f"Best of {n}")
            a.setCheckable(True)
            a.setChecked(self.settings.best_of == n)
            a.triggered.connect(lambda _c=False, n=n: setattr(self.settings, "best_of", n))
            best.addAction(a)
        script.addAction("Export script…", lambda: self.export_script())

    # --- playing ------------------------------------------------------------------------------------

    def script_options(self, text: str) -> dict | None:
        """How the text plays (PlaybackController.play's `script=`): None for a plain stream."""
        return script_options(text, load_cast(self.settings, self.editor.text()), self.lexicon_file.lexicon,
                              self.settings.best_of)

    def play_text(self, text: str, offset: int):
        if self.controller.live:
            self.editor.live_button.setChecked(False)
        voices = self.w.voices
        return self.controller.play(text, offset, voices.voice(), self.w.params(), voices.name(),
                                    script=self.script_options(text))

    def regenerate_at(self, pos: int) -> bool:
        """Regenerate the sentence at `pos` in its own voice (the cast's for its speaker) and
        with the lexicon, as the take was rendered."""
        text, voice, lexicon = self.editor.text(), self.w.voices.voice(), None
        opts = self.script_options(text)
        if opts is not None:
            voice = opts["voices"].get(speaker_at(text, pos), voice)
            lexicon = opts["lexicon"]
        return self.controller.regenerate(pos, voice, self.w.params(), lexicon=lexicon)

    # --- the cast -----------------------------------------------------------------------------------

    def edit_cast(self):
        text = self.editor.text()
        dlg = CastDialog(speaker_names(text), self.w.library.entries(), load_cast(self.settings, text), self.w)
        self.cast_dialog = dlg
        dlg.accepted.connect(lambda: save_cast(self.settings, text, dlg.cast()))
        dlg.open()
        return dlg

    def fill_assign_menu(self) -> None:
        self.assign_menu.clear()
        builtin = self.w.client.builtin_voice_name or "Built-in"
        self.assign_menu.addAction(builtin, lambda: self.assign_selection("", builtin))
        for e in self.w.library.entries()[1:]:
            self.assign_menu.addAction(e.name, lambda p=e.path, n=e.name: self.assign_selection(p, n))

    def assign_selection(self, voice_path: str, voice_name: str) -> str:
        """Give the selected lines (or the cursor's line) a speaker prefix named after the voice,
        and cast that name to the voice; one undo step. Returns the speaker name."""
        name = speaker_label(voice_name)
        cur = self.editor.edit.textCursor()
        text = self.editor.text()
        start, end = cur.selectionStart(), cur.selectionEnd()
        if end > start and text[end - 1] == "\n":
            end -= 1  # a selection that ends at a line's start leaves that line out
        a = text.rfind("\n", 0, start) + 1
        b = text.find("\n", end)
        b = len(text) if b < 0 else b
        cur.setPosition(a)
        cur.setPosition(b, QTextCursor.KeepAnchor)
        cur.insertText(assign_speaker(text[a:b], name))
        new_text = self.editor.text()
        cast = load_cast(self.settings, new_text)
        cast[name] = voice_path
        save_cast(self.settings, new_text, cast)
        self.w.statusBar().showMessage(f"Lines spoken by {voice_name} (as “{name}” in the cast).", 6000)
        return name

    # --- the lexicon --------------------------------------------------------------------------------

    def edit_lexicon(self):
        dlg = LexiconEditor(self.lexicon_file.path, self.lexicon_file.lexicon, self.w)
        self.lexicon_dialog = dlg
        dlg.lexiconSaved.connect(self.lexicon_file.saved)
        dlg.hearRequested.connect(lambda say: self.controller.play(say, 0, self.w.voices.voice(), self.w.params(),
                                                                   self.w.voices.name(), in_history=False))
        dlg.open()
        return dlg

    # --- export -------------------------------------------------------------------------------------

    def export_script(self, path: str | None = None):
        """The script into a file, on the engine thread, with a progress dialog; returns (job, dialog)."""
        text = self.editor.text()
        if not text.strip():
            self.w.show_error("Nothing to export: the script is empty.")
            return None
        if path is None:
            start = os.path.join(self.settings.last_open_dir or os.path.expanduser("~"), "script.wav")
            path, _ = QFileDialog.getSaveFileName(self.w, "Export script", start, export_filters())
            if not path:
                return None
        opts = self.script_options(text) or {}
        voices = {None: self.w.voices.voice(), **opts.get("voices", {})}

        def ok(r):
            self.w.statusBar().showMessage(f"Exported {r['seconds']:.1f} s to {r['path']}", 8000)

        def bad(e):
            if isinstance(e, Cancelled):
                self.w.statusBar().showMessage("Export cancelled; exporting again resumes where it stopped", 8000)
            else:
                self.w.show_error(f"Export failed: {error_text(e)}")

        self.script_export = export_script(
            self.w.client, text, path, voices=voices, params={**self.w.params(), **self.controller.stream_options},
            lexicon=opts.get("lexicon"), best_of=self.settings.best_of, speakers=opts.get("speakers"),
            model_path=self.settings.model_path, parent=self.w, success=ok, failure=bad)
        return self.script_export
