"""The voices a server offers: .voice.gguf files of one folder (optionally a chosen subset)
plus the model's built-in voice, looked up by name or file stem, case-insensitively."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.voice_library import VoiceFolder, stem_of

BUILTIN_NAMES = ("default", "builtin", "built-in")


@dataclass
class VoiceInfo:
    id: str        # the file stem, or "default" for the built-in voice
    name: str      # the name stored in the file
    path: str      # "" for the built-in voice

    def as_json(self) -> dict:
        return {"id": self.id, "name": self.name, "object": "voice", "builtin": not self.path}


class VoiceCatalog:
    """Reads the folder on every listing (voices come and go while the server runs), through
    app.core.voice_library's one reader and its caches."""

    def __init__(self, folder: str | None, exposed: list[str] | None = None, expose_builtin: bool = True):
        self.folder = folder
        self.exposed = None if exposed is None else {stem_of(e).lower() for e in exposed}
        self.expose_builtin = expose_builtin
        self._files = VoiceFolder(folder)

    def entries(self) -> list[VoiceInfo]:
        out = [VoiceInfo("default", "Built-in", "")] if self.expose_builtin else []
        for f in self._files.scan():
            if self.exposed is not None and f.stem.lower() not in self.exposed and f.name.lower() not in self.exposed:
                continue
            out.append(VoiceInfo(f.stem, f.name, f.path))
        return out

    def find(self, wanted: str) -> VoiceInfo | None:
        w = wanted.strip().lower()
        if not w:
            return None
        entries = self.entries()
        if self.expose_builtin and w in BUILTIN_NAMES:
            return entries[0]
        w = stem_of(w)
        for e in entries:  # a file stem first (unique), then a stored name
            if e.path and e.id.lower() == w:
                return e
        for e in entries:
            if e.path and e.name.lower() == w:
                return e
        return None

    def load(self, info: VoiceInfo):
        """The Voice of an entry (None for the built-in voice); EngineError if unreadable."""
        if not info.path:
            return None
        return self._files.load(info.path)
