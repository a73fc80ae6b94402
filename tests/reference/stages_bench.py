"""The reference's side of `chatterbox-studio bench`: the same workload, timed in PyTorch."""
from __future__ import annotations

import resource
import time
from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, load_conds, stage


@stage("bench")
def bench_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Load (from_local), T3 sampling of `tokens` tokens for `text_ids` with the defaults,
    then S3Gen (encoder + CFM + HiFT) on the given speech tokens; ms each, peak RSS. Turbo:
    inference_turbo and 2 meanflow steps; Multilingual: T3.inference with its analyzer and
    generate()'s guidance 0.5, and the standard CFM's 10 guided steps. `device` (default "cpu"):
    the torch device it runs on (e.g. "cuda"); timings then synchronise the device."""
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    torch.set_num_threads(int(inputs["threads"]))
    torch.manual_seed(0)
    device = str(inputs["device"]) if "device" in inputs else "cpu"
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    mtl = (Path(snapshot) / "t3_mtl23ls_v2.safetensors").exists()
    t0 = time.perf_counter()
    if mtl:  # ChatterboxMultilingualTTS.generate's settings: guidance 0.5, exaggeration 0.5, 10 CFM steps
        from chatterbox.mtl_tts import ChatterboxMultilingualTTS

        from .stages_mtl import prepare
        prepare(snapshot)
        tts = ChatterboxMultilingualTTS.from_local(str(snapshot), device)
        conds = tts.conds
    else:
        from chatterbox.tts_turbo import ChatterboxTurboTTS

        tts = ChatterboxTurboTTS.from_local(str(snapshot), device)
        conds = load_conds(snapshot).to(device)
    sync()
    load_ms = (time.perf_counter() - t0) * 1e3
    text = torch.from_numpy(np.asarray(inputs["text_ids"], np.int64)).reshape(1, -1).to(device)
    n = int(inputs["tokens"])
    cond = T3Cond(speaker_emb=conds.t3.speaker_emb, cond_prompt_speech_tokens=conds.t3.cond_prompt_speech_tokens,
                  emotion_adv=(0.5 if mtl else 0.0) * torch.ones(1, 1, 1, device=device))
    with torch.inference_mode():
        if device != "cpu":  # a GPU's first calls load kernels and libraries: warm up once
            if mtl:
                tts.t3.inference(t3_cond=cond, text_tokens=torch.cat([text, text]), max_new_tokens=10,
                                 temperature=0.8, cfg_weight=0.5, repetition_penalty=2.0, min_p=0.05, top_p=1.0)
            else:
                tts.t3.inference_turbo(cond, text, temperature=0.8, top_k=1000, top_p=0.95, repetition_penalty=1.2,
                                       max_gen_len=10)
            warm = torch.from_numpy(np.asarray(inputs["speech_ids"], np.int64)[:25]).to(device)
            tts.s3gen.hift_inference(tts.s3gen.flow_inference(warm, ref_dict=conds.gen, n_cfm_timesteps=10 if mtl else 2,
                                                              finalize=True), None)
            sync()
        t0 = time.perf_counter()
        if mtl:
            out = tts.t3.inference(t3_cond=cond, text_tokens=torch.cat([text, text]), max_new_tokens=n,
                                   temperature=0.8, cfg_weight=0.5, repetition_penalty=2.0, min_p=0.05, top_p=1.0)
        else:
            out = tts.t3.inference_turbo(cond, text, temperature=0.8, top_k=1000, top_p=0.95,
                                         repetition_penalty=1.2, max_gen_len=n)
        sync()
        t3_ms = (time.perf_counter() - t0) * 1e3
        speech = torch.from_numpy(np.asarray(inputs["speech_ids"], np.int64)).to(device)
        t0 = time.perf_counter()
        mel = tts.s3gen.flow_inference(speech, ref_dict=conds.gen, n_cfm_timesteps=10 if mtl else 2, finalize=True)
        sync()
        flow_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        wav, _ = tts.s3gen.hift_inference(mel, None)
        sync()
        hift_ms = (time.perf_counter() - t0) * 1e3
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    clone = {}
    if "clone_wav" in inputs:  # prepare_conditionals on the same 10 s recording (24 kHz)
        import tempfile

        import soundfile as sf

        with tempfile.TemporaryDirectory() as td:
            path = Path(td) / "clone.wav"
            sf.write(str(path), np.asarray(inputs["clone_wav"], np.float32), 24000, subtype="FLOAT")
            t0 = time.perf_counter()
            tts.prepare_conditionals(str(path))
            sync()
            clone["clone_ms"] = np.asarray((time.perf_counter() - t0) * 1e3)
        clone["peak_rss_clone_mb"] = np.asarray(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    return {**clone,"load_ms": np.asarray(load_ms), "t3_ms": np.asarray(t3_ms), "t3_tokens": np.asarray(out.shape[1]),
            "s3gen_ms": np.asarray(flow_ms), "hift_ms": np.asarray(hift_ms),
            "audio_s": np.asarray(wav.shape[-1] / 24000.0),
            "peak_rss_mb": np.asarray(peak_rss_mb)}


@stage("cfm_flops")
def cfm_flops_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """frames -> flops, attention_flops: one pass of the CFM's estimator (ConditionalDecoder.forward,
    batch 1) over that many frames, as torch's FlopCounterMode counts it (its convolutions and
    linear layers: it does not see inside the attention's kernel), and the attention's two
    products counted at each Attention module's call (2 x frames^2 x its inner dimension
    multiply-adds). The bench's bound counts the same work from the GGUF's shapes
    (engine_native/bounds.py)."""
    from torch.utils.flop_counter import FlopCounterMode

    from .stages import load_s3gen

    frames = int(np.asarray(inputs["frames"]))
    estimator = load_s3gen(snapshot).flow.decoder.estimator
    attention = []

    def count(module, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        attention.append(2 * 2 * h.shape[1] * h.shape[1] * module.to_q.out_features)

    hooks = [m.register_forward_pre_hook(count, with_kwargs=True)
             for m in estimator.modules() if type(m).__name__ == "Attention"]
    g = torch.Generator().manual_seed(0)
    x, mu, cond = (torch.randn(1, 80, frames, generator=g) for _ in range(3))
    mask = torch.ones(1, 1, frames)
    spks = torch.randn(1, 80, generator=g)
    t = torch.tensor([0.5])
    kwargs = {"r": torch.tensor([0.25])} if estimator.meanflow else {}
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        estimator(x, mask, mu, t, spks=spks, cond=cond, **kwargs)
    for h in hooks:
        h.remove()
    return {"flops": np.asarray(counter.get_total_flops(), np.int64),
            "attention_flops": np.asarray(sum(attention), np.int64), "attention_calls": np.asarray(len(attention))}
