"""Provenance: what every audio file of generated speech the project writes says about how it
was made, in the format's own metadata (readable by `ffprobe`, any tag editor): the app and its
version, the model (file name, variant, quantisation), the voice or voices, and "watermark:
perth" when the audio carries the Perth watermark. Never the text.

WAV: a LIST INFO chunk (ISFT software, ICMT comment); FLAC and Ogg: Vorbis comments (SOFTWARE,
COMMENT), written by libsndfile; MP3 (ID3v2: COMM, TENC), M4B/M4A (iTunes atoms) and the
server's ffmpeg formats: ffmpeg's `comment` and `encoded_by`. ffprobe shows the line as the
`comment` tag in every one of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from app import __version__

APP_NAME = "Chatterbox Studio"
WATERMARK_NOTE = "watermark: perth"


def _clean(s: str) -> str:
    """One line, no separators of ours inside a name."""
    return " ".join(str(s).replace(";", ",").split())


def voice_names(voices, builtin: str = "Built-in") -> list[str]:
    """The names of the voices that spoke (Voice objects, or None for the model's own voice,
    named `builtin`; a dict's values: a script's cast, the narrator first; None: the model's
    own voice alone)."""
    if voices is None:
        return [builtin]
    return [builtin if v is None else v.name for v in (voices.values() if isinstance(voices, dict) else voices)]


@dataclass(frozen=True)
class Provenance:
    model: str = ""             # the model file's name
    variant: str = ""           # turbo, nano, mtl
    quantization: str = ""      # f32, q4_0, ...
    voices: tuple[str, ...] = ()
    watermarked: bool = False

    @classmethod
    def of(cls, engine, voices=(), watermarked: bool | None = None) -> Provenance:
        """From a loaded engine_native.Engine; `watermarked` defaults to the engine's switch."""
        return cls.from_info({"path": str(engine.path), "variant": engine.variant,
                              "quantization": engine.info.get("quantization", "")}, voices,
                             engine.watermark if watermarked is None else watermarked)

    @classmethod
    def from_info(cls, info: dict, voices=(), watermarked: bool = False) -> Provenance:
        """From an engine's `info` dict (path, variant, quantization), as the GUI holds it."""
        names = tuple(v for v in voices if v)
        return cls(os.path.basename(str(info.get("path") or "")), str(info.get("variant") or ""),
                   str(info.get("quantization") or ""), names, bool(watermarked))

    @property
    def software(self) -> str:
        return f"{APP_NAME} {__version__}"

    @property
    def comment(self) -> str:
        """`Chatterbox Studio 0.1.0; model: chatterbox-turbo-q4_0.gguf (turbo, q4_0); voice: Me;
        watermark: perth`."""
        parts = [self.software]
        if self.model:
            kind = ", ".join(p for p in (self.variant, self.quantization) if p)
            parts.append(f"model: {_clean(self.model)}" + (f" ({kind})" if kind else ""))
        if self.voices:
            parts.append(f"voice: {', '.join(dict.fromkeys(_clean(v) for v in self.voices))}")
        if self.watermarked:
            parts.append(WATERMARK_NOTE)
        return "; ".join(parts)

    def ffmpeg_tags(self) -> dict[str, str]:
        """For an ffmpeg output (`-metadata KEY=VALUE` each, or an FFMETADATA file)."""
        return {"comment": self.comment, "encoded_by": self.software}

    def ffmpeg_args(self) -> list[str]:
        out = []
        for k, v in self.ffmpeg_tags().items():
            out += ["-metadata", f"{k}={v}"]
        return out

    def tag_soundfile(self, f) -> None:
        """Onto an open soundfile.SoundFile being written (WAV INFO / Vorbis comments)."""
        f.software = self.software
        f.comment = self.comment
