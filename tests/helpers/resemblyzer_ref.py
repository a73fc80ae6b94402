"""Resemblyzer's own embeddings, the oracle for engine_native.speaker_encoder.

Runs inside the PyTorch reference venv (tests/reference/setup_venv.sh installs
Resemblyzer 0.1.4 and webrtcvad there). As a script:

    REF_PYTHON tests/helpers/resemblyzer_ref.py clips.npz out.npz

clips.npz holds `wav_<i>` (float32 mono) and `rate_<i>`; out.npz gets, per clip,
`pre_<i>` (preprocess_wav: resampled to 16 kHz, volume to -30 dBFS, long pauses cut by
the WebRTC VAD), `emb_<i>` = embed_utterance(pre_<i>), and `raw_<i>` = embed_utterance of
the 16 kHz audio with only the volume step (no VAD). From the project side, `embed_clips`
does the round trip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def embed_clips(clips: list[tuple[object, int]]) -> list[dict]:
    """[(samples, rate)] -> [{"pre", "emb", "raw"}] computed by Resemblyzer in the reference venv."""
    import numpy as np

    from tests.reference.refenv import ref_python

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "clips.npz"), os.path.join(tmp, "out.npz")
        arrays = {}
        for i, (x, rate) in enumerate(clips):
            arrays[f"wav_{i}"] = np.asarray(x, np.float32)
            arrays[f"rate_{i}"] = np.int64(rate)
        np.savez(src, **arrays)
        env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONNOUSERSITE="1")
        env.pop("PYTHONPATH", None)
        r = subprocess.run([str(ref_python()), os.path.abspath(__file__), src, dst], capture_output=True,
                           text=True, env=env, timeout=900, cwd=tmp, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"Resemblyzer reference failed:\n{r.stdout}\n{r.stderr}")
        out = np.load(dst)
        return [{k: out[f"{k}_{i}"] for k in ("pre", "emb", "raw")} for i in range(len(clips))]


def _main(src: str, dst: str) -> None:
    import numpy as np
    import librosa
    from resemblyzer import VoiceEncoder, preprocess_wav
    from resemblyzer.audio import normalize_volume
    from resemblyzer.hparams import audio_norm_target_dBFS, sampling_rate

    enc = VoiceEncoder("cpu", verbose=False)
    data = np.load(src)
    out = {}
    i = 0
    while f"wav_{i}" in data:
        x, rate = data[f"wav_{i}"], int(data[f"rate_{i}"])
        pre = preprocess_wav(x, rate).astype(np.float32)
        x16 = librosa.resample(x, orig_sr=rate, target_sr=sampling_rate) if rate != sampling_rate else x
        raw_in = normalize_volume(x16, audio_norm_target_dBFS, increase_only=True).astype(np.float32)
        out[f"pre_{i}"] = pre
        out[f"emb_{i}"] = enc.embed_utterance(pre).astype(np.float32)
        out[f"raw_{i}"] = enc.embed_utterance(raw_in).astype(np.float32)
        i += 1
    np.savez(dst, **out)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
