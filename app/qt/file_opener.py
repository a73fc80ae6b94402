"""Files opened on the main window (the command line, a double-click, a drop, a second launch),
each for what it is (app.core.open_files): a model loads, a voice joins the library once the
user says so, a text, Markdown, HTML or EPUB file becomes the script (one undo step), and a
recording opens in the Voice Lab. A book file (EPUB, Markdown, HTML, text) first asks whether
to make an audiobook of it (app.qt.book_actions) or open it as the script; an EPUB's default
is the audiobook, the others' the script. Telling them apart reads GGUF headers and books, in
the background."""

from __future__ import annotations

import os

from PySide6.QtCore import QObject
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QMessageBox

from app.core.open_files import MODEL, RECORDING, SCRIPT, VOICE, CannotOpen, classify, kind_by_name, read_script
from app.qt.background import BackgroundOp, error_text


def _classify_all(paths) -> tuple[list, list[str]]:
    opened, problems = [], []
    for p in paths:
        try:
            opened.append(classify(p))
        except CannotOpen as e:
            problems.append(str(e))
    return opened, problems


class FileOpener(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.voice_prompt: QMessageBox | None = None
        self.book_prompt: QMessageBox | None = None

    def open(self, paths) -> BackgroundOp | None:
        """Opens each file; GGUF files (models, voices) once their headers are read in the
        background (returned, to wait on), the others at once (their names say what they are)."""
        paths = [os.fspath(p) for p in paths]
        gguf = [p for p in paths if kind_by_name(p) in (MODEL, VOICE)]
        named = [p for p in paths if p not in gguf]
        if named:
            self._route(_classify_all(named))
        if not gguf:
            return None
        return BackgroundOp(lambda _report: _classify_all(gguf), success=self._route,
                            failure=lambda e: self.w.show_error(error_text(e))).start()

    def _route(self, result) -> None:
        opened, problems = result
        if problems:
            self.w.show_error("\n".join(problems))
        by_kind = {k: [f.path for f in opened if f.kind == k] for k in (MODEL, VOICE, SCRIPT, RECORDING)}
        if by_kind[MODEL]:
            self.w.load_model(by_kind[MODEL][-1])  # one model at a time: the last one given
        if by_kind[VOICE]:
            self.ask_to_add_voices(by_kind[VOICE])
        for path in by_kind[SCRIPT][:1]:
            self.ask_book_or_script(path)
        if by_kind[RECORDING]:
            self.w.open_voice_lab(by_kind[RECORDING][0])
            if len(by_kind[RECORDING]) > 1:
                self.w.statusBar().showMessage(f"Opened {os.path.basename(by_kind[RECORDING][0])} in the Voice Lab; "
                                               "the Voice Lab works on one recording at a time", 10000)

    def ask_to_add_voices(self, paths: list[str]) -> QMessageBox:
        """Asks before a voice file joins the library (window-modal, no nested event loop)."""
        names = ", ".join(os.path.basename(p).removesuffix(".voice.gguf") for p in paths)
        box = QMessageBox(QMessageBox.Question, "Add to the voice library",
                          f"Add {names} to your voice library?", parent=self.w)
        box.setInformativeText("The library keeps a copy; the voice can then speak the script.")
        use = box.addButton("Add and use", QMessageBox.AcceptRole)
        add = box.addButton("Add", QMessageBox.AcceptRole)
        box.addButton(QMessageBox.Cancel)
        box.setDefaultButton(use)

        def done(_result: int) -> None:
            clicked = box.clickedButton()
            if clicked in (use, add):
                for i, p in enumerate(paths):
                    self.w.voices.add_voice_file(p, use=clicked is use and i == len(paths) - 1)
            self.voice_prompt = None

        box.finished.connect(done)
        self.voice_prompt = box
        box.open()
        return box

    def ask_book_or_script(self, path: str) -> QMessageBox:
        """An audiobook of the file, or the file as the script (window-modal, no nested event loop)."""
        name = os.path.basename(path)
        box = QMessageBox(QMessageBox.Question, "Open a book", f"Make an audiobook of {name}, or open it as the "
                          "script?", parent=self.w)
        box.setInformativeText("An audiobook: review its chapters, then render them into an M4B with chapters "
                               "and its cover. The script: its text in the editor, to play and edit.")
        book = box.addButton("Make an audiobook…", QMessageBox.AcceptRole)
        script = box.addButton("Open as the script", QMessageBox.AcceptRole)
        box.addButton(QMessageBox.Cancel)
        box.setDefaultButton(book if path.lower().endswith(".epub") else script)

        def done(_result: int) -> None:
            clicked = box.clickedButton()
            self.book_prompt = None
            if clicked is book:
                self.w.books.make_audiobook(path)
            elif clicked is script:
                self.open_script(path)

        box.finished.connect(done)
        self.book_prompt = box
        box.open()
        return box

    def open_script(self, path: str) -> BackgroundOp:
        name = os.path.basename(path)

        def ok(text: str) -> None:
            editor = self.w.editor
            cur = QTextCursor(editor.edit.document())
            cur.select(QTextCursor.Document)
            cur.insertText(text)  # one step on the editor's undo stack: Ctrl+Z brings the old script back
            editor.edit.moveCursor(QTextCursor.Start)
            self.w.show_studio()
            self.w.statusBar().showMessage(f"Opened {name} as the script (Ctrl+Z brings back the one before)", 10000)

        return BackgroundOp(lambda _report: read_script(path), success=ok,
                            failure=lambda e: self.w.show_error(f"Cannot open {name}: {error_text(e)}")).start()
