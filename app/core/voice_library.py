"""Voice folders on disk: NAME.voice.gguf files, each with the recording it was cloned from
beside it (NAME.wav) when the app made it.

`VoiceFolder` is the one reader of such a folder: the app's library (`VoiceStore`), the
speech server's catalog (app.server.voices) and the command line's `--cast NAME=VOICE`
(app.cli.script_cli) all list voices through it. Every call here reads or writes files:
the desktop app runs them off the GUI thread.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field

VOICE_SUFFIX = ".voice.gguf"
VARIANT_NAMES = {"turbo": "Turbo", "nano": "Nano", "mtl": "Multilingual"}


@dataclass
class VoiceFile:
    path: str  # "" stands for a model's built-in voice where a list holds one
    name: str  # the name stored in the file; its file stem when it has none or cannot be read
    meta: dict = field(default_factory=dict)
    variant: str = ""  # the model variant the voice was made with ("turbo", "mtl", ...)
    error: str = ""  # why the file cannot be read; "" when it can

    @property
    def stem(self) -> str:
        return stem_of(self.path)


def stem_of(path: str) -> str:
    base = os.path.basename(path)
    return base[: -len(VOICE_SUFFIX)] if base.endswith(VOICE_SUFFIX) else base


class VoiceFolder:
    """The .voice.gguf files of one folder, read again on every `scan` (voices come and go);
    what a file holds is cached by (path, mtime), so a scan reads only new or changed files."""

    def __init__(self, folder: str | None):
        self.folder = folder
        self._headers: dict[str, tuple[float, VoiceFile]] = {}
        self._voices: dict[str, tuple[float, object]] = {}
        self._lock = threading.Lock()

    def scan(self) -> list[VoiceFile]:
        """The folder's voices by file name; a file that vanishes meanwhile is left out, one
        that cannot be read is listed with its `error`."""
        if not self.folder or not os.path.isdir(self.folder):
            return []
        out = []
        for fn in sorted(os.listdir(self.folder)):
            if fn.endswith(VOICE_SUFFIX):
                entry = self._header(os.path.join(self.folder, fn))
                if entry is not None:
                    out.append(entry)
        return out

    def _header(self, path: str) -> VoiceFile | None:
        from engine_native import EngineError, Voice

        try:
            mtime = os.path.getmtime(path)
        except OSError:
            return None
        with self._lock:
            hit = self._headers.get(path)
        if hit and hit[0] == mtime:
            return hit[1]
        try:
            v = Voice.load(path)
            entry = VoiceFile(path, v.name or stem_of(path), dict(v.meta), v.variant)
        except (EngineError, OSError) as e:
            entry = VoiceFile(path, stem_of(path), error=str(e))
        with self._lock:
            self._headers[path] = (mtime, entry)
        return entry

    def load(self, path: str):
        """The Voice of one file, cached by mtime; EngineError (or OSError) when unreadable."""
        from engine_native import Voice

        mtime = os.path.getmtime(path)
        with self._lock:
            hit = self._voices.get(path)
        if hit and hit[0] == mtime:
            return hit[1]
        v = Voice.load(path)
        with self._lock:
            self._voices[path] = (mtime, v)
        return v


def slug(name: str) -> str:
    """A file stem for a voice's name."""
    s = re.sub(r"[^\w\- ]+", "", name, flags=re.UNICODE).strip().replace(" ", "-")
    return s[:60] or "voice"


class VoiceStore:
    """The app's library folder: list, add, rename, delete (each recording moves with its voice)."""

    def __init__(self, folder: str):
        self.folder = folder
        self._files = VoiceFolder(folder)

    def entries(self) -> list[VoiceFile]:
        """The saved voices by name."""
        return sorted(self._files.scan(), key=lambda e: e.name.lower())

    def free_path(self, name: str, exclude: str | None = None) -> str:
        base = os.path.join(self.folder, slug(name))
        path, i = base + VOICE_SUFFIX, 2
        while os.path.exists(path) and path != exclude:
            path, i = f"{base}-{i}{VOICE_SUFFIX}", i + 1
        return path

    def add(self, voice, name: str, clip=None, **meta) -> str:
        """Save a voice; `clip` (samples, rate), the recording it was cloned from, is kept beside
        it (NAME.wav) so that a model of another variant can re-make the voice from it."""
        os.makedirs(self.folder, exist_ok=True)
        path = self.free_path(name)
        voice.save(path, name=name, **meta)
        if clip is not None:
            from engine_native.voice import save_clip

            save_clip(path, *clip)
        return path

    def add_file(self, path: str) -> str:
        """A .voice.gguf from elsewhere into the library (a copy, under its own name)."""
        from engine_native import Voice

        voice = Voice.load(path)
        return self.add(voice, voice.name)

    def rename(self, path: str, new_name: str) -> str:
        from engine_native import Voice
        from engine_native.voice import clip_path

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
        from engine_native.voice import clip_path

        clip = clip_path(path)
        os.remove(path)
        if clip:
            os.remove(clip)
