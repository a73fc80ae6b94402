"""Make an audiobook, step one: the book's review. The book is read in the background
(app.core.book's importers); the dialog shows its title, author, language and cover and the
chapter list, each chapter with a box (body chapters ticked, front matter, back matter and notes
not) and a title to edit. The narrator, a cast and a lexicon for this book (BOOK.lexicon.json
beside it, as the command line reads it), and the output: an M4B (the default), an MP3 with
chapter marks, or a folder of chapter files. A book that cannot be read says why, in the dialog.

`accepted` leaves `job()` (app.core.book.job.BookJob) and `book` (the review applied) for the
render view (app.qt.book_render_view)."""

from __future__ import annotations

import json
import os

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.core.book import BookError
from app.core.book.job import OUTPUT_KINDS, BookJob, book_lexicon_path, default_output, output_kind
from app.qt.background import BackgroundOp, error_text
from app.qt.script_panels import CastDialog, LexiconEditor, read_lexicon

KIND_NAMES = {"m4b": "M4B audiobook (chapters, cover)", "mp3": "MP3 with chapter marks",
              "folder": "A folder of chapter files (MP3)"}
CHAPTER_KINDS = {"body": "Chapter", "front": "Front matter", "back": "Back matter", "notes": "Notes"}
COVER_SIZE = 132


def read_book(path: str):
    """(Book, the `Name:` speakers in its text, its cover as a QImage the dialog's size or None),
    off the GUI thread (a QImage may be made there); BookError when the book cannot be read."""
    from app.core.book import import_book
    from app.core.book.render import chapter_script
    from engine_native.script import speaker_names

    book = import_book(path)
    names = speaker_names("\n".join(chapter_script(c) for c in book.chapters))
    cover = QImage()
    if book.cover and cover.loadFromData(book.cover):
        cover = cover.scaled(COVER_SIZE, COVER_SIZE * 3 // 2, Qt.KeepAspectRatio, Qt.SmoothTransformation)
    return book, names, None if cover.isNull() else cover


class BookDialog(QDialog):
    """The review of one book before it is rendered."""

    loaded = Signal(bool)  # the book was read (True) or refused (False)

    def __init__(self, path: str, *, entries, voice: str, settings, options: dict, model_path: str, parent=None):
        super().__init__(parent)
        self.path, self.entries, self.settings = os.path.abspath(path), entries, settings
        self.options, self.model_path = dict(options), model_path
        self.book = None
        self.speakers: list[str] = []
        self.cast: dict[str, str] = self._saved_cast()
        self.lexicon_path = book_lexicon_path(self.path)
        self.error = ""
        self.cast_dialog = self.lexicon_dialog = None
        self.setWindowTitle("Make an audiobook")
        self.resize(760, 640)
        self._build(voice)
        self.op = BackgroundOp(lambda _r: read_book(self.path), success=self._show_book,
                               failure=self._show_error).start()

    # --- layout -------------------------------------------------------------------------------------

    def _build(self, voice: str) -> None:
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.cover = QLabel()
        self.cover.setFixedSize(COVER_SIZE, COVER_SIZE * 3 // 2)
        self.cover.setAlignment(Qt.AlignCenter)
        self.cover.setObjectName("Muted")
        self.cover.setText("No cover")
        top.addWidget(self.cover)
        form = QFormLayout()
        self.title_edit, self.author_edit = QLineEdit(), QLineEdit()
        self.title_edit.setPlaceholderText("Reading the book…")
        form.addRow("Title", self.title_edit)
        form.addRow("Author", self.author_edit)
        self.language_label, self.source_label = QLabel("—"), QLabel(os.path.basename(self.path))
        self.source_label.setObjectName("Muted")
        form.addRow("Language", self.language_label)
        form.addRow("File", self.source_label)
        self.notes_label = QLabel("")
        self.notes_label.setWordWrap(True)
        self.notes_label.setObjectName("Muted")
        form.addRow("", self.notes_label)
        top.addLayout(form, 1)
        lay.addLayout(top)
        self.error_label = QLabel("")
        self.error_label.setWordWrap(True)
        self.error_label.setObjectName("Error")
        self.error_label.setStyleSheet("color: #e5484d;")
        self.error_label.hide()
        lay.addWidget(self.error_label)
        hint = QLabel("Tick the chapters to read; double-click a title to rename it.")
        hint.setObjectName("Muted")
        lay.addWidget(hint)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Chapter", "Kind", "Words"])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        for col in (1, 2):
            header.setSectionResizeMode(col, QHeaderView.ResizeToContents)
        self.table.verticalHeader().setVisible(True)
        self.table.itemChanged.connect(lambda _i: self._update_ok())
        lay.addWidget(self.table, 1)
        self.count_label = QLabel("")
        self.count_label.setObjectName("Muted")
        lay.addWidget(self.count_label)

        opts = QFormLayout()
        voice_row = QHBoxLayout()
        self.voice_combo = QComboBox()
        for e in self.entries:
            self.voice_combo.addItem(e.name, e.path)
        self.voice_combo.setCurrentIndex(max(0, self.voice_combo.findData(voice)))
        voice_row.addWidget(self.voice_combo, 1)
        self.cast_button = QPushButton("Cast…")
        self.cast_button.setToolTip("Voices for the book's “Name:” speakers")
        self.cast_button.clicked.connect(self.edit_cast)
        self.lexicon_button = QPushButton("Pronunciations…")
        self.lexicon_button.setToolTip("This book's pronunciations, kept beside it in "
                                       + os.path.basename(self.lexicon_path))
        self.lexicon_button.clicked.connect(self.edit_lexicon)
        voice_row.addWidget(self.cast_button)
        voice_row.addWidget(self.lexicon_button)
        opts.addRow("Narrator", voice_row)
        out_row = QHBoxLayout()
        self.kind_combo = QComboBox()
        for k in OUTPUT_KINDS:
            self.kind_combo.addItem(KIND_NAMES[k], k)
        self.kind_combo.currentIndexChanged.connect(self._kind_changed)
        self.output_edit = QLineEdit(default_output(self.path, "m4b"))
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self.browse)
        out_row.addWidget(self.kind_combo)
        out_row.addWidget(self.output_edit, 1)
        out_row.addWidget(self.browse_button)
        opts.addRow("Save as", out_row)
        lay.addLayout(opts)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Cancel)
        self.render_button = self.buttons.addButton("Render audiobook", QDialogButtonBox.AcceptRole)
        self.render_button.setEnabled(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)

    # --- the book -----------------------------------------------------------------------------------

    def _show_book(self, result) -> None:
        self.book, self.speakers, cover = result
        b = self.book
        self.title_edit.setText(b.title)
        self.title_edit.setPlaceholderText("")
        self.author_edit.setText(b.author)
        self.language_label.setText(b.language or "not given (English assumed)")
        self.source_label.setText(f"{os.path.basename(self.path)} · {b.format}")
        self.notes_label.setText("\n".join(b.notes[:4]))
        if cover is not None:
            self.cover.setPixmap(QPixmap.fromImage(cover))
        self.table.blockSignals(True)
        self.table.setRowCount(len(b.chapters))
        for r, c in enumerate(b.chapters):
            title = QTableWidgetItem(c.title)
            title.setFlags(Qt.ItemIsEnabled | Qt.ItemIsSelectable | Qt.ItemIsEditable | Qt.ItemIsUserCheckable)
            title.setCheckState(Qt.Checked if c.included else Qt.Unchecked)
            title.setToolTip(c.source)
            kind = QTableWidgetItem(CHAPTER_KINDS.get(c.kind, c.kind))
            words = QTableWidgetItem(f"{c.words:,}")
            words.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
            for item in (kind, words):
                item.setFlags(Qt.ItemIsEnabled | Qt.ItemIsSelectable)
            self.table.setItem(r, 0, title)
            self.table.setItem(r, 1, kind)
            self.table.setItem(r, 2, words)
        self.table.blockSignals(False)
        self._update_ok()
        self.loaded.emit(True)

    def _show_error(self, e: BaseException) -> None:
        self.error = error_text(e)
        self.error_label.setText(self.error)
        self.error_label.show()
        self.title_edit.setPlaceholderText("")
        for w in (self.table, self.voice_combo, self.cast_button, self.lexicon_button, self.kind_combo,
                  self.output_edit, self.browse_button, self.title_edit, self.author_edit):
            w.setEnabled(False)
        self.loaded.emit(False)

    def chapter_row(self, row: int) -> tuple[bool, str]:
        item = self.table.item(row, 0)
        return item.checkState() == Qt.Checked, " ".join(item.text().split())

    def set_chapter(self, row: int, *, included: bool | None = None, title: str | None = None) -> None:
        item = self.table.item(row, 0)
        if included is not None:
            item.setCheckState(Qt.Checked if included else Qt.Unchecked)
        if title is not None:
            item.setText(title)

    def _update_ok(self) -> None:
        if self.book is None:
            return
        rows = [self.chapter_row(r) for r in range(self.table.rowCount())]
        chosen = [i for i, (on, _t) in enumerate(rows) if on]
        words = sum(self.book.chapters[i].words for i in chosen)
        untitled = any(on and not t for on, t in rows)
        self.count_label.setText(f"{len(chosen)} of {len(rows)} chapters, {words:,} words"
                                 + (" · a ticked chapter needs a title" if untitled else ""))
        self.render_button.setEnabled(bool(chosen) and not untitled)

    # --- cast, lexicon, output ----------------------------------------------------------------------

    def _saved_cast(self) -> dict[str, str]:
        try:
            return dict(json.loads(self.settings.book_casts or "{}").get(self.path, {}))
        except (ValueError, AttributeError, TypeError):
            return {}

    def edit_cast(self) -> CastDialog:
        dlg = CastDialog(self.speakers, self.entries, self.cast, self)
        self.cast_dialog = dlg

        def keep() -> None:
            self.cast = dlg.cast()
            try:
                casts = json.loads(self.settings.book_casts or "{}")
            except ValueError:
                casts = {}
            casts[self.path] = self.cast
            self.settings.book_casts = json.dumps(casts)

        dlg.accepted.connect(keep)
        dlg.open()
        return dlg

    def edit_lexicon(self) -> BackgroundOp:
        """The book's lexicon file, read in the background, in the app's lexicon editor."""
        def show(lex) -> None:
            self.lexicon_dialog = LexiconEditor(self.lexicon_path, lex, self)
            self.lexicon_dialog.setWindowTitle(f"Pronunciations for {self.title_edit.text() or 'this book'}")
            self.lexicon_dialog.open()

        return BackgroundOp(lambda _r: read_lexicon(self.lexicon_path), success=show,
                            failure=lambda e: self._show_note(f"The book's lexicon cannot be read: {error_text(e)}")
                            ).start()

    def _show_note(self, text: str) -> None:
        self.notes_label.setText(text)

    def _kind_changed(self) -> None:
        kind = self.kind_combo.currentData()
        current = self.output_edit.text().strip()
        stem = os.path.splitext(current)[0] if current else os.path.splitext(self.path)[0]
        stem = stem.removesuffix("-chapters")
        self.output_edit.setText(stem + "-chapters" if kind == "folder" else f"{stem}.{kind}")

    def browse(self) -> None:
        kind = self.kind_combo.currentData()
        if kind == "folder":
            path = QFileDialog.getExistingDirectory(self, "Folder for the chapter files", self.output_edit.text())
        else:
            path, _ = QFileDialog.getSaveFileName(self, "Save the audiobook", self.output_edit.text(),
                                                  "M4B audiobook (*.m4b)" if kind == "m4b" else "MP3 (*.mp3)")
        if path:
            self.output_edit.setText(path)

    # --- the result ---------------------------------------------------------------------------------

    def accept(self) -> None:
        """Render, once the output names a file of the chosen kind in a folder that exists."""
        out, kind = self.output_edit.text().strip(), self.kind_combo.currentData()
        problem = ""
        if not out:
            problem = "Choose where to save the audiobook."
        elif kind != "folder":
            try:
                if output_kind(out) != kind:
                    problem = f"{os.path.basename(out)} is not a .{kind} file: give the name ending in .{kind}."
            except BookError as e:
                problem = str(e)
        if not problem and not os.path.isdir(os.path.dirname(os.path.abspath(out)) or "."):
            problem = f"The folder {os.path.dirname(os.path.abspath(out))} does not exist."
        if problem:
            self.error_label.setText(problem)
            self.error_label.show()
            return
        super().accept()

    def job(self, seed: int) -> BookJob:
        """The reviewed choices as a job (the book's chapters as ticked and titled)."""
        rows = [self.chapter_row(r) for r in range(self.table.rowCount())]
        renames = {i + 1: t for i, (_on, t) in enumerate(rows) if t and t != self.book.chapters[i].title}
        return BookJob(self.path, output=self.output_edit.text().strip(), kind=self.kind_combo.currentData(),
                       chapters=[i + 1 for i, (on, _t) in enumerate(rows) if on], renames=renames,
                       title=self.title_edit.text().strip(), author=self.author_edit.text().strip(),
                       voice=self.voice_combo.currentData() or "", cast=dict(self.cast),
                       lexicon=self.lexicon_path, options=self.options, seed=seed, model_path=self.model_path)
