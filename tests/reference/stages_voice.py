"""Reference stages for voice cloning: the resamplers and `prepare_conditionals` whole."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, stage


@stage("resample")
def resample_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """librosa.resample (soxr_hq, as librosa.load and prepare_conditionals use it) and
    torchaudio.transforms.Resample (as S3Gen.embed_ref uses it) of one signal."""
    import librosa
    import torchaudio as ta

    x = np.asarray(inputs["wav"], np.float32)
    src, dst = int(inputs["src"]), int(inputs["dst"])
    soxr = librosa.resample(x, orig_sr=src, target_sr=dst)
    sinc = ta.transforms.Resample(src, dst)(torch.from_numpy(x)[None])[0].numpy()
    return {"soxr": soxr.astype(np.float32), "sinc": sinc.astype(np.float32)}


@stage("load_audio")
def load_audio_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """librosa.load(path, sr=24000): what prepare_conditionals starts from."""
    import librosa

    wav, _ = librosa.load(str(inputs["path"]), sr=24000)
    return {"wav": wav.astype(np.float32)}


@stage("prepare")
def prepare_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """ChatterboxTurboTTS.prepare_conditionals(path) for each of `paths` (one model load);
    outputs are named "{i}.{tensor}" plus "{i}.seconds" (the time prepare_conditionals took)."""
    import time

    from chatterbox.tts_turbo import ChatterboxTurboTTS

    torch.set_num_threads(int(inputs.get("threads", 2)))
    tts = ChatterboxTurboTTS.from_local(str(snapshot), "cpu")
    out = {}
    for i, path in enumerate(np.atleast_1d(inputs["paths"])):
        t0 = time.perf_counter()
        tts.prepare_conditionals(str(path))
        out[f"{i}.seconds"] = np.asarray(time.perf_counter() - t0)
        t3, gen = tts.conds.t3, tts.conds.gen
        out[f"{i}.speaker_emb"] = t3.speaker_emb.detach().reshape(-1).numpy().astype(np.float32)
        out[f"{i}.cond_prompt_speech_tokens"] = t3.cond_prompt_speech_tokens.detach().reshape(-1).numpy().astype(np.int32)
        out[f"{i}.embedding"] = gen["embedding"].detach().reshape(-1).numpy().astype(np.float32)
        out[f"{i}.prompt_token"] = gen["prompt_token"].detach().reshape(-1).numpy().astype(np.int32)
        out[f"{i}.prompt_feat"] = gen["prompt_feat"][0].detach().numpy().astype(np.float32)
    return out
