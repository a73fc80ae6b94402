"""A model with a voice baked in: one GGUF file that carries the model and a cloned voice
as its built-in voice (the voice `Engine.synthesize(text)` speaks without `voice=`).

The copy is exact: every tensor but the five `voice.*` ones is copied byte for byte in its
stored type (no requantisation), every metadata key is kept, and the voice's tensors
replace the built-in ones (float32, token ids int32). The baked voice's name and source go
into `chatterbox.builtin_voice.*` keys (`name`, `source_file`, `source_sha256`,
`duration_s`, `baked_at`, and any other string/number metadata of the voice), which
`chatterbox-studio info MODEL` shows. The file is written atomically
(engine_native.files): an interrupted bake leaves no partial model.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

import numpy as np

from engine_native.errors import ModelError, VoiceError

ARCH = "chatterbox"
PREFIX = f"{ARCH}.builtin_voice."
VOICE_TENSORS = ("speaker_emb", "cond_prompt_speech_tokens", "embedding", "prompt_token", "prompt_feat")


def bake_into_model(model_path: str | os.PathLike, voice, out_path: str | os.PathLike) -> Path:
    """Write a copy of `model_path` whose built-in voice is `voice` (an engine_native.Voice
    made with a model of the same variant)."""
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFReader, GGUFValueType

    from engine_native.convert.model import add_kv, write_gguf_atomically
    from engine_native.files import WriteFailed

    model_path, out_path = Path(model_path), Path(out_path)
    if model_path.resolve() == out_path.resolve():
        raise ModelError("write the model with the baked voice to a new file, not over the model itself")
    try:
        reader = GGUFReader(str(model_path))
    except Exception as e:  # gguf raises ValueError/struct errors/OSError on bad files
        raise ModelError(f"{model_path}: not a readable model file ({e})") from None
    arch = reader.get_field("general.architecture")
    if arch is None or arch.contents() != ARCH:
        raise ModelError(f"{model_path}: not a Chatterbox model")
    variant = reader.get_field(f"{ARCH}.variant").contents()
    if voice.variant != variant:
        raise VoiceError(f"{voice.where()} was made with a Chatterbox {voice.variant} model; {model_path} is "
                         f"{variant}")
    voice.validate()
    meta = {k: v for k, v in voice.meta.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)
            and k not in ("builtin",)}
    meta["name"] = voice.name
    meta["baked_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

    def fill(w) -> None:
        for f in reader.fields.values():
            if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name.startswith(PREFIX):
                continue
            vtype = GGUFValueType(f.types[0])
            sub = GGUFValueType(f.types[-1]) if vtype == GGUFValueType.ARRAY else None
            w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
        for k, v in meta.items():
            add_kv(w, PREFIX + k, v)
        for t in reader.tensors:
            name = t.name
            if name.startswith("voice.") and name[len("voice."):] in VOICE_TENSORS:
                arr = np.asarray(getattr(voice, name[len("voice."):]))
                if Q(t.tensor_type) == Q.I32:
                    w.add_tensor(name, np.ascontiguousarray(arr, np.int32))
                else:
                    w.add_tensor(name, np.ascontiguousarray(arr, np.float32))
                continue
            qtype = Q(t.tensor_type)
            data = np.asarray(t.data)
            if qtype in (Q.F32, Q.F16, Q.I32):
                w.add_tensor(name, data.reshape(tuple(int(n) for n in reversed(t.shape))))
            else:   # quantised blocks, copied as stored
                w.add_tensor(name, data, raw_dtype=qtype)

    try:
        write_gguf_atomically(out_path, fill)
    except WriteFailed as e:
        raise ModelError(str(e)) from None
    return out_path


def baked_voice_info(metadata: dict) -> dict:
    """The `chatterbox.builtin_voice.*` keys of a model's metadata, without the prefix."""
    return {k[len(PREFIX):]: v for k, v in metadata.items() if k.startswith(PREFIX)}
