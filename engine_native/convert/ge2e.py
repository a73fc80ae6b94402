"""Resemblyzer's trained GE2E speaker encoder -> a small speaker-encoder GGUF. No PyTorch.

    from engine_native.convert.ge2e import convert_speaker_encoder
    convert_speaker_encoder("Resemblyzer-0.1.4-py3-none-any.whl", "ge2e.speaker.gguf")

The PyPI wheel `Resemblyzer` 0.1.4 (Apache-2.0) ships Resemble AI's trained GE2E speaker
encoder as `resemblyzer/pretrained.pt` (a legacy `torch.save` file: {"model_state": ...}).
Its network is Chatterbox's VoiceEncoder exactly: a 3-layer LSTM (40 mels in, 256 hidden)
and a 256 x 256 projection (`linear.*` there, `proj.*` here) with ReLU and L2 norm; the
GE2E loss's `similarity_weight` / `similarity_bias` are training-only and dropped. The file
written here holds only that encoder (`ve.*`), the VoiceEncoder's 40-bin mel filterbank and
Resemblyzer's framing, under `chatterbox.variant = "speaker-encoder"`, so
`_core.ModelFile` + `_core.VoiceEncoder` load it as they load a model's encoder
(engine_native.speaker_encoder wraps them).

Framing differences from Chatterbox's VoiceEncoder, written as metadata the C++ reads:
- the last partial window is kept when >= 75 % of its *samples* exist (`embed_utterance`'s
  min_coverage=0.75): with centred 10 ms frames that is 121 of 160 frames, so
  min_coverage = 121/160 reproduces Resemblyzer's partial windows exactly;
- no edge trim (Chatterbox trims with librosa top_db=20; Resemblyzer instead shortens long
  pauses with a VAD before embedding, which `SpeakerEncoder.embed` does in Python):
  trim_top_db is set beyond the range of the trim's decibel floor (-100 dB), so nothing is cut.
"""

from __future__ import annotations

import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from engine_native.convert import filterbanks, hparams, tensors
from engine_native.convert.errors import ConvertError
from engine_native.convert.model import ARCH, FORMAT_VERSION, ConvertReport, _add_tensor, _write_model, add_kv
from engine_native.convert.torch_pickle import TorchPickleError, load_pt

RESEMBLYZER = "resemblyzer==0.1.4"
WEIGHTS_MEMBER = "resemblyzer/pretrained.pt"
VARIANT = "speaker-encoder"
#: Resemblyzer's embed_utterance: rate 1.3 partials a second, the last kept at >= 75 % of its
#: samples (= 121 of 160 centred frames; see the module).
PARTIAL_RATE = 1.3
MIN_COVERAGE = 121 / 160
NO_TRIM_TOP_DB = 1000.0
#: Resemblyzer's preprocess_wav: RMS raised (never lowered) to -30 dBFS.
VOLUME_DBFS = -30.0
TRAINING_ONLY = ("similarity_weight", "similarity_bias")


def read_weights(source: str | os.PathLike) -> dict[str, np.ndarray]:
    """The encoder's state dict (`lstm.*`, `linear.*`) from Resemblyzer's wheel or its pretrained.pt."""
    source = Path(source)
    if not source.exists():
        raise ConvertError(f"{source}: no such file (expected Resemblyzer's wheel or its pretrained.pt)")
    try:
        if zipfile.is_zipfile(source) and source.suffix == ".whl":
            with zipfile.ZipFile(source) as zf:
                try:
                    data = zf.read(WEIGHTS_MEMBER)
                except KeyError:
                    raise ConvertError(f"{source}: a wheel without {WEIGHTS_MEMBER} (not Resemblyzer's)") from None
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / "pretrained.pt").write_bytes(data)
                checkpoint = load_pt(Path(tmp) / "pretrained.pt")
        else:
            checkpoint = load_pt(source)
    except (TorchPickleError, zipfile.BadZipFile, OSError) as e:
        raise ConvertError(f"{source}: unreadable ({e})") from None
    state = checkpoint.get("model_state") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise ConvertError(f"{source}: not a Resemblyzer checkpoint (no model_state)")
    return {k: v for k, v in state.items() if k not in TRAINING_ONLY}


def ve_state(state: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Resemblyzer names -> Chatterbox VoiceEncoder names (`linear.*` -> `proj.*`), checked."""
    out = {("proj." + k[len("linear."):] if k.startswith("linear.") else k): np.asarray(v, np.float32)
           for k, v in state.items()}
    unknown = [k for k in out if not (k.startswith("lstm.") or k.startswith("proj."))]
    if unknown:
        raise ConvertError(f"{source}: unexpected tensors {unknown} (not a GE2E speaker encoder)")
    hp = hparams.ve_hparams(out, source)
    H, L = hp["ve.n_hidden"], hp["ve.n_layer"]
    for layer in range(L):
        n_in = hp["ve.n_mels"] if layer == 0 else H
        for name, shape in ((f"lstm.weight_ih_l{layer}", (4 * H, n_in)), (f"lstm.weight_hh_l{layer}", (4 * H, H)),
                            (f"lstm.bias_ih_l{layer}", (4 * H,)), (f"lstm.bias_hh_l{layer}", (4 * H,))):
            if name not in out or out[name].shape != shape:
                raise ConvertError(f"{source}: {name} is {out[name].shape if name in out else 'missing'}, "
                                   f"expected {shape}")
    if out["proj.weight"].shape[1] != H or out["proj.bias"].shape != (out["proj.weight"].shape[0],):
        raise ConvertError(f"{source}: the projection does not match the LSTM")
    if hp["ve.n_mels"] != filterbanks.VE_MEL["n_mels"]:
        raise ConvertError(f"{source}: takes {hp['ve.n_mels']} mels; the VoiceEncoder's filterbank has "
                           f"{filterbanks.VE_MEL['n_mels']}")
    return out


def metadata(state: dict[str, np.ndarray], source: str) -> dict:
    meta = {"variant": VARIANT, "format_version": FORMAT_VERSION, "quant": "f32",
            **hparams.ve_hparams(state, source),
            "ve.min_coverage": MIN_COVERAGE,
            "speaker_encoder.source": RESEMBLYZER, "speaker_encoder.volume_dbfs": VOLUME_DBFS}
    for k, v in filterbanks.VE_MEL.items():
        if isinstance(v, (bool, int, float, str, np.integer, np.floating)):
            meta[f"fb.ve_mel.{k}"] = v
    meta.update({"fb.ve_mel.rate": PARTIAL_RATE, "fb.ve_mel.min_coverage": MIN_COVERAGE,
                 "fb.ve_mel.trim_top_db": NO_TRIM_TOP_DB})
    return meta


def convert_speaker_encoder(source: str | os.PathLike, out_path: str | os.PathLike,
                            log: Callable[[str], None] | None = print) -> ConvertReport:
    """Resemblyzer's wheel (or pretrained.pt) -> a speaker-encoder GGUF at `out_path` (atomically)."""
    started = time.perf_counter()
    out_path = Path(out_path)
    state = ve_state(read_weights(source), str(source))
    meta = metadata(state, str(source))
    report = ConvertReport(path=out_path, variant=VARIANT, quant="f32")

    def fill(w: GGUFWriter) -> None:
        w.add_name("GE2E speaker encoder (Resemblyzer 0.1.4)")
        w.add_file_type(0)
        for key, value in meta.items():
            add_kv(w, f"{ARCH}.{key}", value)
        for name, arr in tensors.ve_tensors(state, WEIGHTS_MEMBER):
            _add_tensor(w, report, name, arr)
        _add_tensor(w, report, "fb.ve_mel", filterbanks.ve_mel_filterbank())

    _write_model(out_path, fill)
    report.seconds = time.perf_counter() - started
    (log or (lambda _m: None))(report.summary())
    return report


def default_path() -> Path:
    """Where setup puts the converted encoder: CBS_SPEAKER_ENCODER, else the user cache."""
    env = os.environ.get("CBS_SPEAKER_ENCODER")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "chatterbox-studio" / "speaker-encoder" / "ge2e-resemblyzer-0.1.4.gguf"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m engine_native.convert.ge2e",
                                 description="Resemblyzer's wheel (or pretrained.pt) -> a speaker-encoder GGUF")
    ap.add_argument("source", help=f"the wheel of {RESEMBLYZER} (pip download --no-deps {RESEMBLYZER}) "
                                   "or its resemblyzer/pretrained.pt")
    ap.add_argument("output", nargs="?", help=f"the .gguf to write (default {default_path()})")
    args = ap.parse_args(argv)
    try:
        convert_speaker_encoder(args.source, args.output or default_path())
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
