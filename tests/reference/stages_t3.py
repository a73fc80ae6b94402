"""Reference stages for T3. REFERENCE-VENV ONLY (imports torch).

Conditioning is the snapshot's built-in voice (conds.pt) unless `speaker_emb` and
`prompt_tokens` are given.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, load_conds, load_t3, stage


def _cond(snapshot: Path, inputs: Inputs):
    cond = load_conds(snapshot).t3
    if "speaker_emb" in inputs:
        cond.speaker_emb = torch.from_numpy(np.asarray(inputs["speaker_emb"], np.float32)).reshape(1, -1)
        cond.cond_prompt_speech_tokens = torch.from_numpy(np.asarray(inputs["prompt_tokens"], np.int64)).reshape(1, -1)
    cond.cond_prompt_speech_emb = None
    return cond


@stage("t3_logits")
def t3_logits_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """text_ids, speech_ids -> logits [len(speech_ids), speech_vocab]: T3.forward's path
    (prepare_input_embeds -> tfmr -> speech_head at the speech positions)."""
    t3 = load_t3(snapshot)
    text = torch.from_numpy(np.asarray(inputs["text_ids"], np.int64)).reshape(1, -1)
    speech = torch.from_numpy(np.asarray(inputs["speech_ids"], np.int64)).reshape(1, -1)
    with torch.inference_mode():
        embeds, _ = t3.prepare_input_embeds(t3_cond=_cond(snapshot, inputs), text_tokens=text, speech_tokens=speech)
        hidden = t3.tfmr(inputs_embeds=embeds)[0]
        logits = t3.speech_head(hidden[:, -speech.shape[1]:])
    return {"logits": logits[0].numpy().astype(np.float32)}


@stage("t3_generate")
def t3_generate_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """text_ids, n -> the first n speech tokens of inference_turbo with top_k=1 (greedy),
    the stop token included if reached (inference_turbo strips it; we put it back)."""
    t3 = load_t3(snapshot)
    n = int(inputs["n"])
    text = torch.from_numpy(np.asarray(inputs["text_ids"], np.int64)).reshape(1, -1)
    with torch.inference_mode():
        toks = t3.inference_turbo(_cond(snapshot, inputs), text, top_k=1, max_gen_len=n - 1)[0].tolist()
    if len(toks) < n:
        toks.append(t3.hp.stop_speech_token)
    return {"tokens": np.asarray(toks[:n], np.int32)}


@stage("sampler")
def sampler_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """logits [N, V], histories (flat + offsets), params [N, 5] = (temperature, top_k, top_p,
    repetition_penalty, min_p) -> probs [N, V]: softmax after inference_turbo's processors
    (MinP, which Turbo does not use, inserted after TopP when min_p > 0)."""
    from transformers.generation.logits_process import (
        LogitsProcessorList, MinPLogitsWarper, RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
        TopKLogitsWarper, TopPLogitsWarper)

    logits = torch.from_numpy(np.asarray(inputs["logits"], np.float32))
    hist, offs = np.asarray(inputs["history"], np.int64), np.asarray(inputs["offsets"], np.int64)
    probs = []
    for i, (temperature, top_k, top_p, rep, min_p) in enumerate(np.asarray(inputs["params"], np.float64)):
        procs = LogitsProcessorList()
        if temperature > 0 and temperature != 1.0:
            procs.append(TemperatureLogitsWarper(float(temperature)))
        if top_k > 0:
            procs.append(TopKLogitsWarper(int(top_k)))
        if top_p < 1.0:
            procs.append(TopPLogitsWarper(float(top_p)))
        if min_p > 0:
            procs.append(MinPLogitsWarper(float(min_p)))
        if rep != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(float(rep)))
        ids = torch.from_numpy(hist[offs[i]:offs[i + 1]]).reshape(1, -1)
        out = procs(ids, logits[i:i + 1].clone())
        probs.append(torch.softmax(out, dim=-1)[0].numpy())
    return {"probs": np.stack(probs).astype(np.float32)}


@stage("t3_bench")
def t3_bench_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Reference decoding speed: inference_turbo greedy, ms/token over `tokens` steps and
    the prompt pass, best of 3, with torch.set_num_threads(threads)."""
    import time

    torch.set_num_threads(int(inputs["threads"]))
    t3 = load_t3(snapshot)
    text = torch.from_numpy(np.asarray(inputs["text_ids"], np.int64)).reshape(1, -1)
    n = int(inputs["tokens"])
    best_step, best_prompt = float("inf"), float("inf")
    with torch.inference_mode():
        t3.inference_turbo(_cond(snapshot, inputs), text, top_k=1, max_gen_len=1)  # warm-up
        for _ in range(3):
            t0 = time.perf_counter()
            t3.inference_turbo(_cond(snapshot, inputs), text, top_k=1, max_gen_len=0)
            t1 = time.perf_counter()
            done = t3.inference_turbo(_cond(snapshot, inputs), text, top_k=1, max_gen_len=n).shape[1] - 1
            t2 = time.perf_counter()
            best_prompt = min(best_prompt, t1 - t0)
            best_step = min(best_step, ((t2 - t1) - (t1 - t0)) / max(done, 1))
    return {"ms_per_token": np.asarray(best_step * 1e3), "prompt_ms": np.asarray(best_prompt * 1e3)}
