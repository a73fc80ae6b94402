"""Reference stages for the Multilingual (Llama) T3. REFERENCE-VENV ONLY (imports torch).

Everything runs through `T3.inference` as `ChatterboxMultilingualTTS.generate` calls it
(text ids duplicated to a batch of two, cfg_weight, the AlignmentStreamAnalyzer), with
`torch.multinomial` replaced for the duration of a call:
- replay: it returns the given tokens one per step (teacher forcing through the real
  decode loop: doubled start token, learned speech positions i + 1, the KV cache);
- greedy: it returns the first maximum of the probabilities it is given.
Spies on `T3HuggingfaceBackend.forward` and `AlignmentStreamAnalyzer.step` record the
cond/uncond logits of every forward, the aligned heads' attention over the text, and the
analyzer's decisions. The model is loaded once per process (the analyzer's hooks pile up on
every `inference` call; harmless, as the reference itself does).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, stage
from .stages_mtl import load_conds, load_t3

_T3 = {}


def _t3(snapshot: Path):
    key = str(Path(snapshot).resolve())
    if key not in _T3:
        _T3.clear()
        _T3[key] = load_t3(snapshot)
    return _T3[key]


def _cond(snapshot: Path, inputs: Inputs, exaggeration: float):
    """The T3Cond `generate` would use: the snapshot's voice (or the given one) with
    `exaggeration`, its prompt embedding recomputed."""
    from chatterbox.models.t3.modules.cond_enc import T3Cond
    base = load_conds(snapshot).t3
    spk, toks = base.speaker_emb, base.cond_prompt_speech_tokens
    if "speaker_emb" in inputs:
        spk = torch.from_numpy(np.asarray(inputs["speaker_emb"], np.float32)).reshape(1, -1)
        toks = torch.from_numpy(np.asarray(inputs["prompt_tokens"], np.int64)).reshape(1, -1)
    return T3Cond(speaker_emb=spk, cond_prompt_speech_tokens=toks, emotion_adv=exaggeration * torch.ones(1, 1, 1))


def _text(inputs: Inputs) -> torch.Tensor:
    """text_ids as T3 sees them (start/stop text tokens included), duplicated for CFG."""
    t = torch.from_numpy(np.asarray(inputs["text_ids"], np.int64)).reshape(1, -1)
    return torch.cat([t, t], dim=0)


@contextmanager
def _spies(pick):
    """Patch multinomial with `pick(step, probs)` and record every forward / analyzer step."""
    from chatterbox.models.t3.inference.alignment_stream_analyzer import AlignmentStreamAnalyzer
    from chatterbox.models.t3.inference.t3_hf_backend import T3HuggingfaceBackend
    rec = {"logits": [], "attn": [], "steps": []}
    fwd, step, multinomial = T3HuggingfaceBackend.forward, AlignmentStreamAnalyzer.step, torch.multinomial

    def spy_forward(self, *args, **kwargs):
        out = fwd(self, *args, **kwargs)
        rec["logits"].append(out.logits[:, -1, :].float().clone())
        asa = self.alignment_stream_analyzer
        if asa is not None:
            i, j = asa.text_tokens_slice
            heads = torch.stack(asa.last_aligned_attns)                  # (3, rows, keys)
            rows = heads[:, j:, i:j] if heads.shape[1] > 1 else heads[:, :, i:j]
            rec["attn"].append(rows.clone())
        return out

    def spy_step(self, logits, next_token=None):
        out = step(self, logits, next_token=next_token)
        eos = self.eos_idx
        rec["steps"].append({
            "forced": bool(out[0, eos] == 2 ** 15),
            "suppressed": bool(out[0, eos] == -(2 ** 15)),
            "text_position": int(self.text_position),
            "complete": bool(self.complete),
        })
        return out

    def spy_multinomial(probs, num_samples=1, *a, **k):
        return pick(len(rec["steps"]) - 1, probs)

    T3HuggingfaceBackend.forward, AlignmentStreamAnalyzer.step, torch.multinomial = spy_forward, spy_step, spy_multinomial
    try:
        yield rec
    finally:
        T3HuggingfaceBackend.forward, AlignmentStreamAnalyzer.step, torch.multinomial = fwd, step, multinomial


def _run(snapshot: Path, inputs: Inputs, pick, n: int) -> dict:
    t3 = _t3(snapshot)
    exaggeration = float(np.asarray(inputs.get("exaggeration", 0.5)))
    cfg_weight = float(np.asarray(inputs.get("cfg_weight", 0.5)))
    p = {k: float(np.asarray(inputs[k])) for k in ("temperature", "repetition_penalty", "min_p", "top_p")
         if k in inputs}
    with _spies(pick) as rec, torch.inference_mode():
        toks = t3.inference(t3_cond=_cond(snapshot, inputs, exaggeration), text_tokens=_text(inputs),
                            max_new_tokens=n, cfg_weight=cfg_weight,
                            temperature=p.get("temperature", 0.8), repetition_penalty=p.get("repetition_penalty", 2.0),
                            min_p=p.get("min_p", 0.05), top_p=p.get("top_p", 1.0))
    logits = torch.stack(rec["logits"], dim=1)                           # (2, forwards, V)
    steps = rec["steps"]
    return {
        "tokens": toks[0].numpy().astype(np.int32),
        "logits": logits.numpy().astype(np.float32),
        "attn": torch.cat(rec["attn"], dim=1).numpy().astype(np.float32),  # (3, speech rows, S)
        "forced": np.asarray([s["forced"] for s in steps]),
        "suppressed": np.asarray([s["suppressed"] for s in steps]),
        "text_position": np.asarray([s["text_position"] for s in steps], np.int64),
        "complete": np.asarray([s["complete"] for s in steps]),
    }


@stage("mtl_t3_embeds")
def mtl_t3_embeds_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """text_ids [, speaker_emb, prompt_tokens] [, exaggeration, cfg_weight] -> cond [len_cond, E]
    (prepare_conditioning), inputs [2, len_cond + S + 2, E] (inference's prompt: prepare_input_embeds
    with the start token, then the second bos_embed), inv_freq (the Llama rotary frequencies)."""
    t3 = _t3(snapshot)
    exaggeration = float(np.asarray(inputs.get("exaggeration", 0.5)))
    cfg_weight = float(np.asarray(inputs.get("cfg_weight", 0.5)))
    text = _text(inputs)
    with torch.inference_mode():
        cond = t3.prepare_conditioning(_cond(snapshot, inputs, exaggeration))
        start = t3.hp.start_speech_token * torch.ones_like(text[:, :1])
        embeds, _ = t3.prepare_input_embeds(t3_cond=_cond(snapshot, inputs, exaggeration), text_tokens=text,
                                            speech_tokens=start, cfg_weight=cfg_weight)
        bos = t3.speech_emb(start[:1]) + t3.speech_pos_emb.get_fixed_embedding(0)
        embeds = torch.cat([embeds, torch.cat([bos, bos])], dim=1)
    return {"cond": cond[0].numpy().astype(np.float32), "inputs": embeds.numpy().astype(np.float32),
            "inv_freq": t3.tfmr.rotary_emb.inv_freq.numpy().astype(np.float32)}


@stage("mtl_t3_replay")
def mtl_t3_replay_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """text_ids, forced (speech tokens, one per step) [, voice, exaggeration, cfg_weight] ->
    logits [2, len(forced) + 1, V] (cond/uncond rows of every forward: the prompt's, then after
    each forced token), attn [3, 2 + len(forced), S] (the aligned heads over the text, rows of
    the doubled start token then one per forced token), and the analyzer's per-step decisions."""
    forced = [int(t) for t in np.asarray(inputs["forced"]).reshape(-1)]

    def pick(step, probs):
        return torch.tensor([[forced[step]]], dtype=torch.long)

    return _run(snapshot, inputs, pick, len(forced))


@stage("mtl_t3_generate")
def mtl_t3_generate_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """text_ids, n [, voice, exaggeration, cfg_weight, sampling] -> tokens: `T3.inference`
    with multinomial -> the first maximum of its probabilities (greedy), at most n tokens,
    the stop token kept; plus the logits / attention / decisions of `mtl_t3_replay`."""
    def pick(step, probs):
        return torch.argmax(probs, dim=-1, keepdim=True)

    return _run(snapshot, inputs, pick, int(np.asarray(inputs["n"])))


@stage("mtl_t3_many")
def mtl_t3_many_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Several of this module's stages in one process (the model loads once): `stages`
    names them in order; stage i reads the inputs "i.KEY" and writes the outputs "i.KEY"."""
    from .stages import STAGES
    out: Inputs = {}
    for i, name in enumerate(str(s) for s in np.asarray(inputs["stages"]).reshape(-1)):
        if not name.startswith("mtl_t3_") or name == "mtl_t3_many":
            raise ValueError(f"mtl_t3_many runs this module's stages only, not {name!r}")
        prefix = f"{i}."
        sub = {k[len(prefix):]: v for k, v in inputs.items() if k.startswith(prefix)}
        out.update({prefix + k: v for k, v in STAGES[name](snapshot, sub).items()})
    return out


@stage("mtl_t3_alignment_steps")
def mtl_t3_alignment_steps_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """n_text, heads [steps, n_heads, rows, n_text] (only step 0 may use rows > 1; unused rows
    are NaN), rows [steps], logits [steps, V], last_tokens [steps] -> per step the logits
    out, forced, suppressed, text_position, complete: a bare AlignmentStreamAnalyzer (its
    fields as __init__ sets them, without the model and its hooks) fed the given heads as
    its attention spies would (the text slice at columns [0, n_text))."""
    from chatterbox.models.t3.inference.alignment_stream_analyzer import AlignmentStreamAnalyzer
    S = int(np.asarray(inputs["n_text"]))
    heads = torch.from_numpy(np.asarray(inputs["heads"], np.float32))
    rows = [int(r) for r in np.asarray(inputs["rows"]).reshape(-1)]
    logits = torch.from_numpy(np.asarray(inputs["logits"], np.float32))
    a = object.__new__(AlignmentStreamAnalyzer)
    a.text_tokens_slice, a.eos_idx = (0, S), int(np.asarray(inputs.get("eos", 6562)))
    a.alignment, a.curr_frame_pos, a.text_position = torch.zeros(0, S), 0, 0
    a.started, a.started_at, a.complete, a.completed_at = False, None, False, None
    a.generated_tokens, a.last_aligned_attns = [], [None] * heads.shape[1]
    out = {"logits": [], "forced": [], "suppressed": [], "text_position": [], "complete": []}
    for k, last in enumerate(int(t) for t in np.asarray(inputs["last_tokens"]).reshape(-1)):
        h = heads[k, :, :rows[k]]
        if k == 0:      # the prompt's attention: the chunk is its rows past the text
            h = torch.cat([torch.zeros(h.shape[0], S, S), h], dim=1)
        a.last_aligned_attns = list(h)
        lo = a.step(logits[k:k + 1].clone(), next_token=last)[0]
        eos = a.eos_idx
        out["logits"].append(lo.numpy())
        out["forced"].append(bool(lo[eos] == 2 ** 15))
        out["suppressed"].append(bool(lo[eos] == -(2 ** 15)))
        out["text_position"].append(int(a.text_position))
        out["complete"].append(bool(a.complete))
    return {k: np.asarray(v) for k, v in out.items()}


@stage("mtl_t3_sampler")
def mtl_t3_sampler_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """cond, uncond [N, V], history (flat) + offsets, params [N, 5] = (cfg_weight, temperature,
    repetition_penalty, min_p, top_p) -> probs [N, V]: `T3.inference`'s guidance and processors
    (the analyzer aside) in its order, then the softmax multinomial draws from."""
    from transformers.generation.logits_process import (
        MinPLogitsWarper, RepetitionPenaltyLogitsProcessor, TopPLogitsWarper)
    cond = torch.from_numpy(np.asarray(inputs["cond"], np.float32))
    uncond = torch.from_numpy(np.asarray(inputs["uncond"], np.float32))
    hist, offs = np.asarray(inputs["history"], np.int64), np.asarray(inputs["offsets"], np.int64)
    probs = []
    for i, (cfg_weight, temperature, rep, min_p, top_p) in enumerate(np.asarray(inputs["params"], np.float64)):
        c, u = cond[i:i + 1], uncond[i:i + 1]
        cfg = torch.as_tensor(float(cfg_weight), dtype=c.dtype)
        logits = c + cfg * (c - u)
        ids = torch.from_numpy(hist[offs[i]:offs[i + 1]]).reshape(1, -1)
        logits = RepetitionPenaltyLogitsProcessor(penalty=float(rep))(ids, logits)
        if temperature != 1.0:
            logits = logits / float(temperature)
        logits = MinPLogitsWarper(min_p=float(min_p))(ids, logits)
        logits = TopPLogitsWarper(top_p=float(top_p))(ids, logits)
        probs.append(torch.softmax(logits, dim=-1)[0].numpy())
    return {"probs": np.stack(probs).astype(np.float32)}
