"""The voices a server offers: .voice.gguf files of one folder (optionally a chosen subset)
plus the model's built-in voice, looked up by name or file stem, case-insensitively."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

VOICE_SUFFIX = ".voice.gguf"
BUILTIN_NAMES = ("default", "builtin", "built-in")


@dataclass
class VoiceInfo:
    id: str        # the file stem, or "default" for the built-in voice
    name: str      # the name stored in the file
    path: str      # "" for the built-in voice

    def as_json(self) -> dict:
        return {"id": self.id, "name": self.name, "object": "voice", "builtin": not self.path}


class VoiceCatalog:
    """Reads the folder on every listing (voices come and go while the server runs); a loaded
    Voice is cached by (path, mtime)."""

    def __init__(self, folder: str | None, exposed: list[str] | None = None, expose_builtin: bool = True):
        self.folder = folder
        self.exposed = None if exposed is None else {self._key(e) for e in exposed}
        self.expose_builtin = expose_builtin
        self._cache: dict[str, tuple[float, object]] = {}
        self._names: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(s: str) -> str:
        base = os.path.basename(s)
        return (base[: -len(VOICE_SUFFIX)] if base.endswith(VOICE_SUFFIX) else base).lower()

    def _name_of(self, path: str) -> str:
        from engine_native import EngineError, Voice

        mtime = os.path.getmtime(path)
        hit = self._names.get(path)
        if hit and hit[0] == mtime:
            return hit[1]
        try:
            name = Voice.load(path).name
        except (EngineError, OSError):
            name = ""
        self._names[path] = (mtime, name)
        return name

    def entries(self) -> list[VoiceInfo]:
        out = [VoiceInfo("default", "Built-in", "")] if self.expose_builtin else []
        if not self.folder or not os.path.isdir(self.folder):
            return out
        with self._lock:
            for fn in sorted(os.listdir(self.folder)):
                if not fn.endswith(VOICE_SUFFIX):
                    continue
                path = os.path.join(self.folder, fn)
                stem = fn[: -len(VOICE_SUFFIX)]
                try:
                    name = self._name_of(path) or stem
                except OSError:
                    continue
                if self.exposed is not None and stem.lower() not in self.exposed and name.lower() not in self.exposed:
                    continue
                out.append(VoiceInfo(stem, name, path))
        return out

    def find(self, wanted: str) -> VoiceInfo | None:
        w = wanted.strip().lower()
        if not w:
            return None
        entries = self.entries()
        if self.expose_builtin and w in BUILTIN_NAMES:
            return entries[0]
        w = self._key(w)
        for e in entries:  # a file stem first (unique), then a stored name
            if e.path and e.id.lower() == w:
                return e
        for e in entries:
            if e.path and e.name.lower() == w:
                return e
        return None

    def load(self, info: VoiceInfo):
        """The Voice of an entry (None for the built-in voice); EngineError if unreadable."""
        from engine_native import Voice

        if not info.path:
            return None
        mtime = os.path.getmtime(info.path)
        with self._lock:
            hit = self._cache.get(info.path)
            if hit and hit[0] == mtime:
                return hit[1]
        v = Voice.load(info.path)
        with self._lock:
            self._cache[info.path] = (mtime, v)
        return v
