"""The welcome dialog (the first start, no model yet): get a model from Hugging Face (the model
manager, app.qt.model_manager_dialog), open a GGUF file, or convert a Hugging Face snapshot
folder. Conversion runs in the background; the dialog stays responsive."""

from __future__ import annotations

import os
import threading

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
)

from app.core.model_manager import ModelManager
from app.qt import theme
from app.qt.background import BackgroundOp, error_text
from app.qt.icons import icon
from app.qt.model_manager_dialog import QUANT_CHOICES, choose_model_file


class ModelDialog(QDialog):
    managerRequested = Signal()   # "Download a model…": the window opens the model manager

    def __init__(self, models_dir: str, parent=None, first_run: bool = False):
        super().__init__(parent)
        self.manager = ModelManager(models_dir)
        self.model_path: str | None = None
        self.op: BackgroundOp | None = None
        self.stop = threading.Event()
        self.setWindowTitle("Welcome" if first_run else "Choose a model")
        self.setMinimumWidth(600)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(22, 20, 22, 18)
        lay.setSpacing(12)
        title = QLabel("Welcome to Chatterbox Studio" if first_run else "Choose a model")
        title.setStyleSheet("font-size: 15pt; font-weight: 600;")
        lay.addWidget(title)
        intro = QLabel("Speech is made by a Chatterbox model: one file, on this computer. Get one from Hugging "
                       "Face (about 1–3 GB once), or use one you have. Your choice is remembered.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)

        self.download_button = self._option(lay, "export", "Download a model…",
                                            "Turbo (English), Multilingual (23 languages) or Nano (small and "
                                            "quick), from Hugging Face: progress, pause and resume.",
                                            self.request_manager, primary=True)
        self.open_button = self._option(lay, "open", "Open a model file…",
                                        "A chatterbox-*.gguf converted before (or shared with you).", self.open_file)
        self.convert_button = self._option(lay, "model", "Convert a snapshot folder…",
                                           "A Hugging Face folder you have: t3_*.safetensors, s3gen*, ve.*, conds.pt "
                                           "and the tokenizer files.", self.convert_folder)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(QLabel("Precision when converting"))
        self.quant_combo = QComboBox()
        for q, label in QUANT_CHOICES:
            self.quant_combo.addItem(label, q)
        row.addWidget(self.quant_combo)
        lay.addLayout(row)

        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(6)
        self.progress.hide()
        lay.addWidget(self.progress)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        lay.addWidget(self.message)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        self.close_button = QPushButton("Not now")
        self.close_button.clicked.connect(self.reject)
        bottom.addWidget(self.close_button)
        lay.addLayout(bottom)

    def _option(self, lay, icon_name, title, text, slot, primary: bool = False) -> QPushButton:
        frame = QFrame()
        frame.setObjectName("Card")
        h = QHBoxLayout(frame)
        h.setContentsMargins(12, 10, 12, 10)
        b = QPushButton(" " + title)
        if primary:
            b.setObjectName("Primary")
        b.setIcon(icon(icon_name, theme.colors().accent_text if primary else None))
        b.setMinimumWidth(230)
        b.clicked.connect(lambda: slot())
        h.addWidget(b)
        t = QLabel(text)
        t.setWordWrap(True)
        t.setObjectName("Muted")
        h.addWidget(t, 1)
        lay.addWidget(frame)
        return b

    def _busy(self, on: bool) -> None:
        self.progress.setVisible(on)
        for b in (self.open_button, self.convert_button, self.download_button):
            b.setEnabled(not on)
        self.close_button.setText("Stop" if on else "Not now")

    def _error(self, text: str) -> None:
        self.message.setStyleSheet(f"color: {theme.colors().error};")
        self.message.setText(text)

    # --- the three ways ----------------------------------------------------------------------------

    def request_manager(self) -> None:
        self.managerRequested.emit()
        self.accept()

    def open_file(self, path: str | None = None) -> None:
        path = path or choose_model_file(self)
        if not path:
            return
        self.model_path = path
        self.accept()

    def convert_folder(self, folder: str | None = None) -> BackgroundOp | None:
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Hugging Face snapshot folder", os.path.expanduser("~"))
            if not folder:
                return None
        quant, manager, stop = self.quant_combo.currentData(), self.manager, self.stop
        stop.clear()
        self._busy(True)
        self.message.setStyleSheet("")
        self.message.setText(f"Converting {folder}…")

        def ok(model):
            self._busy(False)
            self.model_path = model.file
            self.message.setText(f"Model ready: {model.file}")
            self.accept()

        def bad(e):
            self._busy(False)
            self._error(error_text(e))

        def progress(p):
            self.progress.setValue(int(1000 * (p.fraction or 0)))
            self.message.setText(p.text())

        self.op = BackgroundOp(lambda report: manager.convert_folder(folder, quant, progress=report, stop=stop),
                               success=ok, failure=bad, progress=progress).start()
        return self.op

    def reject(self) -> None:
        if self.op is not None and self.op.running:
            self.stop.set()  # "Stop": the conversion ends at its next tensor, leaving no file
            return
        super().reject()

    def keyPressEvent(self, e):
        if e.key() == Qt.Key_Escape and self.op is not None and self.op.running:
            return  # a conversion is running: keep the dialog (Stop ends it)
        super().keyPressEvent(e)
