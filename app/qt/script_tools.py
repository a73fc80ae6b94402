"""Script-writing helpers of the editor: the model's expression tags ([laugh], [sigh], ...) and
timed pauses, offered in an insert menu and completed as they are typed after "["."""

from __future__ import annotations

from PySide6.QtCore import QStringListModel, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QCompleter, QMenu, QToolButton

PAUSES = ("[pause 0.5s]", "[pause 1s]", "[pause 2s]")


class ExpressionTags:
    """A "Tags" button with an insert menu, and completion in the text field."""

    def __init__(self, edit):
        self.edit = edit
        self.tags: list[str] = []
        self.button = QToolButton()
        self.button.setText("Tags")
        self.button.setToolTip("Insert an expression tag of the model ([laugh], [sigh], ...) or a timed pause")
        self.button.setPopupMode(QToolButton.InstantPopup)
        self.menu = QMenu(self.button)
        self.button.setMenu(self.menu)
        self.model = QStringListModel()
        self.completer = QCompleter(self.model, edit)
        self.completer.setCaseSensitivity(Qt.CaseInsensitive)
        self.completer.setWidget(edit)
        self.completer.activated.connect(self.complete)
        edit.textChanged.connect(self._maybe_complete)
        self.set_tags([])

    def set_tags(self, tags) -> None:
        self.tags = list(tags)
        self.menu.clear()
        for t in self.tags:
            self.menu.addAction(t, lambda t=t: self.insert(t))
        if self.tags:
            self.menu.addSeparator()
        for p in PAUSES:
            self.menu.addAction(p, lambda p=p: self.insert(p))
        self.model.setStringList(self.tags + list(PAUSES))
        self.button.setEnabled(True)

    def insert(self, tag: str) -> None:
        c = self.edit.textCursor()
        before = self.edit.toPlainText()[max(0, c.position() - 1):c.position()]
        c.insertText((" " if before and not before.isspace() else "") + tag)
        self.edit.setTextCursor(c)

    def _prefix(self) -> str | None:
        """The "[..." being typed at the cursor, if any."""
        c = self.edit.textCursor()
        text = self.edit.toPlainText()[:c.position()]
        at = text.rfind("[")
        if at < 0 or "]" in text[at:] or "\n" in text[at:] or len(text) - at > 20:
            return None
        return text[at:]

    def _maybe_complete(self) -> None:
        prefix = self._prefix()
        if not prefix or not self.edit.hasFocus():
            self.completer.popup().hide()
            return
        self.completer.setCompletionPrefix(prefix)
        if self.completer.completionCount():
            rect = self.edit.cursorRect()
            rect.setWidth(180)
            self.completer.complete(rect)
        else:
            self.completer.popup().hide()

    def complete(self, tag: str) -> None:
        """Replace the "[..." at the cursor by `tag`."""
        prefix = self._prefix() or ""
        c = self.edit.textCursor()
        c.movePosition(QTextCursor.Left, QTextCursor.KeepAnchor, len(prefix))
        c.insertText(tag)
        self.edit.setTextCursor(c)
