"""The voice library: the model's built-in voice plus the user's voices, one .voice.gguf each in
the app data folder; search, rename, delete and play a sample."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

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

from app.qt.icons import icon
from engine_native.voice import clip_path  # the recording kept beside a voice (NAME.wav)

VOICE_SUFFIX = ".voice.gguf"
BUILTIN = ""  # the library key of the model's built-in voice
VARIANT_NAMES = {"turbo": "Turbo", "nano": "Nano", "mtl": "Multilingual"}


@dataclass
class VoiceEntry:
    path: str  # "" for the built-in voice
    name: str
    meta: dict = field(default_factory=dict)
    variant: str = ""  # the model variant the voice was made with ("turbo", "mtl", ...)

    @property
    def subtitle(self) -> str:
        if not self.path:
            return "the model's own voice"
        bits = [VARIANT_NAMES.get(self.variant, self.variant.capitalize())] if self.variant else []
        d = self.meta.get("duration_s")
        if d:
            bits.append(f"{float(d):.1f} s reference")
        c = self.meta.get("created_at")
        if c:
            bits.append(str(c)[:10])
        return " · ".join(bits) or os.path.basename(self.path)


def slug(name: str) -> str:
    s = re.sub(r"[^\w\- ]+", "", name, flags=re.UNICODE).strip().replace(" ", "-")
    return s[:60] or "voice"


class VoiceStore:
    """The folder of user voices. File operations only; engine work happens elsewhere."""

    def __init__(self, folder: str):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    def entries(self) -> list[VoiceEntry]:
        files = sorted(fn for fn in os.listdir(self.folder) if fn.endswith(VOICE_SUFFIX))
        if not files:
            return []
        from engine_native import EngineError, Voice

        out = []
        for fn in files:
            path = os.path.join(self.folder, fn)
            try:
                v = Voice.load(path)
                out.append(VoiceEntry(path, v.name or fn[: -len(VOICE_SUFFIX)], dict(v.meta), v.variant))
            except (EngineError, OSError) as e:
                out.append(VoiceEntry(path, fn[: -len(VOICE_SUFFIX)], {"error": str(e)}))
        return sorted(out, key=lambda e: e.name.lower())

    def free_path(self, name: str, exclude: str | None = None) -> str:
        base = os.path.join(self.folder, slug(name))
        path, i = base + VOICE_SUFFIX, 2
        while os.path.exists(path) and path != exclude:
            path, i = f"{base}-{i}{VOICE_SUFFIX}", i + 1
        return path

    def add(self, voice, name: str, clip=None, **meta) -> str:
        """Save a voice; `clip` (samples, rate), the recording it was cloned from, is kept beside
        it (NAME.wav) so that a model of another variant can re-make the voice from it."""
        path = self.free_path(name)
        voice.save(path, name=name, **meta)
        if clip is not None:
            from engine_native.voice import save_clip

            save_clip(path, *clip)
        return path

    def rename(self, path: str, new_name: str) -> str:
        from engine_native import Voice

        v = Voice.load(path)
        new_path = self.free_path(new_name, exclude=path)
        v.save(new_path, name=new_name)  # written in full first; then the old file goes
        if os.path.abspath(new_path) != os.path.abspath(path):
            clip = clip_path(path)
            if clip:  # the recording moves with its voice (NAME.wav beside NAME.voice.gguf)
                os.replace(clip, new_path[: -len(VOICE_SUFFIX)] + os.path.splitext(clip)[1])
            os.remove(path)
        return new_path

    def delete(self, path: str) -> None:
        clip = clip_path(path)
        os.remove(path)
        if clip:
            os.remove(clip)


class VoiceLibraryPanel(QFrame):
    voiceChosen = Signal(str)  # path, "" = built-in
    addRequested = Signal()
    sampleRequested = Signal(str)
    changed = Signal()  # a voice was renamed or deleted
    error = Signal(str)

    def __init__(self, store: VoiceStore, parent=None):
        super().__init__(parent)
        self.store = store
        self.builtin_name = "Built-in"
        self.model_variant = ""  # the loaded model's variant: voices of another one are re-made on use
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

    def reload(self, select: str | None = None) -> None:
        keep = self.current_path() if select is None else select
        self.list.blockSignals(True)
        self.list.clear()
        entries = [VoiceEntry(BUILTIN, self.builtin_name)] + self.store.entries()
        for e in entries:
            it = QListWidgetItem(icon("model" if not e.path else "voice"), f"{e.name}\n{e.subtitle}")
            it.setData(Qt.UserRole, e.path)
            it.setData(Qt.UserRole + 1, e)
            if "error" in e.meta:
                it.setToolTip(f"This voice file cannot be read: {e.meta['error']}")
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
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.UserRole) == path:
                self.list.setCurrentRow(i)
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
        self.reload()

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

    def rename_current(self, new_name: str | None = None) -> str | None:
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
        try:
            path = self.store.rename(e.path, new_name)
        except Exception as ex:  # noqa: BLE001
            self.error.emit(f"Could not rename {e.name}: {ex}")
            return None
        self.reload(select=path)
        self.changed.emit()
        return path

    def delete_current(self) -> bool:
        e = self.current_entry()
        if e is None or not e.path:
            return False
        if self.confirm_delete:
            answer = QMessageBox.question(self, "Delete voice", f"Delete the voice “{e.name}”? "
                                          "This removes its file from the library.")
            if answer != QMessageBox.Yes:
                return False
        try:
            self.store.delete(e.path)
        except OSError as ex:
            self.error.emit(f"Could not delete {e.name}: {ex.strerror}")
            return False
        self.reload(select=BUILTIN)
        self.changed.emit()
        return True
