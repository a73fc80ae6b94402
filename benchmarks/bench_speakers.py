"""Speaker identity on real recordings with the trained GE2E encoder: parity with Resemblyzer,
likeness distributions and threshold, clustering statistics, one-speaker clone windows.

    .venv/bin/python benchmarks/bench_speakers.py [parity likeness clustering windows assembled]

Every recording is fetched from a package (tests/helpers/real_speech.py says which and why
they are human); nothing is synthesised. Parity needs the reference venv with Resemblyzer
(tests/reference/setup_venv.sh). Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers import real_speech as rs  # noqa: E402

CODEC2_SINGLE = ["wav/ve9qrp.wav", "wav/david4.wav", "wav/vk2tpm_004.wav", "wav/vk5qi.wav"]
PIECE_SECONDS = 4.0


def cos(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def regions_of(x, sr):
    from voice_lab.silence import detect_silence, speech_regions

    return speech_regions(detect_silence(x.reshape(-1, 1), sr, -30, 0.3), x.size / sr)


def solo_parts(x, sr, turns, who, min_seconds=0.8):
    """The parts of `who`'s turns where nobody else speaks (pyannote's RTTM)."""
    out = []
    for s, e, k in turns:
        if k != who:
            continue
        parts = [(s, e)]
        for a, b, other in turns:
            if other == who:
                continue
            parts = [p for (u, v) in parts for p in ([(u, min(v, a)), (max(u, b), v)] if a < v and b > u else [(u, v)])]
        out += [x[int(u * sr):int(v * sr)] for u, v in parts if v - u >= min_seconds]
    return out


def speakers_and_clips() -> dict[str, list[tuple[np.ndarray, int]]]:
    """Speaker -> real clips (16 kHz or 8 kHz), at least two per speaker."""
    out: dict[str, list] = {}
    for lang in rs.ASTERISK_LANGS:
        voice, prompts = rs.asterisk_prompts(lang)
        clips = []
        for p in prompts:
            x, sr = rs.read_g722(p)
            if 3.0 <= x.size / sr <= 8.0:
                clips.append((x, sr))
            if len(clips) == 4:
                break
        # Allison Smith reads both the English and the Spanish prompts: one speaker, two languages
        name = "asterisk Allison Smith (en + es, 16k)" if voice.endswith("_Allison") else f"asterisk {voice} (16k)"
        out[name] = out.get(name, []) + (clips[:2] if voice.endswith("_Allison") else clips)
    for name in CODEC2_SINGLE:
        x, sr = rs.read(rs.codec2(name))
        n = int(PIECE_SECONDS * sr)
        pieces = [x[i:i + n] for i in range(0, x.size - n + 1, n)][:4]
        out[f"codec2 {Path(name).stem} (8k)"] = [(p, sr) for p in pieces]
    x, sr = rs.read(rs.codec2("raw/speech_orig_16k.wav"))
    regs = regions_of(x, sr)
    f0 = [rs.median_f0(x[int(r.start * sr):int(r.end * sr)], sr) for r in regs]
    for label, pick in (("man", lambda f: f < rs.MALE_BELOW_HZ), ("woman", lambda f: f >= rs.MALE_BELOW_HZ)):
        out[f"codec2 harvard {label} (16k)"] = [(x[int(r.start * sr):int(r.end * sr)], sr)
                                                 for r, f in zip(regs, f0) if pick(f)]
    wav, turns = rs.pyannote_sample()
    x, sr = rs.read(wav)
    for who in ("speaker90", "speaker91"):
        parts = solo_parts(x, sr, turns, who)
        joined = np.concatenate(parts)
        half = joined.size // 2
        out[f"pyannote {who} (16k)"] = [(joined[:half], sr), (joined[half:], sr)]
    return out


def parity(enc) -> None:
    from tests.helpers.resemblyzer_ref import embed_clips

    clips, names = [], []
    for n in ["raw/speech_orig_16k.wav", "wav/hts1a.wav", "wav/hts2a.wav", "wav/mmt1.wav", "wav/morig.wav",
              "wav/forig.wav", "wav/vk5qi.wav", "wav/cross.wav", "wav/big_dog.wav", "wav/david4.wav"]:
        clips.append(rs.read(rs.codec2(n)))
        names.append(f"codec2 {n}")
    wav, _ = rs.pyannote_sample()
    x, sr = rs.read(wav)
    clips += [(x[:15 * sr], sr), (x[15 * sr:], sr)]
    names += ["pyannote sample 0-15 s", "pyannote sample 15-30 s"]
    for lang in rs.ASTERISK_LANGS:
        voice, prompts = rs.asterisk_prompts(lang)
        clips.append(rs.read_g722(prompts[10]))
        names.append(f"asterisk {voice} {prompts[10].stem}")
    ref = embed_clips(clips)
    print("\n## Parity: our VoiceEncoder (GE2E weights) vs Resemblyzer embed_utterance\n")
    print("| clip | s | same input: cosine | max_abs | rel L2 | end to end: cosine |")
    print("|---|---|---|---|---|---|")
    worst = 1.0
    for name, (x, sr), r in zip(names, clips, ref):
        ours = enc.embed_prepared(r["pre"])
        c = cos(ours, r["emb"])
        worst = min(worst, c)
        rel = float(np.linalg.norm(ours - r["emb"]) / np.linalg.norm(r["emb"]))
        print(f"| {name} | {x.size / sr:.1f} | {c:.6f} | {np.abs(ours - r['emb']).max():.2e} | {rel:.2e} | "
              f"{cos(enc.embed(x, sr), r['emb']):.4f} |")
    print(f"\nworst same-input cosine over {len(clips)} clips: {worst:.6f}")


def likeness(enc) -> float:
    data = speakers_and_clips()
    emb = {k: [enc.embed(x, sr) for x, sr in v] for k, v in data.items()}
    same, diff = [], []
    print("\n## Likeness: GE2E cosine between clips\n")
    print("| speaker | clips (s) | same-speaker cosines |")
    print("|---|---|---|")
    for k, es in emb.items():
        s = [cos(a, b) for a, b in itertools.combinations(es, 2)]
        same += s
        secs = ", ".join(f"{x.size / sr:.1f}" for x, sr in data[k])
        print(f"| {k} | {secs} | {min(s):.3f}-{max(s):.3f} |")
    keys = list(emb)
    per_pair = []
    for a, b in itertools.combinations(keys, 2):
        d = [cos(x, y) for x in emb[a] for y in emb[b]]
        diff += d
        per_pair.append((max(d), a, b))
    same, diff = np.array(same), np.array(diff)
    print(f"\n{len(keys)} speakers; same-speaker pairs: {same.size}, different-speaker pairs: {diff.size}")
    for name, v in (("same", same), ("different", diff)):
        q = np.percentile(v, [0, 5, 25, 50, 75, 95, 100])
        print(f"{name:9s}: min {q[0]:.3f}  p5 {q[1]:.3f}  p25 {q[2]:.3f}  median {q[3]:.3f}  p75 {q[4]:.3f}  "
              f"p95 {q[5]:.3f}  max {q[6]:.3f}")
    print("closest different speakers:", ", ".join(f"{a} / {b} {m:.3f}" for m, a, b in sorted(per_pair)[-4:]))
    grid = np.arange(0.3, 1.0, 0.005)
    err = [(np.mean(same < t) + np.mean(diff >= t)) / 2 for t in grid]
    best = float(grid[int(np.argmin(err))])
    print(f"threshold with the fewest errors (mean of miss and false-accept rates): {best:.3f} "
          f"(misses {np.mean(same < best):.1%}, false accepts {np.mean(diff >= best):.1%})")
    from engine_native.likeness import SAME_SPEAKER, DIFFERENT_SPEAKER

    print(f"engine_native.likeness: same speaker >= {SAME_SPEAKER}: {np.mean(same >= SAME_SPEAKER):.1%} of same, "
          f"{np.mean(diff >= SAME_SPEAKER):.1%} of different pairs; different < {DIFFERENT_SPEAKER}: "
          f"{np.mean(diff < DIFFERENT_SPEAKER):.1%} of different, {np.mean(same < DIFFERENT_SPEAKER):.1%} of same")
    return best


def clustering(enc) -> None:
    from voice_lab.speakers import MAX_CENTROID_COSINE, find_speakers, two_means, windows

    print("\n## Clustering statistics of 2-means on 2 s windows (one speaker vs two)\n")
    print("| recording | speakers | windows | ratio | centroid cosine | found |")
    print("|---|---|---|---|---|---|")

    def row(name, n, x, sr):
        regs = regions_of(x, sr)
        ws = windows(regs)
        e = np.stack([enc.embed(x[int(w.start * sr):int(w.end * sr)], sr) for w in ws])
        lab, ratio = two_means(e)
        c = [e[lab == k].mean(0) for k in (0, 1)] if lab.any() else [e.mean(0)] * 2
        found = find_speakers(x, sr, regs, enc.embed).count
        print(f"| {name} | {n} | {len(ws)} | {ratio:.2f} | {cos(*c):.3f} | {found} |")

    row("codec2 speech_orig_16k (man/woman)", 2, *rs.read(rs.codec2("raw/speech_orig_16k.wav")))
    wav, turns = rs.pyannote_sample()
    x, sr = rs.read(wav)
    row("pyannote sample (two women)", 2, x, sr)
    for who in ("speaker90", "speaker91"):
        parts = solo_parts(x, sr, turns, who)
        gap = np.zeros(int(0.5 * sr), np.float32)
        row(f"pyannote {who} alone", 1, np.concatenate([p for q in parts for p in (q, gap)]), sr)
    for name in CODEC2_SINGLE:
        row(f"codec2 {name}", 1, *rs.read(rs.codec2(name)))
    for lang in rs.ASTERISK_LANGS:
        voice, prompts = rs.asterisk_prompts(lang)
        clips = [rs.read_g722(p)[0] for p in prompts[20:32]]
        gap = np.zeros(8000, np.float32)
        row(f"asterisk {voice} (12 prompts)", 1, np.concatenate([p for q in clips for p in (q, gap)]), 16000)
    print(f"\nsplit rule: centroid cosine <= {MAX_CENTROID_COSINE} or ratio >= 2 (see voice_lab/speakers.py)")


def windows_check(enc) -> None:
    from voice_lab.lab import prepare_clip

    print("\n## One-speaker clone windows (independent check: pitch or the package's turn times)\n")
    print("| recording | speakers found | speaker picked | window (s) | check |")
    print("|---|---|---|---|---|")
    path = rs.codec2("raw/speech_orig_16k.wav")
    x, sr = rs.read(path)

    def voices(spans):
        f0 = [rs.median_f0(x[int(a * sr):int(b * sr)], sr) for a, b in spans]
        sexes = {"man" if f < rs.MALE_BELOW_HZ else "woman" for f in f0}
        return (f"median F0 {', '.join(f'{f:.0f}' for f in f0)} Hz: "
                f"{'one voice (' + next(iter(sexes)) + ')' if len(sexes) == 1 else 'MIXED'}")

    for speaker in (0, 1):
        try:
            r = prepare_clip(path, target=10.0, embed=enc.embed, speaker=speaker)
        except Exception as e:  # too little speech of this speaker to clone: show their spans
            sp = prepare_clip(path, target=10.0, embed=enc.embed).report["speakers"]["speakers"][speaker]
            print(f"| codec2 speech_orig_16k | 2 | {speaker + 1} | ({e.__class__.__name__}: {sp['seconds']:.1f} s) "
                  f"spans {', '.join(f'{a:.2f}-{b:.2f}' for a, b in sp['spans'])} | {voices(sp['spans'])} |")
            continue
        spans = r.report["window"]["spans"]
        print(f"| codec2 speech_orig_16k | {r.report['speakers']['count']} | {speaker + 1} | "
              f"{', '.join(f'{a:.2f}-{b:.2f}' for a, b in spans)} | {voices(spans)} |")
    wav, turns = rs.pyannote_sample()
    known_turns_rows(enc, "pyannote sample (two women in conversation)", wav, turns, 6.0)
    known_turns_rows(enc, "pyannote sample (two women in conversation)", wav, turns, 10.0)
    path, talkers = rs.codec2_compilation()
    for target in (6.0, 10.0):
        label = f"codec2 all.wav ({len(talkers)} talker segments in turn), target {target:g} s"
        known_turns_rows(enc, label, path, talkers, target)


def known_turns_rows(enc, label: str, path, known, target: float) -> None:
    """A table row per speaker picked: the window and how many seconds of each known speaker it holds."""
    from voice_lab.lab import prepare_clip

    for speaker in (0, 1):
        try:
            r = prepare_clip(path, target=target, embed=enc.embed, speaker=speaker)
        except Exception as e:  # one speaker found (no speaker 2), or too little speech
            print(f"| {label} | - | {speaker + 1} | - | {e} |")
            continue
        spans = r.report["window"]["spans"]
        share: dict[str, float] = {}
        for a, b in spans:
            for s, e, who in known:
                share[who] = share.get(who, 0.0) + max(0.0, min(b, e) - max(a, s))
        print(f"| {label} | {r.report['speakers']['count']} | {speaker + 1} | "
              f"{', '.join(f'{a:.2f}-{b:.2f}' for a, b in spans)} | known seconds in window: "
              f"{', '.join(f'{k} {v:.2f}' for k, v in sorted(share.items()) if v > 0)} |")


def alternating(a: str, b: str, turns: int = 4, gap: float = 0.15):
    """Prompts of two Asterisk voices (languages `a`, `b`) in turn, `gap` s apart (a quick
    exchange: under the Voice Lab's 0.3 s pause, so each speech region holds both voices).
    Real recordings, assembled: (samples, 16000, [(start, end, voice)])."""
    pa, pb = rs.asterisk_prompts(a), rs.asterisk_prompts(b)
    parts, known, t = [], [], 0.0
    for i in range(turns):
        for voice, prompts in ((pa[0], pa[1]), (pb[0], pb[1])):
            x, sr = rs.read_g722(prompts[5 + i])
            loud = np.flatnonzero(np.abs(x) > 0.02)
            x = x[loud[0]:loud[-1] + 1]
            known.append((t, t + x.size / sr, voice))
            parts += [x, np.zeros(int(gap * sr), np.float32)]
            t += x.size / sr + gap
    return np.concatenate(parts), 16000, known


def assembled_windows(enc) -> None:
    import os
    import tempfile

    import soundfile as sf

    print("\n## One-speaker clone windows: real prompts of two voices in turn (checked by the known turns)\n")
    print("| recording | speakers found | speaker picked | window (s) | check |")
    print("|---|---|---|---|---|")
    for a, b in (("it", "fr"), ("it", "ru"), ("en", "fr"), ("en", "ru"), ("fr", "ru")):
        x, sr, known = alternating(a, b)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "turns.wav")
            sf.write(path, x, sr)
            names = " / ".join(sorted({v for _, _, v in known}))
            known_turns_rows(enc, f"{names} in turn ({x.size / sr:.0f} s, assembled)", path, known, 10.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    sections = {"parity": parity, "likeness": likeness, "clustering": clustering, "windows": windows_check,
                "assembled": assembled_windows}
    ap.add_argument("sections", nargs="*", choices=[[], *sections], default=[],
                    help=f"which tables (default all: {', '.join(sections)}; parity needs the reference venv)")
    args = ap.parse_args()
    from engine_native.speaker_encoder import SpeakerEncoder

    enc = SpeakerEncoder(rs.speaker_encoder())
    for name in args.sections or sections:
        sections[name](enc)


if __name__ == "__main__":
    main()
