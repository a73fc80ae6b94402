"""The editor's script dialogs: the cast (the script's `Name:` speakers mapped to library
voices, remembered per script), the pronunciation lexicon editor (with "hear it"), and
"Export script..." (a cancellable progress dialog over the resumable long render).

The cast is remembered in the settings (Settings.casts, JSON) under a key made of the
script's speaker names (sorted, case-folded): the same cast comes back whenever a script
with those speakers is open, however its lines are edited.
"""

from __future__ import annotations

import json
import os
import re

from PySide6.QtCore import Qt, Signal
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




def load_global_lexicon(path: str | None = None):
    from engine_native.lexicon import Lexicon

    path = path or global_lexicon_path()
    return Lexicon.load(path) if os.path.isfile(path) else Lexicon()


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
    """word -> respelling, add/remove, "Hear it", saved atomically to the global lexicon."""

    hearRequested = Signal(str)  # the respelled word, to speak

    def __init__(self, path: str | None = None, parent=None):
        super().__init__(parent)
        self.path = path or global_lexicon_path()
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
        try:
            for w, s in load_global_lexicon(self.path).items():
                self.add_row(w, s)
        except Exception as e:  # noqa: BLE001 - a broken file is shown, not fatal
            self.status.setText(str(e))

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

    def save(self) -> bool:
        try:
            self.lexicon().save(self.path)
        except Exception as e:  # noqa: BLE001
            self.status.setText(f"Could not save: {e}")
            return False
        self.status.setText(f"Saved {len(self.entries())} entries")
        self.accept()
        return True


def export_script(client, text: str, path: str, *, voices: dict, params: dict, lexicon=None, best_of: int = 1,
                  speakers=None, model_path: str = "", parent=None, success=None, failure=None):
    """Render `text` into `path` through the resumable long render (app.core.long_render:
    finished pieces kept in PATH.parts/, so a cancelled or crashed export resumes), with a
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

    def fn(worker, job):
        import numpy as np

        from app.core.long_render import PartsCache, parts_dir_for
        from app.core.take import export_audio
        from engine_native.script import Progress, parse_script, render

        engine = worker.require_engine()
        vmap = {n: worker.voice(p) for n, p in voices.items()}
        items = parse_script(text, speakers=speakers or None)
        opts = dict(params)
        seed = opts.pop("seed", None)
        seed = 0 if seed is None or seed < 0 else int(seed)   # a fixed seed: a resumed export matches
        stream = {k: opts.pop(k) for k in ("first_chunk_tokens", "chunk_tokens") if k in opts}
        cache = PartsCache(parts_dir_for(path), model_path=model_path, stream_options=stream,
                           rate=engine.sample_rate)
        progress = Progress(items)
        from app.qt.engine_worker import JobCancel

        audio = []
        for part in render(engine, items, voices=vmap, seed=seed, lexicon=lexicon, best_of=best_of, options=opts,
                           stream_options=stream, cache=cache, cancel=JobCancel(job)):
            audio.append(part.samples)
            progress.update(part)
            if part.final:
                worker.progressed.emit(job, (progress.fraction, progress.eta_s, progress.done, progress.total))
        job.check()
        samples = np.concatenate(audio) if audio else np.zeros(0, np.float32)
        export_audio(samples, engine.sample_rate, path)
        cache.remove()
        return {"path": path, "seconds": samples.size / engine.sample_rate, "resumed": cache.hits}

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

    job = client.submit(fn, label="export script", success=ok, failure=bad, progress=on_progress)
    dlg.canceled.connect(job.cancel)
    dlg.show()
    return job, dlg
