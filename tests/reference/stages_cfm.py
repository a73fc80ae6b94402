"""Reference stages for S3Gen's CFM (meanflow CausalConditionalCFM). REFERENCE-VENV ONLY.

The reference draws its initial noise inside flow_inference / CausalConditionalCFM.forward:
flow_inference draws `noise` (1, 80, 2 x speech tokens) with torch.randn, then the CFM draws
z = randn_like(mu) over prompt + speech frames and overlays z[..., prompt:] = noise. The
estimator's first input x0 is that z. `cfm_noise` reproduces it for a seed; `s3gen_mel`
runs the reference with that draw replaced by a given x0.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, load_conds, load_s3gen, stage


def _flow_args(snapshot: Path, speech_ids) -> dict:
    gen = load_conds(snapshot).gen
    token = torch.from_numpy(np.asarray(speech_ids).reshape(1, -1).astype(np.int64))
    return dict(token=token, token_len=torch.tensor([token.shape[1]]),
                prompt_token=gen["prompt_token"], prompt_token_len=gen["prompt_token_len"],
                prompt_feat=gen["prompt_feat"], prompt_feat_len=gen["prompt_feat_len"],
                embedding=gen["embedding"])


def _n_prompt(snapshot: Path) -> int:
    return int(load_conds(snapshot).gen["prompt_token"].shape[-1])


@stage("cfm_noise")
def cfm_noise_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """n_speech (int), seed -> x0 (80, 2 x (prompt + speech)): the reference's initial CFM
    noise after torch.manual_seed(seed), after the meanflow overlay (flow_inference's noise
    over the speech frames of the CFM's randn_like(mu))."""
    s = int(np.asarray(inputs["n_speech"]))
    torch.manual_seed(int(np.asarray(inputs.get("seed", 0))))
    noise = torch.randn(1, 80, s * 2)                      # S3Token2Mel.flow_inference (meanflow)
    z = torch.randn(1, 80, 2 * (_n_prompt(snapshot) + s))  # CausalConditionalCFM.forward: randn_like(mu)
    z[..., z.shape[2] - noise.shape[2]:] = noise
    return {"x0": z[0].numpy().astype(np.float32)}


def _run_flow(snapshot: Path, inputs: Inputs, estimator_hook=None):
    s3 = load_s3gen(snapshot)
    flow = s3.flow
    x0 = torch.from_numpy(np.asarray(inputs["x0"], np.float32))
    args = _flow_args(snapshot, inputs["speech_ids"])
    n_total = 2 * (args["prompt_token"].shape[-1] + args["token"].shape[-1])
    if tuple(x0.shape) != (80, n_total):
        raise ValueError(f"x0 must be (80, {n_total})")
    x0 = x0[None]
    import chatterbox.models.s3gen.flow_matching as fm
    orig_randn_like = fm.torch.randn_like
    calls = []

    def fake_randn_like(t, *a, **k):
        assert tuple(t.shape) == tuple(x0.shape)
        return x0.clone()

    est = flow.decoder.estimator
    orig_forward = est.forward

    def spy(*a, **k):
        out = orig_forward(*a, **k)
        calls.append({"x": k["x"] if "x" in k else a[0], "t": k["t"], "r": k["r"], "out": out})
        return out

    fm.torch.randn_like = fake_randn_like
    est.forward = spy
    try:
        with torch.inference_mode():
            feat, _ = flow.inference(**args, finalize=True, n_timesteps=2,
                                     noised_mels=x0[..., n_total - 2 * args["token"].shape[-1]:].clone(),
                                     meanflow=True)
    finally:
        fm.torch.randn_like = orig_randn_like
        est.forward = orig_forward
    if not torch.equal(calls[0]["x"], x0):
        raise RuntimeError("the estimator's first input differs from x0")
    return feat, calls


@stage("s3gen_mel")
def s3gen_mel_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """speech_ids, x0 (80, 2 x (prompt + speech)) -> mel (80, 2 x speech): CausalMaskedDiffWithXvec.inference
    (finalize=True, n_timesteps=2, meanflow=True) with the built-in conds.pt voice, the CFM's
    initial noise replaced by x0 (the estimator's first input equals x0 exactly). Also returns
    each estimator call's output as dxdt_<i> (80, 2 x (prompt + speech))."""
    feat, calls = _run_flow(snapshot, inputs)
    out = {"mel": feat[0].numpy().astype(np.float32)}
    for i, c in enumerate(calls):
        out[f"dxdt_{i}"] = c["out"][0].numpy().astype(np.float32)
        out[f"t_{i}"] = np.asarray(float(c["t"].reshape(-1)[0]), np.float32)
        out[f"r_{i}"] = np.asarray(float(c["r"].reshape(-1)[0]), np.float32)
    return out


@contextmanager
def prompt_causal(n_prompt_frames: int):
    """The definition of our streams' cached CFM prefix, while it lasts: in every estimator
    attention the first n_prompt_frames frames (the prompt's) attend only to each other (the
    later frames still attend to all)."""
    import chatterbox.models.s3gen.decoder as decoder

    orig_mask = decoder.add_optional_chunk_mask

    def prompt_causal_mask(xs, masks, *a, **k):
        full = orig_mask(xs, masks, *a, **k)  # [B, 1 or T, T]: padding only (static_chunk_size 0)
        T = masks.shape[-1]
        allowed = torch.ones(T, T, dtype=torch.bool)
        allowed[:n_prompt_frames, n_prompt_frames:] = False
        return full.bool() & allowed[None]

    decoder.add_optional_chunk_mask = prompt_causal_mask
    try:
        yield
    finally:
        decoder.add_optional_chunk_mask = orig_mask


@stage("s3gen_mel_prompt_causal")
def s3gen_mel_prompt_causal_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """s3gen_mel with one change, the definition of our streams' cached CFM prefix
    (prompt_causal). speech_ids, x0 as s3gen_mel -> mel (80, 2 x speech)."""
    n_prompt_frames = 2 * _n_prompt(snapshot) + int(np.asarray(inputs.get("prefix_speech_frames", 0)))
    with prompt_causal(n_prompt_frames):
        feat, _ = _run_flow(snapshot, inputs)
    return {"mel": feat[0].numpy().astype(np.float32)}


@stage("s3gen_bench")
def s3gen_bench_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Reference S3Gen timings (ms, best of `repeat`) for speech_ids after the built-in voice:
    encoder (+ proj), CFM (2 meanflow steps), HiFT inference, with torch.set_num_threads."""
    import time

    torch.set_num_threads(int(np.asarray(inputs["threads"])))
    repeat = int(np.asarray(inputs["repeat"]))
    s3 = load_s3gen(snapshot)
    flow = s3.flow
    args = _flow_args(snapshot, inputs["speech_ids"])
    token = torch.cat([args["prompt_token"], args["token"]], dim=1)
    token_len = torch.tensor([token.shape[1]])

    def best(fn):
        b, out = float("inf"), None
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = fn()
            b = min(b, time.perf_counter() - t0)
        return b * 1e3, out

    with torch.inference_mode():
        enc_ms, _ = best(lambda: flow.encoder_proj(flow.encoder(flow.input_embedding(token), token_len)[0]))
        cfm_ms, mel = best(lambda: s3.flow_inference(args["token"][0], ref_dict=load_conds(snapshot).gen,
                                                     n_cfm_timesteps=2, finalize=True))
        hift_ms, _ = best(lambda: s3.hift_inference(mel, None))
    return {"encoder_ms": np.asarray(enc_ms), "cfm_ms": np.asarray(cfm_ms - enc_ms), "hift_ms": np.asarray(hift_ms)}
