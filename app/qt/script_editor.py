"""The script editor: the text to speak, the sentence being spoken highlighted, play all or the
selection, regenerate one sentence, live typing, and the history of recent takes."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QKeySequence, QShortcut, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.qt import theme
from app.qt.icons import icon
from app.qt.live_typing import LiveTyping

SAMPLE_SCRIPT = (
    "Welcome to Chatterbox Studio. Type or paste a script here, pick a voice on the left, "
    "and press Play. Audio starts as soon as the first words are ready.\n\n"
    "Select a passage to hear just that part. Put the cursor in a sentence and press "
    "Regenerate to give it another take."
)


def take_label(take) -> str:
    """A history line: time, text, length and, once computed, the likeness to its voice."""
    score = getattr(take, "likeness", None)
    like = f" · likeness {score:.2f}" if score is not None else ""
    return f"{take.title}   ({take.duration:.1f} s{like})"


class ScriptEdit(QPlainTextEdit):
    """The text field; Ctrl+Enter plays."""

    playRequested = Signal()

    def keyPressEvent(self, e):
        if e.key() in (Qt.Key_Return, Qt.Key_Enter) and e.modifiers() & Qt.ControlModifier:
            self.playRequested.emit()
            return
        super().keyPressEvent(e)


def card(title: str, body: QWidget | None = None) -> tuple[QFrame, QVBoxLayout, QHBoxLayout]:
    """A rounded panel with a title row; returns (frame, body layout, title row for extra widgets)."""
    frame = QFrame()
    frame.setObjectName("Card")
    lay = QVBoxLayout(frame)
    lay.setContentsMargins(12, 10, 12, 12)
    lay.setSpacing(8)
    head = QHBoxLayout()
    label = QLabel(title)
    label.setObjectName("CardTitle")
    head.addWidget(label)
    head.addStretch(1)
    lay.addLayout(head)
    if body is not None:
        lay.addWidget(body)
    return frame, lay, head


class ScriptEditor(QWidget):
    playRequested = Signal(str, int)  # text, offset of the text in the editor
    regenerateRequested = Signal(int)  # editor position of the cursor
    liveToggled = Signal(bool)
    takeActivated = Signal(object)  # a Take from the history

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        split = QSplitter(Qt.Vertical)
        split.setChildrenCollapsible(False)
        lay.addWidget(split)

        self.edit = ScriptEdit()
        self.edit.setObjectName("Script")
        self.edit.setPlaceholderText("Type what the voice should say…")
        self.edit.playRequested.connect(self.request_play)
        self.edit.selectionChanged.connect(self._update_buttons)
        self.edit.cursorPositionChanged.connect(self._update_buttons)
        self.edit.textChanged.connect(self._update_count)
        frame, body, head = card("Script", self.edit)
        self.count_label = QLabel("")
        self.count_label.setObjectName("Muted")
        head.addWidget(self.count_label)
        self.live_button = QPushButton(" Live typing")
        self.live_button.setCheckable(True)
        self.live_button.setToolTip("Speak each sentence as soon as it is typed (a terminator and a space, "
                                    "or Enter)")
        self.live_button.toggled.connect(self._live_toggled)
        head.addWidget(self.live_button)
        from app.qt.script_tools import ExpressionTags

        self.tags = ExpressionTags(self.edit)   # the model's expression tags and timed pauses
        head.insertWidget(head.count() - 1, self.tags.button)
        buttons = QHBoxLayout()
        buttons.setSpacing(8)
        self.play_button = QPushButton(" Play script")
        self.play_button.setObjectName("Primary")
        self.play_button.setToolTip("Synthesize the script, or the selection, and play it as it streams (Ctrl+Enter)")
        self.play_button.clicked.connect(self.request_play)
        self.regen_button = QPushButton(" Regenerate sentence")
        self.regen_button.setToolTip("Synthesize the sentence at the cursor again (a new seed)")
        self.regen_button.clicked.connect(lambda: self.regenerateRequested.emit(self.edit.textCursor().position()))
        self.live_hint = QLabel("")
        self.live_hint.setObjectName("Muted")
        buttons.addWidget(self.play_button)
        buttons.addWidget(self.regen_button)
        buttons.addWidget(self.live_hint, 1)
        body.addLayout(buttons)
        split.addWidget(frame)

        self.history = QListWidget()
        self.history.setToolTip("Recent takes: double-click to load one into the transport")
        self.history.itemDoubleClicked.connect(lambda it: self.takeActivated.emit(it.data(Qt.UserRole)))
        self.history.setMinimumHeight(96)
        hframe, _, hhead = card("Takes", self.history)
        self.history_frame = hframe
        split.addWidget(hframe)
        split.setSizes([480, 190])

        self.live = LiveTyping(self.edit, self)
        self._highlight: tuple[int, int] | None = None
        self.take_for_regen = None  # set by the controller: the take whose sentences can be regenerated
        QShortcut(QKeySequence("Ctrl+R"), self, activated=self.regen_button.click)
        self.refresh_icons()
        self._update_buttons()

    def refresh_icons(self) -> None:
        self.play_button.setIcon(icon("play", theme.colors().accent_text))
        self.regen_button.setIcon(icon("regenerate"))
        self.live_button.setIcon(icon("keyboard"))

    # --- text -----------------------------------------------------------------------------------

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)

    def selection(self) -> tuple[str, int]:
        """The selected text and where it starts, or the whole script at 0."""
        cur = self.edit.textCursor()
        if cur.hasSelection():
            a = cur.selectionStart()
            text = self.text()[a:cur.selectionEnd()]
            if text.strip():
                return text, a
        return self.text(), 0

    def request_play(self) -> None:
        text, offset = self.selection()
        self.playRequested.emit(text, offset)

    def _update_buttons(self) -> None:
        has_sel = self.edit.textCursor().hasSelection()
        self.play_button.setText(" Play selection" if has_sel else " Play script")
        self.regen_button.setEnabled(self.take_for_regen is not None and not self.live.enabled)

    def _update_count(self) -> None:
        t = self.text()
        words = len(t.split())
        self.count_label.setText(f"{words} word{'s' if words != 1 else ''} · {len(t)} characters")

    def set_regen_take(self, take) -> None:
        self.take_for_regen = take
        self._update_buttons()

    # --- highlight of the sentence being spoken ---------------------------------------------------

    def highlight(self, span: tuple[int, int] | None) -> None:
        if span == self._highlight:
            return
        self._highlight = span
        sels = []
        if span is not None:
            a, b = span
            n = len(self.text())
            a, b = max(0, min(a, n)), max(0, min(b, n))
            if b > a:
                sel = QTextEdit.ExtraSelection()
                fmt = QTextCharFormat()
                fmt.setBackground(QColor(theme.colors().highlight_sentence))
                fmt.setProperty(QTextFormat.FullWidthSelection, False)
                sel.format = fmt
                cur = QTextCursor(self.edit.document())
                cur.setPosition(a)
                cur.setPosition(b, QTextCursor.KeepAnchor)
                sel.cursor = cur
                sels.append(sel)
        self.edit.setExtraSelections(sels)

    @property
    def highlighted(self) -> tuple[int, int] | None:
        return self._highlight

    # --- live typing ------------------------------------------------------------------------------

    def _live_toggled(self, on: bool) -> None:
        self.live.set_enabled(on)
        self.live_hint.setText("Live: each sentence is spoken when you type . ! ? and a space, or Enter"
                               if on else "")
        if on:
            cur = self.edit.textCursor()
            cur.movePosition(QTextCursor.End)
            self.edit.setTextCursor(cur)
            self.edit.setFocus()
        self._update_buttons()
        self.liveToggled.emit(on)

    # --- history ------------------------------------------------------------------------------------

    def add_take(self, take, limit: int = 20) -> None:
        for i in range(self.history.count()):
            if self.history.item(i).data(Qt.UserRole) is take:
                self.update_take(take)
                return
        item = QListWidgetItem(icon("history"), take_label(take))
        item.setData(Qt.UserRole, take)
        item.setToolTip(f"{take.voice_name} · {take.duration:.1f} s · seed {take.seed}")
        self.history.insertItem(0, item)
        while self.history.count() > limit:
            self.history.takeItem(self.history.count() - 1)

    def update_take(self, take) -> None:
        for i in range(self.history.count()):
            it = self.history.item(i)
            if it.data(Qt.UserRole) is take:
                it.setText(take_label(take))
                it.setToolTip(f"{take.voice_name} · {take.duration:.1f} s · seed {take.seed}")
