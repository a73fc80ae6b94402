"""A voice: the five conditioning tensors Chatterbox needs, in a small `.voice.gguf` file.

T3 reads `speaker_emb` (VoiceEncoder) and `cond_prompt_speech_tokens` (S3Tokenizer, first
15 s); S3Gen reads `embedding` (CAMPPlus), `prompt_token` and `prompt_feat` (24 kHz mel)
of the first 10 s. The file also records the model variant it was made with (a voice only
fits models of that variant: the tensors come from that model's encoders), dimensions, and
free-form metadata (name, source hash, duration, the Voice Lab chain, created-at).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine_native.errors import VoiceError

VOICE_ARCH = "chatterbox-voice"
FORMAT_VERSION = 1
TENSORS = ("speaker_emb", "cond_prompt_speech_tokens", "embedding", "prompt_token", "prompt_feat")


@dataclass
class Voice:
    speaker_emb: np.ndarray                 # float32 [speaker_embed_size]
    cond_prompt_speech_tokens: np.ndarray   # int32 [<= speech_cond_prompt_len]
    embedding: np.ndarray                   # float32 [xvector size]
    prompt_token: np.ndarray                # int32 [n]
    prompt_feat: np.ndarray                 # float32 [2n, n_mels]
    variant: str
    meta: dict = field(default_factory=dict)
    path: str | None = None                 # the file it was loaded from, for messages

    def where(self) -> str:
        return f"voice file {self.path}" if self.path else f"voice '{self.name}'"

    def validate(self) -> None:
        """Checks what any model needs of a voice: finite numbers, whole non-negative token
        ids, 2-D prompt features and non-empty prompts. VoiceError names the file and the
        problem (a hand-edited or damaged file must not become NaN or endless audio)."""
        for name in ("speaker_emb", "embedding", "prompt_feat"):
            a = np.asarray(getattr(self, name))
            if a.size == 0:
                raise VoiceError(f"{self.where()}: {name} is empty")
            if not np.all(np.isfinite(a)):
                raise VoiceError(f"{self.where()}: {name} holds invalid numbers (NaN or infinity)")
        if not np.any(self.speaker_emb) or not np.any(self.embedding):
            raise VoiceError(f"{self.where()}: the speaker embedding is all zeros")
        for name in ("cond_prompt_speech_tokens", "prompt_token"):
            t = np.asarray(getattr(self, name))
            if t.ndim != 1 or t.size == 0:
                raise VoiceError(f"{self.where()}: {name} must be a non-empty list of token ids")
            if t.min() < 0:
                raise VoiceError(f"{self.where()}: {name} holds negative token ids")
        if np.asarray(self.prompt_feat).ndim != 2:
            raise VoiceError(f"{self.where()}: prompt_feat must be [frames, mel bins]")

    @property
    def name(self) -> str:
        return str(self.meta.get("name", "Untitled voice"))

    @property
    def duration_s(self) -> float:
        """Seconds of audio in S3Gen's prompt (50 mel frames per second)."""
        return self.prompt_feat.shape[0] / 50.0

    def save(self, path: str | os.PathLike, name: str | None = None, **meta) -> Path:
        """Write atomically (temp file + rename): an interrupted save never leaves half a voice."""
        from engine_native.convert.model import add_kv, write_gguf_atomically
        from engine_native.files import WriteFailed

        if name is not None:
            self.meta["name"] = str(name)
        for k, v in meta.items():
            self.meta[k] = v if isinstance(v, (str, int, float, bool)) else json.dumps(v)
        self.meta.setdefault("name", Path(path).name.removesuffix(".voice.gguf"))
        self.meta.setdefault("created_at", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        path = Path(path)

        def fill(w) -> None:
            w.add_name(self.name)
            add_kv(w, "voice.format_version", FORMAT_VERSION)
            add_kv(w, "voice.variant", self.variant)
            for k, v in self.meta.items():
                add_kv(w, f"voice.meta.{k}", v)
            for t in TENSORS:
                w.add_tensor(f"voice.{t}", np.ascontiguousarray(getattr(self, t)))

        try:
            write_gguf_atomically(path, fill, arch=VOICE_ARCH)
        except WriteFailed as e:
            raise VoiceError(str(e)) from None
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Voice":
        # Read by our own header reader, whose every step consumes bytes of the file: gguf's
        # GGUFReader spent minutes in a crafted kilobyte (arrays of arrays; docs/FUZZING.md).
        from engine_native.gguf_header import GGUFFileError, read_header, read_tensors

        path = Path(path)
        if not path.is_file():
            raise VoiceError(f"voice file not found: {path}")
        try:
            header = read_header(path)
            header.check_complete()
            kv = header.kv
            if kv.get("general.architecture") != VOICE_ARCH:
                raise VoiceError(f"{path}: not a Chatterbox voice file (architecture "
                                 f"{kv.get('general.architecture')!r}; a model file is not a voice)")
            tensors = read_tensors(header)
        except GGUFFileError as e:
            raise VoiceError(_unreadable(path, e)) from None
        except OSError as e:
            raise VoiceError(f"{path}: cannot be read ({e.strerror or e})") from None
        for name in ("voice.cond_prompt_speech_tokens", "voice.prompt_token"):  # ids stored as floats must be whole
            if name in tensors and tensors[name].dtype.kind == "f":
                t = tensors[name]
                if not np.all(np.isfinite(t)) or np.any(t != np.round(t)) or np.any(np.abs(t) > 2**31 - 1):
                    raise VoiceError(f"voice file {path}: {name.removeprefix('voice.')} holds values that are not "
                                     f"token ids")
        missing = [t for t in TENSORS if f"voice.{t}" not in tensors]
        if missing:
            raise VoiceError(f"{path}: voice file lacks {', '.join(missing)}")
        meta = {k.removeprefix("voice.meta."): v for k, v in kv.items() if k.startswith("voice.meta.")}
        get = lambda t: tensors[f"voice.{t}"]  # noqa: E731
        n_mels = int(np.asarray(get("prompt_feat")).shape[-1]) if np.asarray(get("prompt_feat")).ndim else 0
        if n_mels == 0:
            raise VoiceError(f"voice file {path}: prompt_feat is empty")
        voice = cls(speaker_emb=get("speaker_emb").astype(np.float32).reshape(-1),
                   cond_prompt_speech_tokens=get("cond_prompt_speech_tokens").astype(np.int32).reshape(-1),
                   embedding=get("embedding").astype(np.float32).reshape(-1),
                   prompt_token=get("prompt_token").astype(np.int32).reshape(-1),
                   prompt_feat=get("prompt_feat").astype(np.float32).reshape(-1, n_mels),
                   variant=str(kv.get("voice.variant", "")), meta=meta, path=str(path))
        voice.validate()
        return voice


def _unreadable(path: Path, error: Exception) -> str:
    """One line for a file the header reader refused (engine_native.gguf_header names the problem)."""
    from engine_native.gguf_header import NotGGUFError

    if isinstance(error, NotGGUFError):
        return f"{path}: not a voice file (a voice is a .voice.gguf file made by cloning a recording)"
    return str(error)


# The recording a voice was cloned from, kept beside its file so that the voice can be
# re-made for a model of another variant (Engine.adapt_voice): NAME.wav beside
# NAME.voice.gguf, as `chatterbox-studio lab --bake` leaves them.
CLIP_SUFFIXES = (".wav", ".flac", ".ogg")


def clip_path(voice_path: str | os.PathLike | None) -> str | None:
    """The recording kept beside a voice file (NAME.wav, .flac or .ogg), or None."""
    if not voice_path or not str(voice_path).endswith(".voice.gguf"):
        return None
    stem = str(voice_path)[: -len(".voice.gguf")]
    return next((stem + x for x in CLIP_SUFFIXES if os.path.isfile(stem + x)), None)


def save_clip(voice_path: str | os.PathLike, samples, sample_rate: int) -> Path:
    """Keeps the recording a voice was made from beside its file (NAME.wav, float, written
    atomically); a library that renames or deletes the voice should move the clip with it."""
    import soundfile as sf

    from engine_native.files import WriteFailed, atomic_write

    if not str(voice_path).endswith(".voice.gguf"):
        raise VoiceError(f"{voice_path}: a voice file's name ends in .voice.gguf")
    target = Path(str(voice_path)[: -len(".voice.gguf")] + ".wav")
    data = np.asarray(samples, np.float32)
    try:
        return atomic_write(target, lambda tmp: sf.write(str(tmp), data, int(sample_rate), format="WAV",
                                                         subtype="FLOAT"))
    except WriteFailed as e:
        raise VoiceError(str(e)) from None
