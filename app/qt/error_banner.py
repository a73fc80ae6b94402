"""The banner over the main window's pages: an error in words, with an action that fixes it
when there is one ("Choose model…")."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton

from app.qt import theme


class ErrorBanner(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Card")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 8, 8, 8)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.label, 1)
        self.action = QPushButton()
        self.action.hide()
        lay.addWidget(self.action)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        lay.addWidget(close)
        self._slot = None
        self.hide()

    def show_message(self, text: str, action: tuple[str, object] | None = None) -> None:
        self.label.setStyleSheet(f"color: {theme.colors().error};")
        self.label.setText(text)
        if self._slot is not None:
            self.action.clicked.disconnect(self._slot)
            self._slot = None
        if action:
            self.action.setText(action[0])
            self._slot = action[1]
            self.action.clicked.connect(self._slot)
            self.action.show()
        else:
            self.action.hide()
        self.show()
