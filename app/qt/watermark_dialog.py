"""⋯ > "Check a recording for a watermark…": drop a recording on the dialog (or choose one) and
see whether it carries the Perth watermark the engine puts on what it speaks. The check
(app.core.watermark_check: decode, then the detector) runs off the GUI thread."""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QFileDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout

from app.core.watermark_check import check_recording
from app.qt.background import BackgroundOp, error_text

INTRO = ("Speech made by this app (and by the official Chatterbox) carries Resemble AI's Perth watermark, "
         "inaudible. Drop a recording here, or choose one, to check it.")


def dropped_files(mime) -> list[str]:
    """The local files in a drag's data."""
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile()] if mime.hasUrls() else []


class WatermarkCheckDialog(QDialog):
    def __init__(self, parent=None, start_dir: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Check a recording for a watermark")
        self.setAcceptDrops(True)
        self.setMinimumWidth(460)
        self.start_dir = start_dir
        self.op: BackgroundOp | None = None
        self.path = ""
        lay = QVBoxLayout(self)
        intro = QLabel(INTRO)
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.verdict = QLabel("No recording checked yet.")
        self.verdict.setObjectName("Verdict")
        self.verdict.setWordWrap(True)
        self.verdict.setAlignment(Qt.AlignCenter)
        self.verdict.setMinimumHeight(72)
        self.verdict.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.verdict, 1)
        row = QHBoxLayout()
        self.choose_button = QPushButton("Choose a recording…")
        self.choose_button.clicked.connect(self.choose)
        row.addWidget(self.choose_button)
        row.addStretch(1)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        row.addWidget(close)
        lay.addLayout(row)

    @property
    def busy(self) -> bool:
        return self.op is not None and self.op.running

    def choose(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Check a recording", self.start_dir,
                                              "Audio and video (*.wav *.flac *.ogg *.opus *.mp3 *.m4a *.m4b *.aac "
                                              "*.mp4 *.mkv *.webm *.mov);;All files (*)")
        if path:
            self.check(path)

    def check(self, path: str) -> BackgroundOp:
        """Checks `path` in the background; the verdict replaces the dialog's text."""
        self.path = path
        name = os.path.basename(path)
        self.verdict.setText(f"Checking {name}…")
        self.choose_button.setEnabled(False)
        self.op = BackgroundOp(lambda _report: check_recording(path), success=lambda v: self._show(path, v),
                               failure=lambda e: self._failed(path, e)).start()
        return self.op

    def _show(self, path: str, verdict) -> None:
        if path != self.path:
            return
        self.choose_button.setEnabled(True)
        name = os.path.basename(path)
        if verdict.marked:
            text = f"<b>Marked</b>: {name} carries the Perth watermark (confidence {verdict.confidence:.2f})."
        else:
            text = f"<b>Not marked</b>: no Perth watermark found in {name} (confidence {verdict.confidence:.2f})."
        self.verdict.setText(text)

    def _failed(self, path: str, e: BaseException) -> None:
        if path != self.path:
            return
        self.choose_button.setEnabled(True)
        message = error_text(e)
        message = message[len(path) + 2:] if message.startswith(f"{path}: ") else message
        self.verdict.setText(f"Cannot check {os.path.basename(path)}: {message}")

    def dragEnterEvent(self, e) -> None:  # noqa: N802 - Qt's name
        if dropped_files(e.mimeData()):
            e.acceptProposedAction()

    def dropEvent(self, e) -> None:  # noqa: N802
        files = dropped_files(e.mimeData())
        if files:
            e.acceptProposedAction()
            self.check(files[0])
