"""Snapshot folder -> one GGUF model file; requantisation; inspection."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf import quants as gguf_quants

from engine_native.convert import filterbanks, hparams, mtl, tensors
from engine_native.convert.errors import ConvertError
from engine_native.convert.quant import QUANT_TYPES, storage_type
from engine_native.convert.tokenizer import read_tokenizer
from engine_native.convert.torch_pickle import TorchPickleError, load_pt

ARCH = "chatterbox"
FORMAT_VERSION = 1
MAX_NAME = 63  # GGML_MAX_NAME - 1


@dataclass(frozen=True)
class Variant:
    name: str
    t3_file: str
    s3gen_file: str
    meanflow: bool


VARIANTS = {
    "turbo": Variant("turbo", "t3_turbo_v1.safetensors", "s3gen_meanflow.safetensors", meanflow=True),
    "nano": Variant("nano", "t3_nano_v1.safetensors", "s3gen_meanflow.safetensors", meanflow=True),
    "mtl": Variant("mtl", mtl.T3_FILE, mtl.S3GEN_FILE, meanflow=False),
}
VE_FILE = "ve.safetensors"
CONDS_FILE = "conds.pt"
ENGLISH_MARKERS = ("t3_cfg.safetensors", "tokenizer.json")   # ChatterboxTTS (English, Llama 520M)
# exactly the files ChatterboxMultilingualTTS.from_pretrained fetches
MTL_DOWNLOAD = [mtl.VE_FILE, mtl.T3_FILE, mtl.S3GEN_FILE, mtl.TOKENIZER_FILE, CONDS_FILE, mtl.CANGJIE_FILE]
# The GPT-2 tokenizer's files (tokenizer.read_tokenizer): the first two always, the others when present.
TOKENIZER_FILES = ("vocab.json", "merges.txt")
TOKENIZER_EXTRAS = ("added_tokens.json", "tokenizer_config.json")


def snapshot_files(variant: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The files `convert` reads from a snapshot of `variant`: (required, read when present)."""
    if variant == "mtl":
        return (mtl.T3_FILE, mtl.S3GEN_FILE, mtl.VE_FILE, mtl.TOKENIZER_FILE, CONDS_FILE), (mtl.CANGJIE_FILE,)
    spec = VARIANTS[variant]
    return (spec.t3_file, spec.s3gen_file, VE_FILE, CONDS_FILE, *TOKENIZER_FILES), TOKENIZER_EXTRAS


@dataclass
class ConvertReport:
    path: Path
    variant: str
    quant: str
    n_tensors: int = 0
    n_quantised: int = 0
    n_bytes: int = 0
    seconds: float = 0.0
    types: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(self.types.items()))
        return (f"{self.path}: {self.variant} {self.quant}, {self.n_tensors} tensors "
                f"({kinds}), {self.n_quantised} quantised, {self.n_bytes / 2**20:.1f} MiB, "
                f"{self.seconds:.1f} s")


# --- reading the snapshot ----------------------------------------------------------

def detect_variant(snapshot: str | os.PathLike) -> str:
    snapshot = Path(snapshot)
    if not snapshot.is_dir():
        raise ConvertError(f"{snapshot}: not a folder (expected a Chatterbox Hugging Face snapshot)")
    found = [v.name for v in VARIANTS.values() if (snapshot / v.t3_file).exists()]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise ConvertError(f"{snapshot}: holds several T3 checkpoints ({', '.join(found)}); pass --variant")
    if (snapshot / mtl.TOKENIZER_FILE).exists():
        raise ConvertError(f"{snapshot}: a Multilingual Chatterbox snapshot without its T3 ({mtl.T3_FILE})")
    if (snapshot / ENGLISH_MARKERS[0]).exists():
        raise ConvertError(f"{snapshot}: an English Chatterbox (ChatterboxTTS, t3_cfg.safetensors) snapshot; "
                           "this converter reads Turbo, Nano and Multilingual")
    wanted = " or ".join(v.t3_file for v in VARIANTS.values())
    raise ConvertError(f"{snapshot}: no Chatterbox T3 checkpoint found (looked for {wanted})")


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not path.exists():
        raise ConvertError(f"{path}: missing from the snapshot")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise ConvertError(f"{path}: not a readable safetensors file ({e})") from None


def _read_pt(path: Path, what: str = "") -> object:
    """A snapshot's `.pt` file through the restricted unpickler; ConvertError when it is missing
    (`what`: what the file holds, for the message) or holds more than tensors."""
    try:
        return load_pt(path)
    except FileNotFoundError:
        raise ConvertError(f"{path}: missing from the snapshot{f' ({what})' if what else ''}") from None
    except TorchPickleError as e:
        raise ConvertError(str(e)) from None


def load_builtin_voice(path: Path) -> dict[str, np.ndarray]:
    """`conds.pt` (Conditionals.save) -> the five conditioning tensors, flattened."""
    conds = _read_pt(path, "the built-in voice")
    try:
        t3, gen = conds["t3"], conds["gen"]
        voice = {
            "voice.speaker_emb": np.asarray(t3["speaker_emb"], np.float32).reshape(-1),
            "voice.cond_prompt_speech_tokens": np.asarray(t3["cond_prompt_speech_tokens"]).reshape(-1).astype(np.int32),
            "voice.embedding": np.asarray(gen["embedding"], np.float32).reshape(-1),
            "voice.prompt_token": np.asarray(gen["prompt_token"]).reshape(-1).astype(np.int32),
            "voice.prompt_feat": np.asarray(gen["prompt_feat"], np.float32).reshape(-1, np.asarray(gen["prompt_feat"]).shape[-1]),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise ConvertError(f"{path}: not a Chatterbox Conditionals file ({e!r})") from None
    return voice


# --- writing ---------------------------------------------------------------------------

def add_kv(writer: GGUFWriter, key: str, value) -> None:
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, (int, np.integer)):
        writer.add_int32(key, int(value))
    elif isinstance(value, (float, np.floating)):
        writer.add_float32(key, float(value))
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, (list, tuple)):
        writer.add_array(key, list(value))
    else:
        raise TypeError(f"metadata {key}: unsupported value {value!r}")


def write_gguf_atomically(out_path: Path, fill: Callable[[GGUFWriter], None], arch: str = ARCH) -> None:
    """Write through engine_native.files.atomic_write: a failed or interrupted conversion
    leaves no partial model behind (raises WriteFailed naming the file)."""
    from engine_native.files import atomic_write

    Path(out_path).parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        writer = GGUFWriter(str(tmp), arch)
        fill(writer)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    atomic_write(out_path, write)


def _write_model(out_path, fill) -> None:
    from engine_native.files import WriteFailed

    try:
        write_gguf_atomically(Path(out_path), fill)
    except WriteFailed as e:
        raise ConvertError(str(e)) from None


def _add_tensor(writer: GGUFWriter, report: ConvertReport, name: str, arr: np.ndarray) -> None:
    if len(name) > MAX_NAME:
        raise ConvertError(f"tensor name too long for ggml ({len(name)} > {MAX_NAME}): {name}")
    if arr.dtype.kind in "iu":
        data, qtype = np.ascontiguousarray(arr, dtype=np.int32), Q.I32
    else:
        qtype = storage_type(name, arr.shape, report.quant)
        data = np.ascontiguousarray(arr, dtype=np.float32)
        if qtype == Q.F16:
            data = data.astype(np.float16)
        elif qtype != Q.F32:
            data = gguf_quants.quantize(data, qtype)
        report.n_quantised += qtype != Q.F32
    if qtype in (Q.F32, Q.F16, Q.I32):
        writer.add_tensor(name, data)
    else:
        writer.add_tensor(name, data, raw_dtype=qtype)
    report.n_tensors += 1
    report.n_bytes += data.nbytes
    report.types[qtype.name] += 1


def _counted(sources, inputs, progress: Callable[[str, float], None]) -> Iterator[tuple[str, np.ndarray]]:
    """The tensors of `sources` in turn, telling `progress` the share of the inputs' bytes
    stored so far (the converted tensors are the inputs' arrays, folded or cast: close enough
    for a progress bar; capped below 1 until the file is written)."""
    total = max(1, sum(int(np.asarray(a).nbytes) for state in inputs for a in state.values()))
    done = 0
    for source in sources:
        for name, arr in source:
            yield name, arr
            done += int(np.asarray(arr).nbytes)
            progress("converting", min(done / total, 0.99))


def _filterbank_tensors() -> Iterator[tuple[str, np.ndarray]]:
    yield "fb.mel_24k", filterbanks.mel_24k_filterbank()
    yield "fb.ve_mel", filterbanks.ve_mel_filterbank()
    yield "fb.kaldi_80", filterbanks.kaldi_fbank_filterbank()


def _filterbank_metadata() -> dict:
    meta = {}
    for prefix, params in (("fb.mel_24k", filterbanks.MEL_24K), ("fb.ve_mel", filterbanks.VE_MEL),
                           ("fb.kaldi_80", filterbanks.KALDI_FBANK)):
        for k, v in params.items():
            if isinstance(v, (bool, int, float, str, np.integer, np.floating)):
                meta[f"{prefix}.{k}"] = v
    return meta


def _metadata(variant: str, quant: str, t3_meta: dict, s3gen_meta: dict, ve_meta: dict, *extra: dict) -> dict:
    """A model file's chatterbox.* metadata, in the order it is written."""
    meta = {"variant": variant, "format_version": FORMAT_VERSION, "quant": quant,
            **t3_meta, **s3gen_meta, **ve_meta, **_filterbank_metadata()}
    for more in extra:
        meta.update(more)
    return meta


def _check_vocab(snapshot: Path, meta: dict, n_tokens: int) -> None:
    if meta["t3.text_vocab"] != n_tokens:
        raise ConvertError(f"{snapshot}: tokenizer has {n_tokens} tokens but T3 expects {meta['t3.text_vocab']}")


def _file_type(quant: str) -> int:
    return int(QUANT_TYPES[quant]) if quant != "f32" else 0


def _shared_tensors(s3: dict, spec: Variant, ve: dict, ve_file: str, voice: dict) -> tuple:
    """The tensors every variant writes after its T3's: S3Gen, VoiceEncoder, voice, filterbanks."""
    return (tensors.s3gen_tensors(s3, spec.s3gen_file), tensors.ve_tensors(ve, ve_file), iter(voice.items()),
            _filterbank_tensors())


def _with_progress(sources, inputs, progress: Callable[[str, float], None]) -> tuple:
    """`sources` as one source that tells `progress` how far the conversion is (_counted), then
    "writing" once every tensor is stored."""
    def counted():
        yield from _counted(sources, inputs, progress)
        progress("writing", 0.0)
    return (counted(),)


def _model_writer(name: str, meta: dict, tokenizer: Callable[[GGUFWriter], None], sources,
                  report: ConvertReport) -> Callable[[GGUFWriter], None]:
    """What a converted model file holds, in order: name, file type, metadata, the tokenizer
    (written by `tokenizer`), then every tensor of `sources` through the quantisation policy."""
    def fill(w: GGUFWriter) -> None:
        w.add_name(name)
        w.add_file_type(_file_type(report.quant))
        for key, value in meta.items():
            add_kv(w, f"{ARCH}.{key}", value)
        tokenizer(w)
        for source in sources:
            for tensor_name, arr in source:
                _add_tensor(w, report, tensor_name, arr)
    return fill


def _write_and_report(out_path: Path, fill: Callable[[GGUFWriter], None], report: ConvertReport, started: float,
                      log: Callable[[str], None]) -> ConvertReport:
    _write_model(out_path, fill)
    report.seconds = time.perf_counter() - started
    log(f"quantised {report.n_quantised} of {report.n_tensors} tensors")
    log(report.summary())
    return report


def convert(snapshot_dir: str | os.PathLike, out_path: str | os.PathLike, *, variant: str = "auto",
            quant: str = "f32", log: Callable[[str], None] | None = print,
            progress: Callable[[str, float], None] | None = None) -> ConvertReport:
    """Convert a snapshot folder into one GGUF file at `out_path` (written atomically).
    `progress(stage, fraction)` hears "reading", then "converting" with the share of the
    weights stored (quantised) so far, then "writing"."""
    started = time.perf_counter()
    snapshot, out_path = Path(snapshot_dir), Path(out_path)
    if quant not in QUANT_TYPES:
        raise ConvertError(f"unknown quantisation {quant!r}; choose one of {', '.join(QUANT_TYPES)}")
    detected = detect_variant(snapshot)
    if variant == "auto":
        variant = detected
    elif variant not in VARIANTS:
        raise ConvertError(f"unknown variant {variant!r}; choose auto, {', '.join(VARIANTS)}")
    elif variant != detected:
        raise ConvertError(f"{snapshot}: holds a {detected} checkpoint, not {variant}")
    spec = VARIANTS[variant]
    log = log or (lambda _msg: None)
    progress = progress or (lambda _stage, _fraction: None)
    progress("reading", 0.0)
    if variant == "mtl":
        return _convert_mtl(snapshot, out_path, spec, quant, log, started, progress)

    # Read and validate every input before writing a byte.
    t3 = load_safetensors(snapshot / spec.t3_file)
    s3 = load_safetensors(snapshot / spec.s3gen_file)
    ve = load_safetensors(snapshot / VE_FILE)
    voice = load_builtin_voice(snapshot / CONDS_FILE)
    tok = read_tokenizer(snapshot)
    meta = _metadata(variant, quant, hparams.t3_hparams(t3, str(snapshot / spec.t3_file)),
                     hparams.s3gen_hparams(s3, spec.meanflow, str(snapshot / spec.s3gen_file)),
                     hparams.ve_hparams(ve, str(snapshot / VE_FILE)))
    _check_vocab(snapshot, meta, len(tok.tokens))

    report = ConvertReport(path=out_path, variant=variant, quant=quant)
    log(f"converting {snapshot} ({variant}) -> {out_path} [{quant}]")

    def tokenizer(w: GGUFWriter) -> None:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tok.tokens)
        w.add_token_types(tok.token_types)
        w.add_token_merges(tok.merges)
        w.add_bos_token_id(tok.bos_id)
        w.add_eos_token_id(tok.eos_id)
        for flag in ("special", "lstrip", "rstrip", "normalized", "single_word"):
            add_kv(w, f"{ARCH}.added_tokens.{flag}", [getattr(t, flag) for t in tok.added])
        add_kv(w, f"{ARCH}.added_tokens.id", [t.id for t in tok.added])

    tensors_in_order = (tensors.t3_tensors(t3, spec.t3_file), *_shared_tensors(s3, spec, ve, VE_FILE, voice))
    fill = _model_writer(f"Chatterbox {variant.capitalize()}", meta, tokenizer,
                         _with_progress(tensors_in_order, (t3, s3, ve, voice), progress), report)
    return _write_and_report(out_path, fill, report, started, log)


def load_pt_state(path: Path) -> dict[str, np.ndarray]:
    """A `torch.save(state_dict)` file (s3gen.pt, ve.pt) -> {name: array}."""
    state = _read_pt(path)
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise ConvertError(f"{path}: not a state dict of tensors")
    return dict(state)


def _convert_mtl(snapshot: Path, out_path: Path, spec: Variant, quant: str, log, started: float,
                 progress: Callable[[str, float], None]) -> ConvertReport:
    """The Multilingual snapshot: Llama T3 + standard-CFM S3Gen + grapheme tokenizer + Cangjie."""
    t3 = load_safetensors(snapshot / spec.t3_file)
    s3 = load_pt_state(snapshot / spec.s3gen_file)
    ve = load_pt_state(snapshot / mtl.VE_FILE)
    voice = load_builtin_voice(snapshot / CONDS_FILE)
    tok = mtl.read_grapheme_tokenizer(snapshot)
    glyphs, codes = mtl.read_cangjie(snapshot)
    meta = _metadata("mtl", quant, mtl.t3_llama_hparams(t3, str(snapshot / spec.t3_file)),
                     hparams.s3gen_hparams(s3, spec.meanflow, str(snapshot / spec.s3gen_file)),
                     hparams.ve_hparams(ve, str(snapshot / mtl.VE_FILE)), mtl.tokenizer_metadata(tok, glyphs, codes))
    meta["s3gen.n_silence_tokens"] = 0          # generate() appends no silence tail
    _check_vocab(snapshot, meta, len(tok.tokens))
    try:
        emotion = np.asarray(load_pt(snapshot / CONDS_FILE)["t3"].get("emotion_adv", 0.5), np.float32).reshape(-1)
        meta["voice.builtin_exaggeration"] = float(emotion[0]) if emotion.size else 0.5
    except (TorchPickleError, AttributeError, KeyError) as e:
        raise ConvertError(f"{snapshot / CONDS_FILE}: unreadable emotion_adv ({e!r})") from None
    report = ConvertReport(path=out_path, variant="mtl", quant=quant)
    log(f"converting {snapshot} (mtl) -> {out_path} [{quant}]")
    if not glyphs:
        log(f"note: no {mtl.CANGJIE_FILE} in {snapshot}: Chinese glyphs will pass through unconverted, "
            "as the reference does without the table")

    def tokenizer(w: GGUFWriter) -> None:
        w.add_tokenizer_model("chatterbox-grapheme")
        w.add_token_list(tok.tokens)
        w.add_token_types(tok.token_types)
        w.add_bos_token_id(tok.start_id)
        w.add_eos_token_id(tok.stop_id)
        w.add_unk_token_id(tok.unk_id)

    tensors_in_order = (mtl.t3_llama_tensors(t3, spec.t3_file), *_shared_tensors(s3, spec, ve, mtl.VE_FILE, voice))
    fill = _model_writer("Chatterbox Multilingual", meta, tokenizer,
                         _with_progress(tensors_in_order, (t3, s3, ve, voice), progress), report)
    return _write_and_report(out_path, fill, report, started, log)


# --- requantise and inspect an existing model -------------------------------------------

def _read(path: Path) -> GGUFReader:
    if not path.exists():
        raise ConvertError(f"{path}: no such model file")
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # gguf raises ValueError, struct.error, IndexError... on corrupt files
        raise ConvertError(damaged_gguf_message(path, e)) from None
    arch = reader.get_field("general.architecture")
    if arch is None or arch.contents() != ARCH:
        raise ConvertError(f"{path}: not a Chatterbox model (architecture {arch.contents() if arch else None!r})")
    return reader


def damaged_gguf_message(path, error: BaseException) -> str:
    """One line for a GGUF file gguf's reader failed on: what is wrong with its header or data
    (engine_native.gguf_header) rather than the numpy words the reader fails with."""
    from engine_native.gguf_header import GGUFFileError, read_header

    try:
        read_header(path).check_complete()
    except GGUFFileError as e:
        return str(e)
    except OSError as e:
        return f"{path}: cannot be read ({e.strerror or e})"
    return f"{path}: not a readable GGUF file ({error})"


def _tensor_as_float(t) -> np.ndarray:
    qtype = Q(t.tensor_type)
    shape = tuple(int(n) for n in reversed(t.shape))
    if qtype in (Q.F32, Q.F16, Q.I32):
        return np.asarray(t.data).reshape(shape)
    return gguf_quants.dequantize(np.asarray(t.data), qtype).reshape(shape)


def requantize(in_path: str | os.PathLike, out_path: str | os.PathLike, quant: str,
               log: Callable[[str], None] | None = print) -> ConvertReport:
    """Re-store an existing model under another quantisation, through the same policy.
    From an already-quantised file the result carries that file's rounding too."""
    started = time.perf_counter()
    in_path, out_path = Path(in_path), Path(out_path)
    if quant not in QUANT_TYPES:
        raise ConvertError(f"unknown quantisation {quant!r}; choose one of {', '.join(QUANT_TYPES)}")
    reader = _read(in_path)
    variant = reader.get_field(f"{ARCH}.variant").contents()
    report = ConvertReport(path=out_path, variant=variant, quant=quant)
    log = log or (lambda _msg: None)

    def fill(w: GGUFWriter) -> None:
        for f in reader.fields.values():
            if f.name.startswith("GGUF.") or f.name in ("general.architecture", "general.file_type", f"{ARCH}.quant"):
                continue
            vtype = GGUFValueType(f.types[0])
            sub = GGUFValueType(f.types[-1]) if vtype == GGUFValueType.ARRAY else None
            w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
        w.add_file_type(_file_type(quant))
        add_kv(w, f"{ARCH}.quant", quant)
        for t in reader.tensors:
            arr = _tensor_as_float(t)
            if Q(t.tensor_type) == Q.I32:
                arr = arr.astype(np.int32)
            _add_tensor(w, report, t.name, arr.astype(np.float32) if arr.dtype == np.float16 else arr)

    return _write_and_report(out_path, fill, report, started, log)


def inspect_model(path: str | os.PathLike) -> dict:
    """Variant, quantisation, tensor counts and sizes per component of a model file."""
    path = Path(path)
    reader = _read(path)
    components: dict[str, dict] = {}
    types: Counter = Counter()
    for t in reader.tensors:
        comp = t.name.split(".", 1)[0]
        c = components.setdefault(comp, {"tensors": 0, "bytes": 0, "params": 0})
        c["tensors"] += 1
        c["bytes"] += int(t.n_bytes)
        c["params"] += int(t.n_elements)
        types[Q(t.tensor_type).name] += 1

    def field(key, default=None):
        f = reader.get_field(key)
        return f.contents() if f is not None else default

    return {
        "path": str(path),
        "variant": field(f"{ARCH}.variant"),
        "quant": field(f"{ARCH}.quant"),
        "format_version": field(f"{ARCH}.format_version"),
        "file_bytes": path.stat().st_size,
        "n_tensors": len(reader.tensors),
        "types": dict(types),
        "components": components,
        "metadata": {f.name: f.contents() for f in reader.fields.values()
                     if f.name.startswith(f"{ARCH}.") and not f.name.startswith(f"{ARCH}.added_tokens")},
    }


def download_and_convert(repo_id: str, out_path: str | os.PathLike, *, quant: str = "f32",
                         variant: str = "auto", log: Callable[[str], None] | None = print) -> ConvertReport:
    """Fetch a snapshot with huggingface_hub, then convert it."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ConvertError("downloading needs huggingface_hub: pip install huggingface_hub") from None
    try:
        mtl_repo = variant == "mtl" or (variant == "auto" and repo_id == "ResembleAI/chatterbox")
        patterns = MTL_DOWNLOAD if mtl_repo else ["*.safetensors", "*.json", "*.txt", "*.pt"]
        local = snapshot_download(repo_id=repo_id, allow_patterns=patterns)
    except Exception as e:  # network errors come in many classes; all mean the same to the user
        raise ConvertError(f"could not download {repo_id} from Hugging Face ({type(e).__name__}: {e}). "
                           "Check the network, or convert a snapshot folder you already have.") from None
    return convert(local, out_path, variant=variant, quant=quant, log=log)
