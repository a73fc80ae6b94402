"""Reference stages for the Multilingual S3Gen: the encoder, the standard CFM
(`CausalConditionalCFM` with meanflow=False: cosine t-span, Euler with classifier-free
guidance on a batch of two) and HiFT. REFERENCE-VENV ONLY (imports torch).

S3Gen loads as `ChatterboxMultilingualTTS.from_local` loads it: `S3Gen()` and a strict
`load_state_dict(torch.load("s3gen.pt"))`. The CFM's initial noise is the only random draw of
`S3Gen.flow_inference` for this model (no meanflow noise overlay): `z = randn_like(mu)` over
prompt + speech frames. `mtl_cfm_noise` captures it as the estimator first receives it;
`mtl_s3gen_mel` runs the flow with that draw replaced by a given x0.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from . import build_mtl
from .stages import Inputs, stage, weights_loaded_after
from .stages_cfm import prompt_causal
from .stages_mtl import load_conds

_S3GEN = {}


def load_s3gen(snapshot: Path):
    """S3Gen as from_local builds it, once per process."""
    key = str(Path(snapshot).resolve())
    if key not in _S3GEN:
        from chatterbox.models.s3gen import S3Gen
        _S3GEN.clear()
        with weights_loaded_after():
            s3 = S3Gen()
        s3.load_state_dict(torch.load(Path(snapshot) / build_mtl.S3GEN_FILE, map_location="cpu", weights_only=True))
        _S3GEN[key] = s3.eval()
    return _S3GEN[key]


def _speech(inputs: Inputs) -> torch.Tensor:
    return torch.from_numpy(np.asarray(inputs["speech_ids"]).reshape(1, -1).astype(np.int64))


class _Captured(Exception):
    pass


@stage("mtl_s3gen_encode")
def mtl_s3gen_encode_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """speech_ids -> mu [80, 2 x (prompt + speech)]: the flow's encoder and encoder_proj on the
    built-in voice's prompt tokens then speech_ids (finalize=True)."""
    flow = load_s3gen(snapshot).flow
    prompt = load_conds(snapshot).gen["prompt_token"].reshape(1, -1).long()
    token = torch.cat([prompt, _speech(inputs)], dim=1)
    with torch.inference_mode():
        h, _ = flow.encoder(flow.input_embedding(token), torch.tensor([token.shape[1]]))
        mu = flow.encoder_proj(h)
    return {"mu": mu[0].T.contiguous().numpy()}


@stage("mtl_cfm_noise")
def mtl_cfm_noise_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """n_speech, seed -> x0 [80, 2 x (prompt + speech)]: after torch.manual_seed(seed),
    `S3Gen.flow_inference` (the built-in voice, n_speech zero tokens) up to the estimator's
    first call; x0 is that call's x (row 0; both rows hold it). Also randn: the plain draw
    torch.randn(1, 80, frames) after the same seed, for comparison."""
    s3 = load_s3gen(snapshot)
    est = s3.flow.decoder.estimator
    orig, seen = est.forward, {}

    def spy(*a, **k):
        seen["x"] = (k["x"] if "x" in k else a[0]).clone()
        raise _Captured

    est.forward = spy
    torch.manual_seed(int(np.asarray(inputs.get("seed", 0))))
    try:
        s3.flow_inference(torch.zeros(1, int(np.asarray(inputs["n_speech"])), dtype=torch.long),
                          ref_dict=load_conds(snapshot).gen, finalize=True)
    except _Captured:
        pass
    finally:
        est.forward = orig
    x = seen["x"]
    if not torch.equal(x[0], x[1]):
        raise RuntimeError("the guidance rows' x differ")
    torch.manual_seed(int(np.asarray(inputs.get("seed", 0))))
    plain = torch.randn(1, 80, x.shape[-1])
    return {"x0": x[0].numpy().astype(np.float32), "randn": plain[0].numpy()}


@stage("mtl_s3gen_mel")
def mtl_s3gen_mel_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """speech_ids, x0 [80, 2 x (prompt + speech)] or seed [, n_steps] [, prompt_causal] -> mel
    [80, 2 x speech]: `S3Gen.flow_inference(speech, ref_dict=built-in, n_cfm_timesteps=n_steps,
    finalize=True)` with the CFM's randn_like(mu) replaced by x0 (or drawn after
    torch.manual_seed(seed)); prompt_causal=1: under our streams' cached-prefix mask
    (stages_cfm.prompt_causal: the prompt's frames attend only to themselves).
    Per estimator call i (one per Euler step, on the batch of two): t_<i>, x_<i> (its
    input; x_0 is the initial noise), v_cond_<i> and v_uncond_<i> (the rows of its output)."""
    s3 = load_s3gen(snapshot)
    est = s3.flow.decoder.estimator
    x0 = torch.from_numpy(np.asarray(inputs["x0"], np.float32))[None] if "x0" in inputs else None
    n_steps = int(np.asarray(inputs.get("n_steps", 0))) or None
    calls = []
    orig_forward, orig_randn_like = est.forward, torch.randn_like

    def fake_randn_like(t, *a, **k):
        if tuple(t.shape) != tuple(x0.shape):
            raise ValueError(f"x0 must be {tuple(t.shape[1:])}, got {tuple(x0.shape[1:])}")
        return x0.clone()

    def spy(*a, **k):
        out = orig_forward(*a, **k)
        calls.append({"x": (k["x"] if "x" in k else a[0]).clone(), "t": k["t"].clone(), "out": out.clone()})
        return out

    if x0 is None:      # the reference's own draw after manual_seed(seed)
        torch.manual_seed(int(np.asarray(inputs["seed"])))
    else:
        torch.randn_like = fake_randn_like
    est.forward = spy
    n_prompt_frames = 2 * int(load_conds(snapshot).gen["prompt_token"].shape[-1])
    masked = prompt_causal(n_prompt_frames) if int(np.asarray(inputs.get("prompt_causal", 0))) else nullcontext()
    try:
        with torch.inference_mode(), masked:
            mel = s3.flow_inference(_speech(inputs), ref_dict=load_conds(snapshot).gen, n_cfm_timesteps=n_steps,
                                    finalize=True)
    finally:
        torch.randn_like, est.forward = orig_randn_like, orig_forward
    if x0 is not None and not torch.equal(calls[0]["x"][0], x0[0]):
        raise RuntimeError("the estimator's first input differs from x0")
    out = {"mel": mel[0].numpy().astype(np.float32)}
    for i, c in enumerate(calls):
        out[f"t_{i}"] = c["t"][0].numpy().astype(np.float32)
        out[f"x_{i}"] = c["x"][0].numpy().astype(np.float32)
        out[f"v_cond_{i}"] = c["out"][0].numpy().astype(np.float32)
        out[f"v_uncond_{i}"] = c["out"][1].numpy().astype(np.float32)
    return out


@stage("mtl_cfm_t_span")
def mtl_cfm_t_span_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """n_steps [k] -> t_span_<n> [n + 1] for each n: CausalConditionalCFM.forward's schedule
    (linspace(0, 1, n + 1) in float32, then 1 - cos(t * 0.5 * pi), t_scheduler cosine)."""
    out = {}
    for n in np.asarray(inputs["n_steps"]).reshape(-1):
        t = torch.linspace(0, 1, int(n) + 1, dtype=torch.float32)
        out[f"t_span_{int(n)}"] = (1 - torch.cos(t * 0.5 * torch.pi)).numpy()
    return out


@stage("mtl_hift")
def mtl_hift_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """mel [80, T] [, seed] -> f0 [T] (f0_predictor), source (1, 1, N) (f0_upsamp -> m_source
    after torch.manual_seed(seed)) and wav [N] = decode(x=mel, s=source): the Multilingual
    S3Gen's HiFTGenerator."""
    hift = load_s3gen(snapshot).mel2wav
    mel = torch.from_numpy(np.asarray(inputs["mel"], np.float32))[None]
    torch.manual_seed(int(np.asarray(inputs.get("seed", 0))))
    with torch.inference_mode():
        f0 = hift.f0_predictor(mel)
        s, _, _ = hift.m_source(hift.f0_upsamp(f0[:, None]).transpose(1, 2))
        s = s.transpose(1, 2)
        wav = hift.decode(x=mel, s=s)
    return {"f0": f0[0].numpy().astype(np.float32), "source": s.numpy().astype(np.float32),
            "wav": wav.reshape(-1).numpy().astype(np.float32)}


@stage("mtl_cfm_bench")
def mtl_cfm_bench_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """speech_ids, threads, repeat [, n_steps] -> encoder_ms, cfm_ms and cfm_cpu_ms (best of
    `repeat`, torch.set_num_threads(threads); wall, and process CPU time): S3Gen.flow_inference
    after the built-in voice, less its encoder."""
    import time

    torch.set_num_threads(int(np.asarray(inputs["threads"])))
    s3, gen = load_s3gen(snapshot), load_conds(snapshot).gen
    flow, speech = s3.flow, _speech(inputs)
    token = torch.cat([gen["prompt_token"].reshape(1, -1).long(), speech], dim=1)
    n_steps = int(np.asarray(inputs.get("n_steps", 0))) or None

    def best(fn):       # wall and process CPU time (all threads), ms
        b = [float("inf")] * 2
        for _ in range(int(np.asarray(inputs["repeat"]))):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            b = [min(b[0], time.perf_counter() - t0), min(b[1], time.process_time() - c0)]
        return [v * 1e3 for v in b]

    with torch.inference_mode():
        enc = best(lambda: flow.encoder_proj(flow.encoder(flow.input_embedding(token),
                                                          torch.tensor([token.shape[1]]))[0]))
        flow_ = best(lambda: s3.flow_inference(speech, ref_dict=gen, n_cfm_timesteps=n_steps, finalize=True))
    return {"encoder_ms": np.asarray(enc[0]), "cfm_ms": np.asarray(flow_[0] - enc[0]),
            "cfm_cpu_ms": np.asarray(flow_[1] - enc[1])}


@stage("mtl_cfm_many")
def mtl_cfm_many_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Several of this module's stages in one process (S3Gen loads once): `stages` names them
    in order; stage i reads the inputs "i.KEY" and writes the outputs "i.KEY"."""
    from .stages import STAGES
    out: Inputs = {}
    for i, name in enumerate(str(s) for s in np.asarray(inputs["stages"]).reshape(-1)):
        if name not in ("mtl_s3gen_encode", "mtl_cfm_noise", "mtl_s3gen_mel", "mtl_cfm_t_span", "mtl_hift"):
            raise ValueError(f"mtl_cfm_many runs this module's stages only, not {name!r}")
        prefix = f"{i}."
        sub = {k[len(prefix):]: v for k, v in inputs.items() if k.startswith(prefix)}
        out.update({prefix + k: v for k, v in STAGES[name](snapshot, sub).items()})
    return out
