"""Live typing: each sentence is handed over for speaking as soon as it is typed.

A sentence is complete by the engine's own rule (engine_native.text.sentence_boundaries:
a terminator followed by whitespace or a capital, not after "Mr." and the like; a CJK full
stop; Enter). Everything before
`committed` has been handed over exactly once; edits there do not re-speak anything
(the mark moves with the text), and text after it is spoken when its sentence completes.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QPlainTextEdit

from engine_native.text import split_completed as _split_completed


def split_completed(text: str, start: int) -> tuple[list[tuple[str, int, int]], int]:
    """Complete sentences in text[start:] as (sentence, begin, end) and the new commit mark
    (engine_native.text's rule, the same one the engine splits by)."""
    sentences, mark = _split_completed(text, start)
    return [(s.text, s.start, s.end) for s in sentences], mark


class LiveTyping(QObject):
    sentenceTyped = Signal(str, int, int)  # sentence, start, end (character offsets in the document)

    def __init__(self, editor: QPlainTextEdit, parent=None):
        super().__init__(parent)
        self.editor = editor
        self.enabled = False
        self.committed = 0
        editor.document().contentsChange.connect(self._on_change)

    def set_enabled(self, on: bool) -> None:
        """Turning it on speaks only what is typed from now on (the mark goes to the end)."""
        self.enabled = on
        self.committed = len(self.editor.toPlainText())

    def _on_change(self, position: int, removed: int, added: int) -> None:
        if position < self.committed:  # an edit in already-spoken text: keep the mark on the same text
            if position + removed <= self.committed:
                self.committed += added - removed
            else:
                self.committed = position + added
        if not self.enabled:
            return
        text = self.editor.toPlainText()
        self.committed = min(self.committed, len(text))
        sentences, self.committed = split_completed(text, self.committed)
        for s, a, b in sentences:
            self.sentenceTyped.emit(s, a, b)
