"""Real human recordings and the trained GE2E speaker encoder, fetched from packages.

Nothing here is synthesised. Each source is a package fetched with its ordinary client
(`pip download --no-deps`, `apt-get download`) into the shared cache, once:

- PyPI `pyannote-audio` 4.0.7: `pyannote/audio/sample/sample.wav` (30 s, 16 kHz), two people
  in conversation, with the package's own speaker turns in `sample.rttm` (speaker90/91).
- Debian `codec2-examples`: codec2's speech test recordings in /usr/share/codec2 —
  `raw/speech_orig_16k.wav` (10.8 s, 16 kHz: a man and a woman reading Harvard sentences in
  turn), and 8 kHz recordings of single speakers (`wav/hts1a`, `hts2a`, `mmt1`, `vk5qi`,
  `ve9qrp`, `david4`, `vk2tpm_004`, ...), ham-radio operators and codec test talkers.
- Debian `asterisk-core-sounds-{en,es,fr,it,ru}-g722`: the Asterisk PBX prompts, 16 kHz
  (G.722), hundreds each, recorded by voice talents the packages name in their folders and
  copyright files: Allison Smith (en_US_f_Allison and es_MX_f_Allison: one woman in two
  languages), June Wallack (fr_CA_f_June), Carlo (it_IT_m_Carlo), a Russian woman
  (ru_RU_f_IvrvoiceRU). A few files are not speech and are the same in every language
  (tt-monkeys, beeps): `asterisk_prompts` gives the voicemail prompts (vm-*) only.
- PyPI `Resemblyzer` 0.1.4 (Apache-2.0): Resemble AI's trained GE2E speaker encoder
  (`resemblyzer/pretrained.pt`), converted by engine_native.convert.ge2e.

`FetchError` when a package cannot be had (offline machine): tests skip on it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
from filelock import FileLock

from tests.reference.cache import cache_root

PYANNOTE = "pyannote-audio==4.0.7"
RESEMBLYZER = "resemblyzer==0.1.4"
CODEC2_DEB = "codec2-examples"
ASTERISK_LANGS = ("en", "es", "fr", "it", "ru")


class FetchError(RuntimeError):
    pass


def root() -> Path:
    return cache_root() / "real-speech"


def _pip_download(spec: str) -> Path:
    folder = root() / "pypi"
    folder.mkdir(parents=True, exist_ok=True)
    name, version = spec.split("==")
    pattern = re.compile(rf"^{re.sub(r'[-_.]+', '[-_.]', name)}-{re.escape(version)}-.*\.whl$", re.I)
    with FileLock(str(folder / ".lock")):
        found = [p for p in folder.iterdir() if pattern.match(p.name)]
        if not found:
            r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                                "-d", str(folder), spec], capture_output=True, text=True, timeout=600, check=False)
            found = [p for p in folder.iterdir() if pattern.match(p.name)]
            if r.returncode != 0 or not found:
                raise FetchError(f"pip download {spec} failed: {r.stderr.strip()[-300:]}")
    return found[0]


def _deb(package: str) -> Path:
    """The package's files, extracted (not installed) under the cache."""
    out = root() / "deb" / package
    with FileLock(str(out) + ".lock"):
        if (out / ".done").exists():
            return out
        if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
            raise FetchError("apt-get / dpkg-deb are not available")
        dl = root() / "deb" / "downloads"
        dl.mkdir(parents=True, exist_ok=True)
        debs = list(dl.glob(f"{package}_*.deb"))
        if not debs:
            r = subprocess.run(["apt-get", "download", package], cwd=dl, capture_output=True, text=True,
                               timeout=600, check=False)
            debs = list(dl.glob(f"{package}_*.deb"))
            if r.returncode != 0 or not debs:
                raise FetchError(f"apt-get download {package} failed: {r.stderr.strip()[-300:]}")
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(out)], check=True, capture_output=True)
        (out / ".done").write_text(debs[0].name)
    return out


# ------------------------------------------------------------------ the speaker encoder

def resemblyzer_wheel() -> Path:
    return _pip_download(RESEMBLYZER)


def speaker_encoder() -> Path:
    """The GE2E speaker-encoder GGUF: where scripts/setup.sh put it, else converted here."""
    from engine_native.convert.ge2e import convert_speaker_encoder, default_path

    installed = default_path()
    if installed.exists():
        return installed
    out = root() / "ge2e-resemblyzer-0.1.4.gguf"
    with FileLock(str(out) + ".lock"):
        if not out.exists():
            convert_speaker_encoder(resemblyzer_wheel(), out, log=None)
    return out


# ------------------------------------------------------------------ recordings

def read(path, rate: int | None = None) -> tuple[np.ndarray, int]:
    """Mono float32 samples of a recording (any format ffmpeg reads), at `rate` if given."""
    from voice_lab.decode import decode

    x, sr = decode(str(path), rate=rate)
    return np.ascontiguousarray(x.mean(axis=1), np.float32), sr


def pyannote_sample() -> tuple[Path, list[tuple[float, float, str]]]:
    """pyannote's sample conversation and its speaker turns [(start, end, speaker)]."""
    out = root() / "pyannote"
    wav = out / "sample.wav"
    with FileLock(str(out) + ".lock"):
        if not wav.exists():
            out.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(_pip_download(PYANNOTE)) as zf:
                for member in ("sample.wav", "sample.rttm"):
                    (out / member).write_bytes(zf.read(f"pyannote/audio/sample/{member}"))
    turns = []
    for line in (out / "sample.rttm").read_text().splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] == "SPEAKER":
            turns.append((float(f[3]), float(f[3]) + float(f[4]), f[7]))
    return wav, turns


def codec2(name: str) -> Path:
    """A file of codec2's speech recordings, e.g. "raw/speech_orig_16k.wav", "wav/hts1a.wav"."""
    path = _deb(CODEC2_DEB) / "usr" / "share" / "codec2" / name
    if not path.exists():
        raise FetchError(f"{CODEC2_DEB} has no {name}")
    return path


def codec2_compilation() -> tuple[Path, list[tuple[float, float, str]]]:
    """codec2's wav/all.wav (57 s, 8 kHz: its test talkers one after another) and where each
    talker is, found by matching the package's own single-talker files into it (normalised
    cross-correlation >= 0.99): [(start, end, file stem)]; the rest of the file (its last
    10 s, whose talker the package ships on its own nowhere) is "unknown"."""
    path = codec2("wav/all.wav")
    x, sr = read(path)
    size = 1 << int(np.ceil(np.log2(2 * x.size)))
    spectrum = np.fft.rfft(x, size)
    known = []
    for name in ("raw/hts1a.raw", "raw/hts2a.raw", "raw/morig.raw", "raw/forig.raw", "raw/ve9qrp_10s.raw",
                 "raw/cq_ref.raw", "raw/kristoff.raw", "raw/vk5qi.raw"):
        y = np.fromfile(codec2(name), np.int16).astype(np.float32) / 32768.0
        c = np.fft.irfft(spectrum * np.conj(np.fft.rfft(y, size)), size)[: x.size - y.size + 1]
        k = int(np.argmax(np.abs(c)))
        seg = x[k:k + y.size]
        if float(seg @ y / (np.linalg.norm(seg) * np.linalg.norm(y) + 1e-12)) < 0.99:
            raise FetchError(f"codec2's all.wav no longer holds {name}")
        known.append((k / sr, (k + y.size) / sr, Path(name).stem.replace("_10s", "")))
    known.sort()
    if x.size / sr - known[-1][1] > 0.5:
        known.append((known[-1][1], x.size / sr, "unknown"))
    return path, known


def asterisk_prompts(lang: str) -> tuple[str, list[Path]]:
    """(the voice's folder name, e.g. "en_US_f_Allison"; its voicemail prompts, largest first)."""
    base = _deb(f"asterisk-core-sounds-{lang}-g722") / "usr" / "share" / "asterisk" / "sounds"
    folders = [p for p in base.iterdir() if p.is_dir()]
    if len(folders) != 1:
        raise FetchError(f"asterisk-core-sounds-{lang}-g722: expected one voice folder, found {folders}")
    files = [p for p in folders[0].glob("vm-*.g722") if p.is_file()]
    return folders[0].name, sorted(files, key=lambda p: (-p.stat().st_size, p.name))


def read_g722(path) -> tuple[np.ndarray, int]:
    """A raw G.722 prompt, decoded by ffmpeg at 16 kHz."""
    r = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "g722", "-i", str(path),
                        "-ac", "1", "-ar", "16000", "-f", "f32le", "-"], capture_output=True, check=True)
    return np.frombuffer(r.stdout, np.float32).copy(), 16000


# ------------------------------------------------------------------ an independent measure

def f0_track(x: np.ndarray, rate: int, fmin: float = 60.0, fmax: float = 400.0) -> np.ndarray:
    """Pitch (Hz) of the voiced 40 ms frames (10 ms hop) by normalised autocorrelation: a
    frame is voiced when its level is within 30 dB of the loudest and its best lag's
    correlation is >= 0.6. The check on who speaks where that owes nothing to any embedder."""
    x = np.asarray(x, np.float64)
    n, hop = int(0.04 * rate), int(0.01 * rate)
    if x.size < n:
        return np.zeros(0)
    frames = np.lib.stride_tricks.sliding_window_view(x, n)[::hop]
    frames = frames - frames.mean(axis=1, keepdims=True)
    energy = (frames ** 2).sum(axis=1)
    loud = energy > energy.max() * 1e-3
    lo, hi = int(rate / fmax), min(int(rate / fmin), n - 1)
    spec = np.fft.rfft(frames[loud], 2 * n, axis=1)
    ac = np.fft.irfft(np.abs(spec) ** 2, axis=1)[:, :n]
    ac = ac / np.maximum(ac[:, :1], 1e-12)
    lag = lo + np.argmax(ac[:, lo:hi], axis=1)
    peak = ac[np.arange(ac.shape[0]), lag]
    return rate / lag[peak >= 0.6]


def median_f0(x: np.ndarray, rate: int) -> float:
    f = f0_track(x, rate)
    return float(np.median(f)) if f.size >= 5 else float("nan")


#: a span's median F0 under this is a man's voice (codec2's Harvard recording: the man reads at
#: 114-133 Hz, the woman at 229 Hz)
MALE_BELOW_HZ = 165.0


def voices_by_pitch(path, spans) -> set[str]:
    """{"man"} / {"woman"} / both: who speaks in each span of the recording, by its median F0."""
    x, sr = read(path)
    return {"man" if median_f0(x[int(a * sr):int(b * sr)], sr) < MALE_BELOW_HZ else "woman" for a, b in spans}
