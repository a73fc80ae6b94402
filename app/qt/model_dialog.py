"""Choosing a model: open a GGUF, convert a local Hugging Face snapshot folder, or download and
convert (when online). Conversion runs in the background; the dialog stays responsive."""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
)

from app.core.models import convert_snapshot, download_model
from app.qt import theme
from app.qt.background import BackgroundOp, error_text
from app.qt.icons import icon

REPOS = ["ResembleAI/chatterbox-turbo"]
QUANTS = [("q4_0", "q4_0 · smallest, fastest"), ("q8_0", "q8_0 · near lossless"), ("f16", "f16"),
          ("f32", "f32 · reference precision")]


class ModelDialog(QDialog):
    def __init__(self, models_dir: str, parent=None, first_run: bool = False):
        super().__init__(parent)
        self.models_dir = models_dir
        self.model_path: str | None = None
        self.op: BackgroundOp | None = None
        self.setWindowTitle("Choose a model")
        self.setMinimumWidth(560)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(20, 18, 20, 18)
        lay.setSpacing(12)
        title = QLabel("Welcome to Chatterbox Studio" if first_run else "Choose a model")
        title.setStyleSheet("font-size: 15pt; font-weight: 600;")
        lay.addWidget(title)
        intro = QLabel("Speech is made by a Chatterbox model in one GGUF file. Open one you have, or make "
                       "one from the original Hugging Face files. Your choice is remembered.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)

        self.open_button = self._option(lay, "open", "Open a model file…",
                                        "A chatterbox-*.gguf converted before (or shared with you).", self.open_file)
        self.convert_button = self._option(lay, "model", "Convert a snapshot folder…",
                                           "A folder with t3_*.safetensors, s3gen*.safetensors, ve.safetensors, "
                                           "conds.pt and the tokenizer files.", self.convert_folder)
        self.download_button = self._option(lay, "export", "Download and convert",
                                            "Fetch the published weights from Hugging Face (needs the network "
                                            "and the huggingface_hub package).", self.download)

        row = QHBoxLayout()
        row.addWidget(QLabel("Repository"))
        self.repo_combo = QComboBox()
        self.repo_combo.setEditable(True)
        self.repo_combo.addItems(REPOS)
        self.repo_combo.setMinimumWidth(240)
        self.repo_combo.lineEdit().setCursorPosition(0)
        row.addWidget(self.repo_combo, 1)
        row.addWidget(QLabel("Precision"))
        self.quant_combo = QComboBox()
        for q, label in QUANTS:
            self.quant_combo.addItem(label, q)
        row.addWidget(self.quant_combo)
        lay.addLayout(row)

        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setFixedHeight(6)
        self.progress.hide()
        lay.addWidget(self.progress)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumHeight(110)
        self.log.hide()
        lay.addWidget(self.log)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        lay.addWidget(self.message)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        self.close_button = QPushButton("Not now")
        self.close_button.clicked.connect(self.reject)
        bottom.addWidget(self.close_button)
        lay.addLayout(bottom)

    def _option(self, lay, icon_name, title, text, slot) -> QPushButton:
        frame = QFrame()
        frame.setObjectName("Card")
        h = QHBoxLayout(frame)
        h.setContentsMargins(12, 10, 12, 10)
        b = QPushButton(" " + title)
        b.setIcon(icon(icon_name))
        b.setMinimumWidth(230)
        b.clicked.connect(lambda: slot())
        h.addWidget(b)
        t = QLabel(text)
        t.setWordWrap(True)
        t.setObjectName("Muted")
        h.addWidget(t, 1)
        lay.addWidget(frame)
        return b

    def _quant(self) -> str:
        return self.quant_combo.currentData()

    def _busy(self, on: bool) -> None:
        self.progress.setVisible(on)
        for b in (self.open_button, self.convert_button, self.download_button):
            b.setEnabled(not on)
        self.close_button.setText("Hide" if on else "Not now")

    def _error(self, text: str) -> None:
        self.message.setStyleSheet(f"color: {theme.colors().error};")
        self.message.setText(text)

    # --- the three ways ----------------------------------------------------------------------------

    def open_file(self, path: str | None = None) -> None:
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "Open a model", os.path.expanduser("~"),
                                                  "GGUF models (*.gguf)")
            if not path:
                return
        self.model_path = path
        self.accept()

    def convert_folder(self, folder: str | None = None) -> BackgroundOp | None:
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Hugging Face snapshot folder", os.path.expanduser("~"))
            if not folder:
                return None
        quant, models_dir = self._quant(), self.models_dir
        return self._run(lambda report: convert_snapshot(folder, models_dir, quant, log=report),
                         f"Converting {folder}…")

    def download(self) -> BackgroundOp:
        repo, quant, models_dir = self.repo_combo.currentText().strip(), self._quant(), self.models_dir
        return self._run(lambda report: download_model(repo, models_dir, quant, log=report), f"Downloading {repo}…")

    def _run(self, op, title: str) -> BackgroundOp:
        self._busy(True)
        self.log.show()
        self.log.setPlainText(title)
        self.message.setText("")

        def ok(path):
            self._busy(False)
            self.model_path = path
            self.message.setStyleSheet("")
            self.message.setText(f"Model ready: {path}")
            self.accept()

        def bad(e):
            self._busy(False)
            self._error(error_text(e))

        self.op = BackgroundOp(op, success=ok, failure=bad,
                               progress=lambda line: self.log.appendPlainText(str(line))).start()
        return self.op

    def keyPressEvent(self, e):
        if e.key() == Qt.Key_Escape and self.op is not None and self.op.running:
            return  # a conversion is running: keep the dialog (it finishes in the background)
        super().keyPressEvent(e)
