"""Reference stage for re-voicing: `ChatterboxVC.generate`. REFERENCE-VENV ONLY (imports torch).

`ChatterboxVC` takes any `S3Gen` (from_local builds `S3Gen()` and loads any state with
strict=False): here Turbo's meanflow S3Gen as stages.load_s3gen loads it, or the Multilingual
S3Gen (standard CFM with guidance) as stages_mtl_cfm.load_s3gen loads it. The target voice is
its ref_dict, given as arrays (a voice file's S3Gen tensors). Its random draws are replaced by
given ones so the two sides can be compared sample by sample: the CFM's initial noise (x0, as
the estimator first receives it: meanflow's flow_inference noise over the speech frames of the
CFM's randn_like(mu), or the whole randn_like(mu) for the standard CFM) and HiFT's excitation
(`source`, what m_source returns). The Perth watermark, generate's last step, is left out.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, load_s3gen, stage


def _s3gen(snapshot: Path, variant: str):
    if variant == "mtl":
        from .stages_mtl_cfm import load_s3gen as load_mtl_s3gen
        return load_mtl_s3gen(snapshot)
    return load_s3gen(snapshot)


@stage("vc_generate")
def vc_generate_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """wav (mono f32), sr, variant ("turbo" or "mtl"), the target voice (prompt_token [P],
    prompt_feat [F, 80], embedding [192]), x0 [80, 2 x (P + S)], source [480 x 2 S] ->
    tokens (the S3Tokenizer's, int32 [S]), proj (its FSQ input, project_down's output [S, 8],
    for a source of one 30 s window), mel [80, 2 S] (what HiFT gets), wav (generate's output
    before the watermark). The source WAV is written as float32 and read back by generate's
    own librosa.load(audio, sr=16000). With force_tokens [S]: S3Gen goes on from those tokens
    instead of the tokenizer's (which `tokens` still returns): a test whose tokens differ only
    where the FSQ input sits on a rounding boundary compares the rest of the path on the same
    tokens."""
    import soundfile as sf

    import chatterbox.models.s3gen.s3gen as s3gen_module
    from chatterbox.vc import ChatterboxVC

    variant = str(np.asarray(inputs["variant"]))
    s3 = _s3gen(snapshot, variant)
    P = int(np.asarray(inputs["prompt_token"]).size)
    ref_dict = {
        "prompt_token": torch.from_numpy(np.asarray(inputs["prompt_token"], np.int64).reshape(1, -1)),
        "prompt_token_len": torch.tensor([P]),
        "prompt_feat": torch.from_numpy(np.asarray(inputs["prompt_feat"], np.float32)[None]),
        "prompt_feat_len": None,
        "embedding": torch.from_numpy(np.asarray(inputs["embedding"], np.float32).reshape(1, -1)),
    }
    vc = ChatterboxVC(s3, "cpu", ref_dict=ref_dict)
    vc.watermarker.apply_watermark = lambda wav, sample_rate: wav

    x0 = torch.from_numpy(np.asarray(inputs["x0"], np.float32))[None]      # (1, 80, T)
    source = torch.from_numpy(np.asarray(inputs["source"], np.float32).reshape(1, -1, 1))
    seen = {"randn": 0, "randn_like": 0}
    orig_randn, orig_randn_like = torch.randn, torch.randn_like

    def randn(*size, **k):  # S3Token2Wav.flow_inference's meanflow noise: x0's speech frames
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        if len(shape) == 3 and shape[:2] == (1, 80):
            seen["randn"] += 1
            return x0[..., x0.shape[2] - shape[2]:].clone()
        return orig_randn(*size, **k)

    def randn_like(t, *a, **k):  # the CFM's z over prompt + speech frames
        if tuple(t.shape) == tuple(x0.shape):
            seen["randn_like"] += 1
            return x0.clone()
        return orig_randn_like(t, *a, **k)

    captured = {}
    orig_tok, orig_hift = s3.tokenizer.forward, s3.hift_inference

    def tokenizer(*a, **k):
        out = orig_tok(*a, **k)
        captured["tokens"] = out[0][0].numpy().astype(np.int32)
        if "force_tokens" in inputs:  # S3Gen goes on from the given tokens (see the docstring)
            forced = torch.from_numpy(np.asarray(inputs["force_tokens"], np.int64).reshape(1, -1))
            return forced, torch.tensor([forced.shape[1]])
        return out

    def hift_inference(speech_feat, cache_source=None):
        captured["mel"] = speech_feat[0].numpy().astype(np.float32).copy()
        return orig_hift(speech_feat, cache_source)

    hook = s3.tokenizer.quantizer._codebook.project_down.register_forward_hook(
        lambda _m, _i, out: captured.setdefault("proj", []).append(out.detach().float().numpy().copy()))
    m_source = s3.mel2wav.m_source
    m_source.forward = lambda s: (source.clone(), None, None)
    s3.tokenizer.forward = tokenizer
    s3.hift_inference = hift_inference
    s3gen_module.torch.randn = randn
    torch.randn_like = randn_like
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "source.wav"
            sf.write(str(path), np.asarray(inputs["wav"], np.float32), int(np.asarray(inputs["sr"])), subtype="FLOAT")
            wav = vc.generate(str(path))
    finally:
        torch.randn, torch.randn_like = orig_randn, orig_randn_like
        del m_source.forward, s3.tokenizer.forward, s3.hift_inference
        hook.remove()
    if seen["randn_like"] != 1 or seen["randn"] != (0 if variant == "mtl" else 1):
        raise RuntimeError(f"the reference's noise draws were not the expected ones: {seen}")
    out = {"tokens": captured["tokens"], "mel": captured["mel"], "wav": wav[0].numpy().astype(np.float32)}
    proj = captured.get("proj", [])
    if len(proj) == 1 and proj[0].shape[0] == out["tokens"].size:  # one 30 s window: its rows are the tokens
        out["proj"] = proj[0].astype(np.float32)
    return out


@stage("vc_bench")
def vc_bench_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """wav, sr, variant, threads, repeat -> ms (the best of `repeat` calls of
    `ChatterboxVC.generate` on the source written as a WAV, the snapshot's built-in voice
    (conds.pt's gen) as the target, the watermark left out as in vc_generate), that call's
    stages (tokenize_ms: s3gen.tokenizer; encoder_ms and cfm_ms: the flow's encoder and
    decoder; hift_ms: hift_inference) and the process's peak RSS in bytes.
    torch.set_num_threads(threads)."""
    import resource
    import time

    import soundfile as sf

    from chatterbox.vc import ChatterboxVC

    torch.set_num_threads(int(np.asarray(inputs["threads"])))
    variant = str(np.asarray(inputs["variant"]))
    s3 = _s3gen(snapshot, variant)
    if variant == "mtl":
        from .stages_mtl import load_conds
    else:
        from .stages import load_conds
    vc = ChatterboxVC(s3, "cpu", ref_dict=load_conds(snapshot).gen)
    vc.watermarker.apply_watermark = lambda wav, sample_rate: wav
    stage_ms: dict[str, float] = {}

    def timed(obj, name: str, stage: str) -> None:  # an instance attribute over the method
        method = getattr(obj, name)

        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                stage_ms[stage] = stage_ms.get(stage, 0.0) + (time.perf_counter() - t0) * 1e3
        setattr(obj, name, run)

    timed(s3.tokenizer, "forward", "tokenize")
    timed(s3.flow.encoder, "forward", "encoder")
    timed(s3.flow.decoder, "forward", "cfm")
    timed(s3, "hift_inference", "hift")
    best, best_stages = float("inf"), {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "source.wav"
        sf.write(str(path), np.asarray(inputs["wav"], np.float32), int(np.asarray(inputs["sr"])), subtype="FLOAT")
        for _ in range(int(np.asarray(inputs["repeat"]))):
            stage_ms.clear()
            t0 = time.perf_counter()
            vc.generate(str(path))
            ms = (time.perf_counter() - t0) * 1e3
            if ms < best:
                best, best_stages = ms, dict(stage_ms)
    return {"ms": np.asarray(best), "peak_rss": np.asarray(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
            **{f"{k}_ms": np.asarray(v) for k, v in best_stages.items()}}
