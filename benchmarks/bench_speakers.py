"""Speaker identity on real recordings with the trained GE2E encoder: parity with Resemblyzer,
likeness distributions and threshold, clustering statistics, one-speaker clone windows.

    .venv/bin/python benchmarks/bench_speakers.py [parity likeness clustering windows assembled turns clone split]

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


def single_speaker_recordings() -> list[tuple[str, np.ndarray, int]]:
    """One person each (the clustering table's): pyannote's women alone, codec2's radio
    amateurs, Asterisk's voices (12 prompts, 0.5 s apart)."""
    wav, turns = rs.pyannote_sample()
    xp, sr = rs.read(wav)
    out = []
    for who in ("speaker90", "speaker91"):
        gap = np.zeros(int(0.5 * sr), np.float32)
        out.append((f"pyannote {who} alone", np.concatenate([p for q in solo_parts(xp, sr, turns, who)
                                                             for p in (q, gap)]), sr))
    out += [(f"codec2 {n}", *rs.read(rs.codec2(n))) for n in CODEC2_SINGLE]
    for lang in rs.ASTERISK_LANGS:
        voice, prompts = rs.asterisk_prompts(lang)
        gap = np.zeros(8000, np.float32)
        out.append((f"asterisk {voice} (12 prompts)",
                    np.concatenate([p for q in prompts[20:32] for p in (rs.read_g722(q)[0], gap)]), 16000))
    return out


def turn_marks(enc) -> None:
    """Why rule 6 and not change detection: the dip between adjacent 2 s windows and pitch."""
    from voice_lab.speakers import HOP_SECONDS, WINDOW_SECONDS, windows

    k = int(round(WINDOW_SECONDS / HOP_SECONDS))   # the window starting where this one ends

    def dips(x, sr):
        out = []
        for r in regions_of(x, sr):
            ws = windows([r])
            e = [enc.embed(x[int(w.start * sr):int(w.end * sr)], sr) for w in ws]
            out += [(ws[i].end, cos(e[i], e[i + k])) for i in range(len(ws) - k)
                    if abs(ws[i + k].start - ws[i].end) < 1e-6]
        return out

    print("\n## Turn marks: cosine of the 2 s before and the 2 s after each point inside a speech region\n")
    print("| recording | points | lowest | median |")
    print("|---|---|---|---|")
    for name, x, sr in single_speaker_recordings():
        v = [c for _, c in dips(x, sr)]
        print(f"| {name} | {len(v)} | " + (f"{min(v):.3f} | {np.median(v):.3f} |" if v else "- | - |"))
    wav, turns = rs.pyannote_sample()
    x, sr = rs.read(wav)
    print("\npyannote sample (two women), points within 0.3 s of a change in the turn file: " + ", ".join(
        f"{t:.2f} s {c:.3f}" for t, c in dips(x, sr)
        if any(abs(t - b) < 0.3 or abs(t - a) < 0.3 for a, b, _ in turns)))
    print("pyannote sample, median F0 of each 1 s where one woman speaks alone (turn file): " + "; ".join(
        f"{who} {min(f):.0f}-{max(f):.0f} Hz" for who in ("speaker90", "speaker91")
        if (f := [v for t in np.arange(0.0, x.size / sr - 1.0, 0.5)
                  if {k for a, b, k in turns if a < t + 1 and b > t} == {who}
                  and np.isfinite(v := rs.median_f0(x[int(t * sr):int((t + 1) * sr)], sr))])))


def more_single_speaker_recordings() -> list[tuple[str, np.ndarray, int]]:
    """One person each, held out of the thresholds: other Asterisk prompts (40-51), codec2's
    g3plx and cq_ref (8 kHz radio) and mmt1, and the woman of the Harvard clip alone (by pitch)."""
    out = []
    for lang in rs.ASTERISK_LANGS:
        voice, prompts = rs.asterisk_prompts(lang)
        gap = np.zeros(8000, np.float32)
        out.append((f"asterisk {voice} (prompts 40-51)",
                    np.concatenate([p for q in prompts[40:52] for p in (rs.read_g722(q)[0], gap)]), 16000))
    for name in ("raw/g3plx.raw", "raw/cq_ref.raw"):
        out.append((f"codec2 {name}", np.fromfile(rs.codec2(name), np.int16).astype(np.float32) / 32768.0, 8000))
    out.append(("codec2 wav/mmt1.wav", *rs.read(rs.codec2("wav/mmt1.wav"))))
    x, sr = rs.read(rs.codec2("raw/speech_orig_16k.wav"))
    gap = np.zeros(int(0.5 * sr), np.float32)
    woman = [x[int(r.start * sr):int(r.end * sr)] for r in regions_of(x, sr)
             if rs.median_f0(x[int(r.start * sr):int(r.end * sr)], sr) >= rs.MALE_BELOW_HZ]
    out.append(("codec2 speech_orig_16k, the woman alone", np.concatenate([p for q in woman for p in (q, gap)]), sr))
    return out


def mfcc(x, sr, bands: int = 24, ceps: int = 13):
    """MFCCs c1..c12 of the loud 25 ms frames (10 ms hop; mel bands 100 Hz-4 kHz, so 8 and 16 kHz
    recordings are alike): the classic speaker-change features, owing nothing to GE2E."""
    n, hop = int(0.025 * sr), int(0.01 * sr)
    if x.size < n:
        return np.zeros((0, ceps - 1))
    size = 1 << (n - 1).bit_length()
    power = np.abs(np.fft.rfft(np.lib.stride_tricks.sliding_window_view(np.asarray(x, np.float64), n)[::hop]
                               * np.hamming(n), size, axis=1)) ** 2
    freqs = np.fft.rfftfreq(size, 1 / sr)
    edges = 700 * (10 ** (np.linspace(2595 * np.log10(1 + 100 / 700), 2595 * np.log10(1 + min(sr / 2, 4000) / 700),
                                      bands + 2) / 2595) - 1)
    bank = np.stack([np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
                     for lo, mid, hi in zip(edges, edges[1:], edges[2:])])
    loud = power.sum(1) > power.sum(1).max() * 10 ** -3.5
    dct = np.cos(np.pi / bands * (np.arange(bands)[None, :] + 0.5) * np.arange(ceps)[:, None])
    return (np.log(power[loud] @ bank.T + 1e-10) @ dct.T)[:, 1:]


def gaussian_divergence(a, b) -> float:
    """Delta-BIC of one full-covariance Gaussian vs two, per frame and without the penalty."""
    def logdet(z):
        return np.linalg.slogdet(np.cov(z.T) + 1e-6 * np.eye(z.shape[1]))[1]

    z = np.vstack([a, b])
    return 0.5 * (logdet(z) - len(a) / len(z) * logdet(a) - len(b) / len(z) * logdet(b))


def split_statistics(enc) -> None:
    """Leads tried for two speakers of the same sex (pyannote's two women, one speaker by the
    centroid rule): statistics of the 2-means split of each recording, at 2 s windows every 0.5 s
    (today's) and 1 s every 0.25 s, for one-person recordings and multi-speaker ones. A
    statistic would do if pyannote's value lay beyond every one-person recording's."""
    from voice_lab.speakers import _normalise, cells_of, two_means, windows

    print("\n## Split statistics: one speaker or two (1 s / 2 s windows)\n")
    print("centroid: cosine of the 2-means centroids; confident: of the centroids of each side's windows at or "
          "beyond the side's median projection on the split axis; step: the largest within-region single "
          "change of that projection (sides of opposite sign, >= 1 s each), |mean difference| / pooled sd, "
          "and the difference; MFCC: delta-BIC per frame of the two sides' sure cells (gaussian_divergence)\n")
    print("| recording | people | windows 2 s / 1 s | centroid 2 s / 1 s | confident 2 s / 1 s | step 1 s (t, d) | "
          "MFCC 2 s / 1 s |")
    print("|---|---|---|---|---|---|---|")
    wav, turns = rs.pyannote_sample()
    recs = [("pyannote sample (two women)", 2, *rs.read(wav)),
            ("codec2 speech_orig_16k (man/woman)", 2, *rs.read(rs.codec2("raw/speech_orig_16k.wav"))),
            ("codec2 all.wav (talkers in turn)", "8", *rs.read(rs.codec2_compilation()[0]))]
    for a, b in (("en", "fr"), ("it", "fr"), ("en", "ru"), ("es", "fr"), ("en", "es")):
        x, sr, known = alternating(a, b)
        # the folders name the talker last: en_US_f_Allison and es_MX_f_Allison are one woman
        recs.append((f"asterisk {a}/{b} prompts in turn (assembled)", len({v.split("_")[-1] for _, _, v in known}),
                     x, sr))
    recs += [(name, 1, x, sr) for name, x, sr in single_speaker_recordings() + more_single_speaker_recordings()]
    for name, people, x, sr in recs:
        regs = regions_of(x, sr)
        cols = {}
        for length, hop in ((2.0, 0.5), (1.0, 0.25)):
            ws = windows(regs, length, hop)
            e = _normalise(np.stack([enc.embed(x[int(w.start * sr):int(w.end * sr)], sr) for w in ws]))
            lab, _ratio = two_means(e)
            if not lab.any():
                lab[int(np.argmin(e @ e.mean(0)))] = 1   # no split: the odd window out, for the figures
            c = _normalise(np.stack([e[lab == k].mean(0) for k in (0, 1)]))
            proj = e @ ((c[0] - c[1]) / np.linalg.norm(c[0] - c[1]))
            conf = _normalise(np.stack([e[(lab == k) & (s * proj >= np.median(s * proj[lab == k]))].mean(0)
                                        for k, s in ((0, 1), (1, -1))]))
            step = (0.0, 0.0)
            for r in regs:
                q = proj[[i for i, w in enumerate(ws) if w.start >= r.start - 1e-6 and w.end <= r.end + 1e-6]]
                m = int(round(1.0 / hop))
                for k in range(m, q.size - m + 1):
                    left, right = q[:k], q[k:]
                    if np.sign(left.mean()) == np.sign(right.mean()):
                        continue
                    spread = ((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum()
                    sd = np.sqrt(spread / (q.size - 2))
                    t = abs(left.mean() - right.mean()) / max(sd, 1e-6)
                    step = max(step, (t, abs(left.mean() - right.mean())))
            sides = {0: [], 1: []}
            for cell in cells_of(regs, ws, lab.tolist(), hop):
                if cell.sure:
                    sides[cell.speaker].append(mfcc(x[int(cell.span.start * sr):int(cell.span.end * sr)], sr))
            feats = [np.vstack(v) if v else np.zeros((0, 12)) for v in sides.values()]
            div = gaussian_divergence(*feats) if min(len(f) for f in feats) >= 50 else float("nan")
            cols[length] = (len(ws), float(c[0] @ c[1]), float(conf[0] @ conf[1]), step, div)
        two, one = cols[2.0], cols[1.0]
        print(f"| {name} | {people} | {two[0]} / {one[0]} | {two[1]:.3f} / {one[1]:.3f} | "
              f"{two[2]:.3f} / {one[2]:.3f} | {one[3][0]:.2f}, {one[3][1]:.2f} | {two[4]:.3f} / {one[4]:.3f} |")


def clone_windows(enc) -> None:
    """The clone window of speaker 1 (6 and 10 s) on every recording here, checked by the
    package's turn times, the known turns of assembled prompts or pitch (man/woman)."""
    import os
    import tempfile

    import soundfile as sf

    from voice_lab.lab import prepare_clip

    print("\n## Clone windows of speaker 1 on every recording (check: turn file, known turns, pitch)\n")
    print("| recording | target (s) | speakers found | window (s) | check |")
    print("|---|---|---|---|---|")
    wav, turns = rs.pyannote_sample()
    comp, talkers = rs.codec2_compilation()
    harvard = rs.codec2("raw/speech_orig_16k.wav")
    with tempfile.TemporaryDirectory() as tmp:
        def saved(name, x, sr):
            path = os.path.join(tmp, f"{len(os.listdir(tmp))}.wav")
            sf.write(path, x, sr)
            return name, path, None

        recs = [("pyannote sample (two women)", wav, turns), ("codec2 all.wav (talkers in turn)", comp, talkers),
                ("codec2 speech_orig_16k (man/woman)", harvard, "pitch")]
        for a, b in (("en", "fr"), ("it", "fr"), ("en", "ru")):
            x, sr, known = alternating(a, b)
            recs.append((f"asterisk {a}/{b} prompts in turn (assembled)", saved("", x, sr)[1], known))
        recs += [saved(name, x, sr) for name, x, sr in single_speaker_recordings()]
        for name, path, known in recs:
            for target in (6.0, 10.0):
                try:
                    r = prepare_clip(str(path), target=target, embed=enc.embed)
                except Exception as e:  # too little speech
                    print(f"| {name} | {target:g} | - | - | {e} |")
                    continue
                spans = r.report["window"]["spans"]
                if known == "pitch":
                    check = f"by pitch: {', '.join(sorted(rs.voices_by_pitch(path, spans)))}"
                elif known:
                    share: dict[str, float] = {}
                    for a, b in spans:
                        for s, e, who in known:
                            share[who] = share.get(who, 0.0) + max(0.0, min(b, e) - max(a, s))
                    check = "known seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(share.items()) if v > 0)
                else:
                    check = "one person's recording"
                window = ", ".join(f"{a:.2f}-{b:.2f}" for a, b in spans)
                print(f"| {name} | {target:g} | {r.report['speakers']['count']} | {window} "
                      f"({sum(b - a for a, b in spans):.1f}) | {check} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    sections = {"parity": parity, "likeness": likeness, "clustering": clustering, "windows": windows_check,
                "assembled": assembled_windows, "turns": turn_marks, "clone": clone_windows,
                "split": split_statistics}
    ap.add_argument("sections", nargs="*", choices=[[], *sections], default=[],
                    help=f"which tables (default all: {', '.join(sections)}; parity needs the reference venv)")
    args = ap.parse_args()
    from engine_native.speaker_encoder import SpeakerEncoder

    enc = SpeakerEncoder(rs.speaker_encoder())
    for name in args.sections or sections:
        sections[name](enc)


if __name__ == "__main__":
    main()
