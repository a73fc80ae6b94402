"""Resemble AI's Perth watermarker (PyPI `resemble-perth`, MIT) -> one small GGUF. No PyTorch.

    python -m engine_native.convert.perth --download -o perth.gguf     # pip-downloads the wheel first
    python -m engine_native.convert.perth resemble_perth-1.0.1-py3-none-any.whl -o perth.gguf

    from engine_native.convert.perth import convert_perth
    convert_perth("resemble_perth-1.0.1-py3-none-any.whl", "perth.gguf")

The source is the wheel, a folder that holds the installed package (site-packages, or the
package's `perth/perth_net/pretrained/implicit` folder), or the checkpoint `.pth.tar` itself
with `hparams.yaml` beside it. The checkpoint goes through the restricted unpickler
(engine_native.convert.torch_pickle). The GGUF (`general.architecture = "perth"`) holds the
hyper-parameters of `hparams.yaml`, the constants the package keeps in its code (the
normalisation headroom, the frame mask's fraction, LeakyReLU's slope, the magnitude cap, the
decoder's three time scales) and every weight in f32: the STFT window, the encoder's and the
three decoder branches' Conv1d layers in PyTorch layout. engine_native.watermark reads it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine_native.convert.errors import ConvertError
from engine_native.convert.torch_pickle import TorchPickleError, load_pt

ARCH = "perth"
PACKAGE = "resemble-perth"
VERSION = "1.0.1"
FILE_NAME = "perth.gguf"
PRETRAINED = "perth/perth_net/pretrained/implicit"
CHECKPOINT = "perth_net_250000.pth.tar"

# Constants the reference keeps in code, not in hparams.yaml (resemble-perth 1.0.1):
HEADROOM_DB = 15.0           # perth_net_implicit/utils.py normalize(headroom_db=15)
MASK_FRACTION = 0.05         # perth_net_implicit/model/__init__.py magmask(p=0.05)
LEAKY_RELU_SLOPE = 0.01      # nn.LeakyReLU() in model/__init__.py Conv
MAX_DB_EXPONENT = 10.0       # utils.py magphase_to_cx: 10 ** (dB / 20).clip(max=10)
DECODER_RATES = (1.25, 1.0, 0.75)   # model/decoder.py: slow, normal, fast branches
BRANCHES = ("slow", "normal", "fast")


@dataclass
class PerthReport:
    path: Path
    n_tensors: int
    n_params: int
    step: int


def _read_source(source: Path, work: Path) -> tuple[Path, Path, str]:
    """(checkpoint, hparams.yaml, run id) for a wheel, a folder or a checkpoint file."""
    if source.is_file() and zipfile.is_zipfile(source) and source.suffix == ".whl":
        try:
            with zipfile.ZipFile(source) as zf:
                names = set(zf.namelist())
                need = [f"{PRETRAINED}/{CHECKPOINT}", f"{PRETRAINED}/hparams.yaml"]
                missing = [n for n in need if n not in names]
                if missing:
                    raise ConvertError(f"{source}: not a {PACKAGE} wheel (no {missing[0]})")
                for n in need + [f"{PRETRAINED}/id.txt"]:
                    if n in names:
                        (work / Path(n).name).write_bytes(zf.read(n))
        except (zipfile.BadZipFile, OSError) as e:
            raise ConvertError(f"{source}: unreadable wheel ({e})") from None
        folder = work
    elif source.is_dir():
        folder = next((d for d in (source, source / PRETRAINED) if (d / CHECKPOINT).is_file()), None)
        if folder is None:
            raise ConvertError(f"{source}: no {CHECKPOINT} here or under {PRETRAINED}")
    elif source.is_file():
        folder = source.parent
        if not (folder / "hparams.yaml").is_file():
            raise ConvertError(f"{source}: no hparams.yaml beside the checkpoint")
        ckpt = source
        run_id = (folder / "id.txt").read_text().strip() if (folder / "id.txt").is_file() else ""
        return ckpt, folder / "hparams.yaml", run_id
    else:
        raise ConvertError(f"{source}: no such file or folder")
    run_id = (folder / "id.txt").read_text().strip() if (folder / "id.txt").is_file() else ""
    return folder / CHECKPOINT, folder / "hparams.yaml", run_id


def _hparams(path: Path) -> dict:
    import yaml

    try:
        hp = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConvertError(f"{path}: unreadable hparams ({e})") from None
    need = ("sample_rate", "n_fft", "hop_size", "window_size", "hidden_size", "max_wmark_freq",
            "stft_magnitude_min", "window_fn")
    if not isinstance(hp, dict) or any(k not in hp for k in need):
        raise ConvertError(f"{path}: hparams lack one of {', '.join(need)}")
    if hp["window_fn"] != "hann" or hp["window_size"] != hp["n_fft"]:
        raise ConvertError(f"{path}: only a Hann window of n_fft samples is supported "
                           f"(window_fn={hp['window_fn']}, window_size={hp['window_size']}, n_fft={hp['n_fft']})")
    return hp


def _layers(state: dict, prefix: str, path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    while f"{prefix}.{len(out)}.conv.weight" in state:
        i = len(out)
        w, b = state[f"{prefix}.{i}.conv.weight"], state.get(f"{prefix}.{i}.conv.bias")
        if w.ndim != 3 or b is None or b.shape != (w.shape[0],):
            raise ConvertError(f"{path}: {prefix}.{i} is not a Conv1d with bias")
        out.append((w, b))
    if not out:
        raise ConvertError(f"{path}: no layers {prefix}.0")
    return out


def convert_perth(source: str | os.PathLike, out_path: str | os.PathLike, *, log=print) -> PerthReport:
    """Write `out_path` (atomically) from resemble-perth's wheel, installed folder or checkpoint."""
    from engine_native.convert.model import add_kv, write_gguf_atomically
    from engine_native.files import WriteFailed

    source, out_path = Path(source), Path(out_path)
    with tempfile.TemporaryDirectory(prefix="cbs-perth-") as tmp:
        ckpt_path, hp_path, run_id = _read_source(source, Path(tmp))
        hp = _hparams(hp_path)
        try:
            ckpt = load_pt(ckpt_path)
        except (TorchPickleError, OSError) as e:
            raise ConvertError(str(e)) from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise ConvertError(f"{ckpt_path}: not a PerthNet checkpoint (no 'model' state dict)")
    state = ckpt["model"]
    n_bins = hp["n_fft"] // 2 + 1
    subband = int(round(n_bins * hp["max_wmark_freq"] / (hp["sample_rate"] / 2)))  # model/__init__.py
    tensors: dict[str, np.ndarray] = {}
    window = state.get("ap.spectrogram.window")
    if window is None or window.shape != (hp["n_fft"],):
        raise ConvertError(f"{ckpt_path}: no STFT window of {hp['n_fft']} values")
    tensors["stft.window"] = window
    encoder = _layers(state, "encoder.layers", ckpt_path)
    if encoder[0][0].shape[1] != subband or encoder[-1][0].shape[0] != subband:
        raise ConvertError(f"{ckpt_path}: the encoder does not map {subband} bins to {subband}")
    for i, (w, b) in enumerate(encoder):
        tensors[f"encoder.{i}.weight"], tensors[f"encoder.{i}.bias"] = w, b
    for branch in BRANCHES:
        layers = _layers(state, f"decoder.{branch}_layers", ckpt_path)
        if layers[0][0].shape[1] != subband or layers[-1][0].shape[0] != 2:
            raise ConvertError(f"{ckpt_path}: decoder branch {branch} does not map {subband} bins to 2")
        for i, (w, b) in enumerate(layers):
            tensors[f"decoder.{branch}.{i}.weight"], tensors[f"decoder.{branch}.{i}.bias"] = w, b
    step = int(ckpt.get("step", 0))

    def fill(w) -> None:
        w.add_name("Perth implicit watermarker")
        w.add_string("general.license", "MIT")
        meta = {
            "perth.source": f"{PACKAGE} {VERSION}: {PRETRAINED}/{CHECKPOINT}",
            "perth.run_id": run_id,
            "perth.checkpoint_step": step,
            "perth.sample_rate": int(hp["sample_rate"]),
            "perth.n_fft": int(hp["n_fft"]),
            "perth.hop_size": int(hp["hop_size"]),
            "perth.window_size": int(hp["window_size"]),
            "perth.hidden_size": int(hp["hidden_size"]),
            "perth.max_wmark_freq": float(hp["max_wmark_freq"]),
            "perth.subband": subband,
            "perth.stft_magnitude_min": float(hp["stft_magnitude_min"]),
            "perth.headroom_db": HEADROOM_DB,
            "perth.mask_fraction": MASK_FRACTION,
            "perth.leaky_relu_slope": LEAKY_RELU_SLOPE,
            "perth.max_db_exponent": MAX_DB_EXPONENT,
            "perth.decoder_rates": [float(r) for r in DECODER_RATES],
        }
        for k, v in meta.items():
            add_kv(w, k, v)
        for name, arr in tensors.items():
            w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))

    try:
        write_gguf_atomically(out_path, fill, arch=ARCH)
    except WriteFailed as e:
        raise ConvertError(str(e)) from None
    n_params = sum(int(a.size) for n, a in tensors.items() if n != "stft.window")
    report = PerthReport(out_path, len(tensors), n_params, step)
    if log:
        log(f"wrote {out_path}: {report.n_tensors} tensors, {n_params / 1e6:.2f} M parameters "
            f"({PACKAGE} {VERSION}, step {step})")
    return report


def download_wheel(folder: str | os.PathLike) -> Path:
    """`pip download resemble-perth==1.0.1 --no-deps` into `folder` (kept as a cache); the wheel."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(folder.glob(f"resemble_perth-{VERSION}-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
               "-d", str(folder), f"{PACKAGE}=={VERSION}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(folder.glob(f"resemble_perth-{VERSION}-*.whl"))
        if r.returncode != 0 or not found:
            raise ConvertError(f"could not download {PACKAGE}=={VERSION} with pip: "
                               f"{(r.stderr or r.stdout).strip().splitlines()[-1:] or ['no wheel']}")
    return found[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine_native.convert.perth",
                                description="Convert resemble-perth's watermarker into perth.gguf.")
    p.add_argument("source", nargs="?", help="the resemble-perth wheel, its installed folder, or the .pth.tar")
    p.add_argument("--download", metavar="CACHE_DIR",
                   help=f"pip-download {PACKAGE}=={VERSION} into CACHE_DIR (kept) and convert that wheel")
    p.add_argument("-o", "--output", required=True, help=f"the .gguf to write (the app looks for {FILE_NAME})")
    args = p.parse_args(argv)
    try:
        if bool(args.source) == bool(args.download):
            raise ConvertError("give either a source or --download CACHE_DIR")
        source = download_wheel(args.download) if args.download else args.source
        convert_perth(source, args.output)
    except ConvertError as e:
        print(f"convert-perth: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
