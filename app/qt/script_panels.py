"""The editor's script dialogs: the cast (the script's `Name:` speakers mapped to library
voices, remembered per script), the pronunciation lexicon (the file as the app uses it, and
its editor with "hear it"), and "Export script..." (a cancellable progress dialog over the
resumable long render, which runs on the engine thread).

The cast is remembered in the settings (Settings.casts, JSON) under a key made of the
script's speaker names (sorted, case-folded): the same cast comes back whenever a script
with those speakers is open, however its lines are edited.
"""

from __future__ import annotations

import json
import os
import re

from PySide6.QtCore import QFileSystemWatcher, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QProgressDialog,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.core.paths import global_lexicon_path
from app.qt.background import BackgroundOp, error_text
from engine_native.script import speaker_names

_TIMED = re.compile(r"\[\s*pause\s+[\d.]|<\s*break\b|<\s*/?\s*p\s*>", re.IGNORECASE)


def cast_key(names) -> str:
    return "|".join(sorted({" ".join(n.split()).casefold() for n in names}))


def load_cast(settings, text: str) -> dict[str, str]:
    """The remembered cast of this script's speakers: name -> library voice path ("" = built-in)."""
    names = speaker_names(text)
    try:
        saved = json.loads(settings.casts or "{}").get(cast_key(names), {})
    except (ValueError, AttributeError):
        saved = {}
    return {n: saved[n] for n in names if n in saved and (not saved[n] or os.path.exists(saved[n]))}


def save_cast(settings, text: str, cast: dict[str, str]) -> None:
    try:
        allc = json.loads(settings.casts or "{}")
    except ValueError:
        allc = {}
    allc[cast_key(speaker_names(text))] = dict(cast)
    settings.casts = json.dumps(allc)


def read_lexicon(path: str):
    """The lexicon in `path` (an empty one when there is no such file); off the GUI thread."""
    from engine_native.lexicon import Lexicon

    return Lexicon.load(path) if os.path.isfile(path) else Lexicon()


class LexiconFile(QObject):
    """The pronunciation lexicon as the app uses it: read in the background at the start and
    whenever its file changes (QFileSystemWatcher: the command line or an editor may change
    it), replaced at once when the app's editor saves it. `lexicon` is None while it is empty
    or unreadable (`error` says why)."""

    failed = Signal(str)

    def __init__(self, path: str | None = None, parent=None):
        super().__init__(parent)
        self.lexicon = None
        self.error = ""
        self._reading = 0
        self._watch = QFileSystemWatcher(self)
        self._watch.fileChanged.connect(lambda _p: self.reload())
        self._watch.directoryChanged.connect(lambda _p: self.reload())
        self.path = ""
        self.set_path(path or global_lexicon_path())

    def set_path(self, path: str) -> None:
        self.path = path
        if self._watch.files() or self._watch.directories():
            self._watch.removePaths(self._watch.files() + self._watch.directories())
        self.reload()

    def reload(self) -> BackgroundOp:
        self._reading += 1
        reading, path = self._reading, self.path

        def read(_report):
            folder = os.path.dirname(path)
            return read_lexicon(path), [p for p in (path, folder) if os.path.exists(p)]

        def ok(result):
            lex, watch = result
            if reading == self._reading:
                self.saved(lex)
                self._watch_paths(watch)

        def bad(e):
            if reading == self._reading:
                self.lexicon, self.error = None, error_text(e)
                self.failed.emit(f"Lexicon not used: {self.error}")

        return BackgroundOp(read, success=ok, failure=bad).start()

    def _watch_paths(self, paths: list[str]) -> None:
        watched = set(self._watch.files() + self._watch.directories())
        missing = [p for p in paths if p not in watched]
        if missing:
            self._watch.addPaths(missing)

    def saved(self, lexicon) -> None:
        """The lexicon the file now holds (the editor just wrote it)."""
        self.lexicon = lexicon if lexicon is not None and len(lexicon) else None
        self.error = ""


def script_options(text: str, cast: dict, lexicon, best_of: int) -> dict | None:
    """What MainWindow passes as `script=` to PlaybackController.play: None when the text
    needs nothing of a script (no timed pause, no mapped speaker, no lexicon entry, one take),
    so plain text keeps the engine's own stream."""
    names = [n for n in speaker_names(text) if n in cast]
    lex = lexicon if lexicon is not None and len(lexicon) else None
    if not names and lex is None and best_of <= 1 and not _TIMED.search(text):
        return None
    return {"voices": {n: cast[n] for n in names}, "speakers": names or None, "lexicon": lex,
            "best_of": max(1, int(best_of))}


class CastDialog(QDialog):
    """The script's speakers, each with a voice of the library."""

    def __init__(self, names: list[str], entries, cast: dict[str, str], parent=None):
        super().__init__(parent)
        self.setWindowTitle("Cast")
        lay = QVBoxLayout(self)
        if names:
            lay.addWidget(QLabel("Lines that start with “Name:” are spoken by that name's voice."))
        else:
            lay.addWidget(QLabel("The script has no speakers: start a line with “Name: ” to give it one."))
        form = QFormLayout()
        self.combos: dict[str, QComboBox] = {}
        for n in names:
            c = QComboBox()
            c.addItem("(the script's voice)", None)
            for e in entries:
                c.addItem(e.name, e.path)
            i = c.findData(cast[n]) if n in cast else 0
            c.setCurrentIndex(max(0, i))
            form.addRow(n, c)
            self.combos[n] = c
        lay.addLayout(form)
        bb = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        bb.accepted.connect(self.accept)
        bb.rejected.connect(self.reject)
        lay.addWidget(bb)

    def cast(self) -> dict[str, str]:
        return {n: c.currentData() for n, c in self.combos.items() if c.currentData() is not None}


class LexiconEditor(QDialog):
    """word -> respelling, add/remove, "Hear it", saved atomically (in the background)."""

    hearRequested = Signal(str)  # the respelled word, to speak
    lexiconSaved = Signal(object)  # the Lexicon written

    def __init__(self, path: str, lexicon=None, parent=None):
        super().__init__(parent)
        self.path = path
        self.setWindowTitle("Pronunciations")
        self.resize(460, 380)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("Words the voice says wrong, and how to spell them so it says them right.\n"
                             "Whole words, any case. Saved to " + self.path))
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Word", "Say it as"])
        self.table.horizontalHeader().setStretchLastSection(True)
        lay.addWidget(self.table, 1)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add")
        self.add_button.clicked.connect(lambda: self.add_row("", ""))
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_row)
        self.hear_button = QPushButton("Hear it")
        self.hear_button.setToolTip("Speak the respelling of the selected word")
        self.hear_button.clicked.connect(self.hear)
        for b in (self.add_button, self.remove_button, self.hear_button):
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        self.status = QLabel("")
        self.status.setObjectName("Muted")
        lay.addWidget(self.status)
        bb = QDialogButtonBox(QDialogButtonBox.Save | QDialogButtonBox.Close)
        bb.accepted.connect(self.save)
        bb.rejected.connect(self.reject)
        lay.addWidget(bb)
        for w, s in (lexicon.items() if lexicon is not None else []):
            self.add_row(w, s)

    def add_row(self, word: str, say: str) -> int:
        r = self.table.rowCount()
        self.table.insertRow(r)
        self.table.setItem(r, 0, QTableWidgetItem(word))
        self.table.setItem(r, 1, QTableWidgetItem(say))
        self.table.setCurrentCell(r, 0)
        return r

    def remove_row(self) -> None:
        r = self.table.currentRow()
        if r >= 0:
            self.table.removeRow(r)

    def entries(self) -> list[tuple[str, str]]:
        out = []
        for r in range(self.table.rowCount()):
            w, s = (self.table.item(r, c).text().strip() if self.table.item(r, c) else "" for c in (0, 1))
            if w and s:
                out.append((w, s))
        return out

    def lexicon(self):
        from engine_native.lexicon import Lexicon

        lex = Lexicon()
        for w, s in self.entries():
            lex.add(w, s)
        return lex

    def hear(self) -> str | None:
        r = self.table.currentRow()
        item = self.table.item(r, 1) if r >= 0 else None
        say = item.text().strip() if item else ""
        if say:
            self.hearRequested.emit(say)
            return say
        return None

    def save(self) -> BackgroundOp:
        """Write the lexicon (atomically, in the background); the dialog closes when it is written."""
        lex, n = self.lexicon(), len(self.entries())

        def ok(_path):
            self.status.setText(f"Saved {n} entries")
            self.lexiconSaved.emit(lex)
            self.accept()

        return BackgroundOp(lambda _r: lex.save(self.path), success=ok,
                            failure=lambda e: self.status.setText(f"Could not save: {error_text(e)}")).start()


def export_script(client, text: str, path: str, *, voices: dict, params: dict, lexicon=None, best_of: int = 1,
                  speakers=None, model_path: str = "", parent=None, success=None, failure=None):
    """Render `text` into `path` (EngineClient.export_script: the resumable long render, whose
    finished pieces stay in PATH.parts/, so a cancelled or crashed export resumes), with a
    QProgressDialog showing progress and the time left; Cancel stops within one chunk.
    Returns (job, dialog)."""
    from app.core.long_render import format_eta

    dlg = QProgressDialog("Rendering the script…", "Cancel", 0, 1000, parent)
    dlg.setWindowTitle("Export script")
    dlg.setWindowModality(Qt.WindowModal)
    dlg.setMinimumDuration(0)
    dlg.setAutoClose(False)
    dlg.setAutoReset(False)
    dlg.setValue(0)

    def on_progress(p):
        frac, eta, done, total = p
        dlg.setValue(round(frac * 1000))
        dlg.setLabelText(f"Sentence {done} of {total} · {format_eta(eta)} left")

    def ok(r):
        dlg.close()
        if success:
            success(r)

    def bad(e):
        dlg.close()
        if failure:
            failure(e)

    job = client.export_script(text, path, voices=voices, params=params, lexicon=lexicon, best_of=best_of,
                               speakers=speakers, model_path=model_path, success=ok, failure=bad,
                               progress=on_progress)
    dlg.canceled.connect(job.cancel)
    dlg.show()
    return job, dlg
