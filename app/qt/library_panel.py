"""The voice library panel: the model's built-in voice plus the user's voices (a VoiceStore:
one .voice.gguf each in the app data folder); search, rename, delete and play a sample.

The folder is read and written by background operations only: the list shows what the last
reading found, and a selection asked for before the reading ends is applied when it does.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
)

from app.core.voice_library import VARIANT_NAMES, VoiceFile, VoiceStore
from app.qt.background import BackgroundOp, error_text
from app.qt.icons import icon

BUILTIN = ""  # the library key of the model's built-in voice


def subtitle(e: VoiceFile) -> str:
    """The line under a voice's name: its model, recording length and date."""
    if not e.path:
        return "the model's own voice"
    bits = [VARIANT_NAMES.get(e.variant, e.variant.capitalize())] if e.variant else []
    d = e.meta.get("duration_s")
    if d:
        bits.append(f"{float(d):.1f} s reference")
    c = e.meta.get("created_at")
    if c:
        bits.append(str(c)[:10])
    return " · ".join(bits) or os.path.basename(e.path)


class VoiceLibraryPanel(QFrame):
    voiceChosen = Signal(str)  # path, "" = built-in
    addRequested = Signal()
    sampleRequested = Signal(str)
    changed = Signal()  # the list was read again (a voice saved, renamed or deleted)
    error = Signal(str)

    def __init__(self, store: VoiceStore, parent=None):
        super().__init__(parent)
        self.store = store
        self.builtin_name = "Built-in"
        self.model_variant = ""  # the loaded model's variant: voices of another one are re-made on use
        self._saved: list[VoiceFile] = []  # the voices the last reading of the folder found
        self._ops: list[BackgroundOp] = []  # readings, renames and deletes running
        self._readings = 0  # the latest reading's number: an older one's result is dropped
        self._wanted: str | None = None  # a selection asked for while the folder is being read
        self.setObjectName("Card")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 12)
        lay.setSpacing(8)
        head = QHBoxLayout()
        title = QLabel("Voices")
        title.setObjectName("CardTitle")
        head.addWidget(title)
        head.addStretch(1)
        self.count_label = QLabel("")
        self.count_label.setObjectName("Muted")
        head.addWidget(self.count_label)
        lay.addLayout(head)

        self.search = QLineEdit()
        self.search.setPlaceholderText("Search voices")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._filter)
        lay.addWidget(self.search)

        self.list = QListWidget()
        self.list.setIconSize(QSize(20, 20))
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemDoubleClicked.connect(lambda _it: self.play_sample())
        lay.addWidget(self.list, 1)

        self.add_button = QPushButton(" Add voice…")
        self.add_button.setObjectName("Primary")
        self.add_button.setToolTip("Clone a voice from a recording (or drop an audio/video file on the window)")
        self.add_button.clicked.connect(self.addRequested)
        lay.addWidget(self.add_button)
        row = QHBoxLayout()
        row.setSpacing(6)
        self.sample_button = QPushButton()
        self.sample_button.setToolTip("Play a sample of this voice")
        self.sample_button.clicked.connect(self.play_sample)
        self.rename_button = QPushButton()
        self.rename_button.setToolTip("Rename this voice")
        self.rename_button.clicked.connect(self.rename_current)
        self.delete_button = QPushButton()
        self.delete_button.setToolTip("Delete this voice")
        self.delete_button.clicked.connect(self.delete_current)
        for b in (self.sample_button, self.rename_button, self.delete_button):
            row.addWidget(b)
        lay.addLayout(row)
        self.confirm_delete = True  # tests switch the confirmation off
        self.refresh_icons()
        self._show(None)
        self.reload()

    def refresh_icons(self) -> None:
        from app.qt import theme

        self.add_button.setIcon(icon("add", theme.colors().accent_text))
        self.sample_button.setIcon(icon("speaker"))
        self.rename_button.setIcon(icon("rename"))
        self.delete_button.setIcon(icon("trash"))
        for i in range(self.list.count()):
            it = self.list.item(i)
            it.setIcon(icon("model" if not it.data(Qt.UserRole) else "voice"))

    # --- contents -----------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """The folder is being read or written."""
        return bool(self._ops)

    def _run(self, fn, success, failure) -> BackgroundOp:
        op = BackgroundOp(lambda _report: fn(), success=lambda r: (self._done(op), success(r)),
                          failure=lambda e: (self._done(op), failure(e)))
        self._ops.append(op)
        return op.start()

    def _done(self, op: BackgroundOp) -> None:
        if op in self._ops:
            self._ops.remove(op)

    def reload(self, select: str | None = None) -> BackgroundOp:
        """Read the folder again (in the background) and show it; `select`: the voice to select then."""
        if select is not None:
            self._wanted = select
        elif self._wanted is None:
            self._wanted = self.current_path()
        self._readings += 1
        reading = self._readings

        def listed(entries):
            if reading == self._readings:
                self._saved = entries
                wanted, self._wanted = self._wanted, None
                self._show(wanted)
                self.changed.emit()

        return self._run(self.store.entries, listed, lambda e: self.error.emit(f"Cannot read the voices: "
                                                                               f"{error_text(e)}"))

    def _show(self, select: str | None) -> None:
        keep = self.current_path() if select is None else select
        self.list.blockSignals(True)
        self.list.clear()
        entries = [VoiceFile(BUILTIN, self.builtin_name)] + self._saved
        for e in entries:
            it = QListWidgetItem(icon("model" if not e.path else "voice"), f"{e.name}\n{subtitle(e)}")
            it.setData(Qt.UserRole, e.path)
            it.setData(Qt.UserRole + 1, e)
            if e.error:
                it.setToolTip(f"This voice file cannot be read: {e.error}")
            elif e.path and self.model_variant and e.variant != self.model_variant:
                made, now = (VARIANT_NAMES.get(v, v or "another model") for v in (e.variant, self.model_variant))
                it.setToolTip(f"Made with a {made} model: re-made for this {now} model from its recording "
                              f"when first used (in the background)")
            else:
                it.setToolTip(e.path or "The voice that comes with the model")
            self.list.addItem(it)
        self.count_label.setText(f"{len(entries) - 1} saved")
        self.list.blockSignals(False)
        self.select(keep or BUILTIN)
        self._filter(self.search.text())

    def entries(self) -> list[VoiceEntry]:
        return [self.list.item(i).data(Qt.UserRole + 1) for i in range(self.list.count())]

    def visible_names(self) -> list[str]:
        return [self.list.item(i).data(Qt.UserRole + 1).name for i in range(self.list.count())
                if not self.list.item(i).isHidden()]

    def select(self, path: str) -> None:
        """Select a voice; one not listed yet is selected when the reading under way ends."""
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.UserRole) == path:
                self.list.setCurrentRow(i)
                return
        if self.busy:
            self._wanted = path
            return
        self.list.setCurrentRow(0)

    def current_path(self) -> str | None:
        it = self.list.currentItem()
        return it.data(Qt.UserRole) if it else None

    def current_entry(self) -> VoiceEntry | None:
        it = self.list.currentItem()
        return it.data(Qt.UserRole + 1) if it else None

    def name_of(self, path: str) -> str:
        for e in self.entries():
            if e.path == path:
                return e.name
        return self.builtin_name

    def set_builtin_name(self, name: str, variant: str = "") -> None:
        self.builtin_name, self.model_variant = f"{name}", variant
        self._show(None)

    def _filter(self, text: str) -> None:
        needle = text.strip().lower()
        for i in range(self.list.count()):
            it = self.list.item(i)
            it.setHidden(bool(needle) and needle not in it.data(Qt.UserRole + 1).name.lower())

    def _current_changed(self, cur, _prev) -> None:
        user = bool(cur and cur.data(Qt.UserRole))
        self.rename_button.setEnabled(user)
        self.delete_button.setEnabled(user)
        self.sample_button.setEnabled(cur is not None)
        if cur is not None:
            self.voiceChosen.emit(cur.data(Qt.UserRole))

    # --- actions ------------------------------------------------------------------------------------

    def play_sample(self) -> None:
        path = self.current_path()
        if path is not None:
            self.sampleRequested.emit(path)

    def rename_current(self, new_name: str | None = None) -> BackgroundOp | None:
        """Rename the selected voice (asking for the name when none is given), in the background."""
        e = self.current_entry()
        if e is None or not e.path:
            return None
        if new_name is None:
            new_name, ok = QInputDialog.getText(self, "Rename voice", "New name:", text=e.name)
            if not ok:
                return None
        new_name = (new_name or "").strip()
        if not new_name:
            self.error.emit("A voice needs a name.")
            return None
        return self._run(lambda: self.store.rename(e.path, new_name), lambda path: self.reload(select=path),
                         lambda ex: self.error.emit(f"Could not rename {e.name}: {error_text(ex)}"))

    def delete_current(self) -> BackgroundOp | None:
        """Delete the selected voice (after asking), in the background."""
        e = self.current_entry()
        if e is None or not e.path:
            return None
        if self.confirm_delete:
            answer = QMessageBox.question(self, "Delete voice", f"Delete the voice “{e.name}”? "
                                          "This removes its file from the library.")
            if answer != QMessageBox.Yes:
                return None
        return self._run(lambda: self.store.delete(e.path), lambda _r: self.reload(select=BUILTIN),
                         lambda ex: self.error.emit(f"Could not delete {e.name}: {error_text(ex)}"))
