"""Interoperability and robustness of the Perth watermark: ours (engine_native.watermark) and
the official package (resemble-perth 1.0.1, tests/reference/stages_perth.py) side by side.

Clips (24 kHz): real speech from PyPI packages (tests/helpers/speech_samples.py; the 30 s pyannote
sample cut into 5 s pieces) and synthesised speech (espeak-ng, several voices), >= 20 in all.

Interoperability: each clip unmarked, marked by us and marked by the official package, read
by both detectors (get_watermark, rounded: marked when 1). Robustness, as the official
package's detector reads audio after a common change: each clip marked by us, then MP3 at
128 kbps, Ogg Vorbis (ffmpeg's default quality), resampled to 16 kHz and back (libsoxr HQ),
+6 dB (clipped to full scale) and -6 dB, cut to its first 3 s; the same changes on the
unmarked clip count false marks. Prints the detection rates as tables.

    PYTHONPATH=. .venv/bin/python benchmarks/watermark_campaign.py [--watermark-model perth.gguf]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

import numpy as np
import soundfile as sf

from tests.reference import refenv
from tests.reference.runner import run_stage
from tests.helpers.speech_samples import recordings, to_rate

RATE = 24000
ESPEAK = [  # (voice, words per minute, text)
    ("en", 160, "The quick brown fox jumps over the lazy dog and keeps on running far away."),
    ("en-us", 140, "She sells sea shells by the sea shore while the gulls circle overhead."),
    ("en-gb", 175, "A journey of a thousand miles begins with one small step forward today."),
    ("en", 120, "Every voice has a colour of its own that listeners recognise at once."),
    ("de", 150, "Der schnelle braune Fuchs springt über den faulen Hund und läuft davon."),
    ("fr", 150, "Le vif renard brun saute par-dessus le chien paresseux et s'enfuit au loin."),
    ("es", 150, "El veloz zorro marrón salta sobre el perro perezoso y corre muy lejos."),
    ("it", 150, "La volpe veloce salta sopra il cane pigro e corre lontano nel bosco verde."),
    ("nl", 150, "De snelle bruine vos springt over de luie hond en rent ver weg."),
    ("pt", 150, "A rápida raposa marrom pula sobre o cão preguiçoso e corre para longe."),
    ("en-us", 190, "Numbers like three hundred and forty two are read out one after another."),
    ("en", 100, "Slow and steady speech gives the detector plenty of voiced frames to read."),
]


def clips(folder: str) -> list[tuple[str, np.ndarray]]:
    out = []
    for rec in recordings():
        x = to_rate(rec.samples, rec.rate, RATE)
        if len(x) > 12 * RATE:   # long recordings: 5 s pieces
            for i in range(len(x) // (5 * RATE)):
                out.append((f"{rec.name}[{5 * i}-{5 * i + 5}s]", x[i * 5 * RATE:(i + 1) * 5 * RATE]))
        else:
            out.append((rec.name, x))
    for i, (voice, wpm, text) in enumerate(ESPEAK):
        path = os.path.join(folder, f"espeak{i}.wav")
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", path, text], check=True, capture_output=True)
        x, rate = sf.read(path, dtype="float32")
        out.append((f"espeak-{voice}-{wpm}", 0.7 * to_rate(x, rate, RATE) / max(1e-6, float(np.abs(x).max()))))
    return out


def ffmpeg_round_trip(x: np.ndarray, args: list[str], ext: str, folder: str) -> np.ndarray:
    src, enc = os.path.join(folder, "in.wav"), os.path.join(folder, f"enc.{ext}")
    sf.write(src, x, RATE, subtype="FLOAT")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", src, *args, enc], check=True)
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", enc, "-f", "f32le", "-ac", "1", "-ar", str(RATE), "pipe:"],
                         check=True, capture_output=True).stdout
    return np.frombuffer(raw, "<f4").copy()


def attacks(folder: str):
    import soxr

    return {
        "MP3 128 kbps": lambda x: ffmpeg_round_trip(x, ["-c:a", "libmp3lame", "-b:a", "128k"], "mp3", folder),
        "Ogg Vorbis": lambda x: ffmpeg_round_trip(x, ["-c:a", "libvorbis"], "ogg", folder),
        "16 kHz and back": lambda x: soxr.resample(soxr.resample(x, RATE, 16000, "HQ"), 16000, RATE, "HQ"),
        "+6 dB": lambda x: np.clip(2.0 * x, -1.0, 1.0).astype(np.float32),
        "-6 dB": lambda x: (0.5 * x).astype(np.float32),
        "cut to 3 s": lambda x: x[: 3 * RATE].copy(),
    }


def official_marked(x: np.ndarray) -> bool:
    return float(run_stage("perth_bits", refenv.REPO_ROOT, samples=x, sample_rate=np.asarray(RATE))["bit"]) == 1.0


def rate(flags: list[bool]) -> str:
    return f"{sum(flags)}/{len(flags)} ({100.0 * sum(flags) / len(flags):.0f} %)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--watermark-model", help="perth.gguf (default: as benchmarks/bench_watermark.py finds it)")
    a = ap.parse_args(argv)
    from benchmarks.bench_watermark import watermark_model
    from engine_native.watermark import Watermarker

    wm = Watermarker(watermark_model(a.watermark_model))
    ours = lambda x: wm.detect(x, RATE).marked  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="cbs-wm-campaign-") as folder:
        cs = clips(folder)
        print(f"{len(cs)} clips: " + ", ".join(f"{n} ({len(x) / RATE:.1f} s)" for n, x in cs))
        rows = {k: ([], []) for k in ("unmarked", "marked by us", "marked by the official package")}
        changed = {k: ([], [], [], []) for k in attacks(folder)}
        for name, x in cs:
            by_us = wm.apply(x, RATE)
            by_them = run_stage("perth_apply", refenv.REPO_ROOT, samples=x, sample_rate=np.asarray(RATE))["wav"]
            for key, audio in (("unmarked", x), ("marked by us", by_us), ("marked by the official package", by_them)):
                rows[key][0].append(ours(audio))
                rows[key][1].append(official_marked(audio))
            for key, attack in attacks(folder).items():
                m, c = attack(by_us), attack(x)
                changed[key][0].append(ours(m))
                changed[key][1].append(official_marked(m))
                changed[key][2].append(ours(c))
                changed[key][3].append(official_marked(c))
            print(f"  {name}: done", flush=True)
    print("\nInteroperability (clips reported marked)")
    print(f"| {'audio':<32} | {'our detector':<14} | {'official detector':<17} |")
    for key, (o, t) in rows.items():
        print(f"| {key:<32} | {rate(o):<14} | {rate(t):<17} |")
    print("\nRobustness (marked by us, then changed; and the same change on the unmarked clip)")
    print(f"| {'change':<16} | {'ours: found':<14} | {'official: found':<15} | {'ours: false':<14} | "
          f"{'official: false':<15} |")
    for key, (o, t, fo, ft) in changed.items():
        print(f"| {key:<16} | {rate(o):<14} | {rate(t):<15} | {rate(fo):<14} | {rate(ft):<15} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
