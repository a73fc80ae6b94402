"""The model manager: the models on this computer (variant, precision, size, languages, where
each came from; use, delete, open a file, convert a folder) and the published ones to get from
Hugging Face (download with progress, speed and time left; pause and resume, also after a
restart; checksums verified; converted and quantised). Lays out and binds app.core's
ModelManager; its work runs as background operations, never on the GUI thread."""

from __future__ import annotations

import os
import threading

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from app.core.model_manager import ModelManager, Progress, size_text
from app.qt import theme
from app.qt.background import BackgroundOp, error_text
from app.qt.icons import icon
from app.qt.script_editor import card
from engine_native.errors import Cancelled

QUANT_CHOICES = [("q4_0", "q4_0 · smallest, fastest"), ("q8_0", "q8_0 · near lossless"), ("f16", "f16"),
                 ("f32", "f32 · reference precision")]


def choose_model_file(parent) -> str | None:
    """The file dialog for a GGUF model (the manager's and the welcome dialog's "Open a file")."""
    path, _ = QFileDialog.getOpenFileName(parent, "Open a model", os.path.expanduser("~"), "GGUF models (*.gguf)")
    return path or None


def _card(title: str) -> tuple[QFrame, QVBoxLayout, QLabel]:
    frame, body, head = card(title)
    return frame, body, head.itemAt(0).widget()


class ModelManagerDialog(QDialog):
    modelChosen = Signal(str)   # "Use", "Open a file…", or a model just made: the window loads it

    def __init__(self, models_dir: str, parent=None, current_model=lambda: "", catalogue=None):
        super().__init__(parent)
        self.manager = ModelManager(models_dir, catalogue)
        self.catalogue = self.manager.catalogue
        self.current_model = current_model
        self.models, self.pending = [], []
        self.op: BackgroundOp | None = None
        self.stop: threading.Event | None = None
        self.active_key: str | None = None     # the catalogue model being fetched
        self.active_paused: str | None = None  # the paused download shown
        self.setWindowTitle("Models")
        self.setMinimumWidth(780)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(18, 16, 18, 16)
        lay.setSpacing(12)

        frame, box, _ = _card("On this computer")
        self.table = QTreeWidget()
        self.table.setColumnCount(5)
        self.table.setHeaderLabels(["Model", "Precision", "Size", "Languages", "From"])
        self.table.setRootIsDecorated(False)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setMinimumHeight(120)
        header = self.table.header()
        for col in range(4):
            header.setSectionResizeMode(col, QHeaderView.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.itemDoubleClicked.connect(lambda _it, _c: self.use_selected())
        self.table.itemSelectionChanged.connect(self._update_buttons)
        box.addWidget(self.table)
        row = QHBoxLayout()
        self.use_button = QPushButton(" Use")
        self.use_button.setObjectName("Primary")
        self.use_button.clicked.connect(self.use_selected)
        self.delete_button = QPushButton(" Delete…")
        self.delete_button.clicked.connect(self.delete_selected)
        self.open_button = QPushButton(" Open a file…")
        self.open_button.clicked.connect(lambda: self.open_file())
        self.convert_button = QPushButton(" Convert a folder…")
        self.convert_button.setToolTip("A Hugging Face snapshot folder you have (t3_*.safetensors, s3gen*, ve.*, "
                                       "conds.pt, the tokenizer files)")
        self.convert_button.clicked.connect(lambda: self.convert_folder())
        for b in (self.use_button, self.delete_button):
            row.addWidget(b)
        row.addStretch(1)
        for b in (self.open_button, self.convert_button):
            row.addWidget(b)
        box.addLayout(row)
        lay.addWidget(frame)

        frame, box, _ = _card("Get a model from Hugging Face")
        intro = QLabel("The published weights are downloaded (checksums checked; a download can pause and resume, "
                       "also after a restart), then converted into one model file at the precision chosen.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        box.addWidget(intro)
        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(10)
        self.get_buttons: dict[str, QPushButton] = {}
        self.entry_notes: dict[str, QLabel] = {}
        for r, entry in enumerate(self.catalogue.values()):
            about = QVBoxLayout()
            about.setSpacing(2)
            for text, style in ((f"<b>{entry.name}</b> · {entry.languages}", ""), (f"{entry.about} · {entry.repo}",
                                                                                   "Muted")):
                label = QLabel(text)
                label.setObjectName(style)
                label.setMinimumHeight(label.sizeHint().height())  # a line whole, never squeezed
                about.addWidget(label)
            note = QLabel("")
            note.setObjectName("Muted")
            b = QPushButton(" Download")
            b.clicked.connect(lambda _c=False, k=entry.key: self.get(k))
            grid.addLayout(about, r, 0)
            grid.addWidget(note, r, 1)
            grid.addWidget(b, r, 2)
            self.get_buttons[entry.key], self.entry_notes[entry.key] = b, note
        grid.setColumnStretch(0, 1)
        box.addLayout(grid)
        row = QHBoxLayout()
        row.addWidget(QLabel("Precision"))
        self.quant_combo = QComboBox()
        for q, label in QUANT_CHOICES:
            self.quant_combo.addItem(label, q)
        row.addWidget(self.quant_combo)
        row.addStretch(1)
        box.addLayout(row)
        lay.addWidget(frame)

        self.progress_frame, box, self.progress_title = _card("")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(8)
        box.addWidget(self.progress)
        row = QHBoxLayout()
        self.detail = QLabel("")
        self.detail.setObjectName("Muted")
        row.addWidget(self.detail, 1)
        self.pause_button = QPushButton(" Pause")
        self.pause_button.clicked.connect(self.pause)
        self.resume_button = QPushButton(" Resume")
        self.resume_button.setObjectName("Primary")
        self.resume_button.clicked.connect(lambda: self.resume())
        self.discard_button = QPushButton(" Discard")
        self.discard_button.setToolTip("Throw the paused download away")
        self.discard_button.clicked.connect(lambda: self.discard())
        for b in (self.pause_button, self.resume_button, self.discard_button):
            row.addWidget(b)
        box.addLayout(row)
        self.progress_frame.hide()
        lay.addWidget(self.progress_frame)

        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.message)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.hide)
        bottom.addWidget(self.close_button)
        lay.addLayout(bottom)
        self.refresh_icons()
        self._update_buttons()

    def refresh_icons(self) -> None:
        self.use_button.setIcon(icon("check", theme.colors().accent_text))
        self.delete_button.setIcon(icon("trash"))
        self.open_button.setIcon(icon("open"))
        self.convert_button.setIcon(icon("model"))
        for b in self.get_buttons.values():
            b.setIcon(icon("export"))

    # --- the lists ------------------------------------------------------------------------------------

    def refresh(self) -> BackgroundOp:
        """Reads the models folder again (in the background) and shows it."""
        manager = self.manager
        return BackgroundOp(lambda _r: (manager.installed(), manager.pending()), success=self._show,
                            failure=lambda e: self._error(error_text(e))).start()

    def _show(self, lists) -> None:
        self.models, self.pending = lists
        selected = self.selected_path()
        self.table.clear()
        for m in self.models:
            it = QTreeWidgetItem([m.name, m.quant, size_text(m.size), m.languages_text(), m.source_text()])
            it.setData(0, Qt.UserRole, m.file)
            it.setToolTip(0, m.file)
            it.setToolTip(4, m.source_text())
            if m.file == self.current_model():
                it.setText(0, f"{m.name} (in use)")
            self.table.addTopLevelItem(it)
            if m.file == selected or (selected is None and self.table.topLevelItemCount() == 1):
                self.table.setCurrentItem(it)
        if not self.models:
            it = QTreeWidgetItem(["No models yet: get one below, or open or convert one you have."])
            it.setFlags(Qt.NoItemFlags)
            it.setFirstColumnSpanned(True)
            self.table.addTopLevelItem(it)
        installed = {m.variant for m in self.models}
        for key, note in self.entry_notes.items():
            p = self._pending(key)
            if p is not None and key != self.active_key:
                note.setText(f"paused: {size_text(p.have)} of {size_text(p.total)}")
            elif self.catalogue[key].variant in installed:
                note.setText("installed")
            else:
                note.setText("")
        if self.active_key is None:
            paused = next(iter(self.pending), None)
            if paused is not None:
                self._show_paused(paused.key)
            elif self.progress_frame.isVisible() and not self.progress_title.text().startswith("Ready"):
                self.progress_frame.hide()
        self._update_buttons()

    def _pending(self, key: str):
        return next((p for p in self.pending if p.key == key), None)

    def selected_path(self) -> str | None:
        it = self.table.currentItem()
        return it.data(0, Qt.UserRole) if it is not None else None

    def _update_buttons(self) -> None:
        busy = self.op is not None and self.op.running
        selected = self.selected_path()
        self.use_button.setEnabled(bool(selected))
        self.delete_button.setEnabled(bool(selected) and not busy)
        self.convert_button.setEnabled(not busy)
        for key, b in self.get_buttons.items():
            b.setEnabled(not busy)
            b.setText(" Resume" if self._pending(key) is not None else " Download")

    # --- using, deleting, opening ------------------------------------------------------------------------

    def use_selected(self) -> None:
        path = self.selected_path()
        if path:
            self.modelChosen.emit(path)
            self.hide()

    def open_file(self, path: str | None = None) -> None:
        path = path or choose_model_file(self)
        if not path:
            return
        self.modelChosen.emit(path)
        self.hide()

    def delete_selected(self) -> QMessageBox | None:
        path = self.selected_path()
        if not path:
            return None
        if path == self.current_model():
            self._error("This model is in use: choose another one first, then delete this one.")
            return None
        box = QMessageBox(QMessageBox.Warning, "Delete model", f"Delete {os.path.basename(path)}?", parent=self)
        size = next((m.size for m in self.models if m.file == path), 0)
        box.setInformativeText(f"{size_text(size)} freed; it can be downloaded again later.")
        delete = box.addButton("Delete", QMessageBox.DestructiveRole)
        box.addButton(QMessageBox.Cancel)

        def done(_r) -> None:
            if box.clickedButton() is delete:
                manager = self.manager
                BackgroundOp(lambda _rep: manager.remove(path), success=lambda _x: self.refresh(),
                             failure=lambda e: self._error(error_text(e))).start()

        box.finished.connect(done)
        box.open()
        return box

    # --- getting and converting -------------------------------------------------------------------------

    def quant(self) -> str:
        return self.quant_combo.currentData()

    def get(self, key: str, quant: str | None = None) -> BackgroundOp | None:
        """Downloads (or resumes) and converts a catalogue model."""
        if self.op is not None and self.op.running:
            return None
        paused = self._pending(key)
        quant = quant or self.quant()
        manager = self.manager
        return self._start(key, f"{self.catalogue[key].name} ({quant})",
                           lambda report, stop: manager.get(key, quant, progress=report, stop=stop),
                           resuming=paused is not None)

    def resume(self, key: str | None = None) -> BackgroundOp | None:
        key = key or self.active_key or next((p.key for p in self.pending), None)
        return self.get(key) if key else None

    def convert_folder(self, folder: str | None = None) -> BackgroundOp | None:
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Hugging Face snapshot folder", os.path.expanduser("~"))
            if not folder:
                return None
        quant, manager = self.quant(), self.manager
        return self._start(None, f"{os.path.basename(folder.rstrip('/'))} ({quant})",
                           lambda report, stop: manager.convert_folder(folder, quant, progress=report, stop=stop))

    def _start(self, key, title: str, work, resuming: bool = False) -> BackgroundOp:
        stop = threading.Event()
        self.stop, self.active_key = stop, key
        self.message.setText("")
        self.progress_frame.show()
        self.progress_title.setText(title)
        self.detail.setText("Resuming…" if resuming else "Starting…")
        self.progress.setRange(0, 0)
        self.pause_button.setVisible(True)
        self.pause_button.setEnabled(True)
        self.pause_button.setText(" Pause" if key else " Stop")
        self.resume_button.hide()
        self.discard_button.hide()

        def ok(model) -> None:
            self.active_key = None
            self.progress.setRange(0, 1000)
            self.progress.setValue(1000)
            self.progress_title.setText(f"Ready: {model.name} {model.quant}")
            self.detail.setText(f"{os.path.basename(model.file)}, {size_text(model.size)}")
            self.pause_button.hide()
            self._update_buttons()
            self.refresh()
            self.modelChosen.emit(model.file)

        def bad(e) -> None:
            active, self.active_key = self.active_key, None
            self._update_buttons()
            if isinstance(e, Cancelled):
                if active is None:  # a conversion stopped: nothing to resume
                    self.progress_frame.hide()
                else:
                    self.refresh()  # shows it as paused
                return
            self._error(error_text(e))
            self.progress.setRange(0, 1000)
            self.refresh()

        self.op = BackgroundOp(lambda report: work(report, stop), success=ok, failure=bad,
                               progress=self._progress).start()
        self._update_buttons()
        return self.op

    def _progress(self, p: Progress) -> None:
        if p.fraction is None:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * p.fraction))
        self.detail.setText(p.text())
        if p.stage in ("converting", "writing", "reading") and self.active_key:
            self.pause_button.setText(" Stop")
            self.pause_button.setToolTip("Stop converting; the download is kept")

    def pause(self) -> None:
        if self.stop is not None:
            self.stop.set()
            self.pause_button.setEnabled(False)
            self.detail.setText("Pausing…")

    def _show_paused(self, key: str) -> None:
        p = self._pending(key)
        if p is None:
            return
        self.progress_frame.show()
        self.progress_title.setText(f"Paused: {p.name} ({p.quant})")
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * p.have / p.total) if p.total else 0)
        self.detail.setText(f"{size_text(p.have)} of {size_text(p.total)} downloaded; the rest when you resume")
        self.pause_button.hide()
        self.resume_button.show()
        self.discard_button.show()
        self.active_paused = key

    def discard(self, key: str | None = None) -> BackgroundOp | None:
        key = key or self.active_paused
        if not key:
            return None
        manager = self.manager

        def gone(_x) -> None:
            self.progress_frame.hide()
            self.refresh()

        return BackgroundOp(lambda _r: manager.discard(key), success=gone,
                            failure=lambda e: self._error(error_text(e))).start()

    def _error(self, text: str) -> None:
        self.message.setStyleSheet(f"color: {theme.colors().error};")
        self.message.setText(text)

    def shutdown(self) -> None:
        """The app is closing: a download stops at its next chunk (kept for the next start)."""
        if self.stop is not None:
            self.stop.set()

    def showEvent(self, e) -> None:
        super().showEvent(e)
        self.refresh()

    def closeEvent(self, e) -> None:  # closing hides: a download goes on in the background
        e.ignore()
        self.hide()
