"""Reference stages for S3Gen's flow. REFERENCE-VENV ONLY (imports torch)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, load_conds, load_s3gen, stage


@stage("s3gen_encode")
def s3gen_encode_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """speech_ids [, prompt_token] -> mu [80, 2 x (prompt + speech)]: CausalMaskedDiffWithXvec.inference
    up to encoder_proj (finalize=True), with the built-in voice's prompt tokens unless given."""
    flow = load_s3gen(snapshot).flow
    prompt = inputs.get("prompt_token")
    if prompt is None:
        prompt = load_conds(snapshot).gen["prompt_token"].numpy()
    token = torch.from_numpy(np.concatenate([np.asarray(prompt).reshape(-1),
                                             np.asarray(inputs["speech_ids"]).reshape(-1)]).astype(np.int64))[None]
    token_len = torch.tensor([token.shape[1]])
    with torch.inference_mode():
        h, _ = flow.encoder(flow.input_embedding(token), token_len)
        mu = flow.encoder_proj(h)
    return {"mu": mu[0].T.contiguous().numpy()}


@stage("s3gen_encode_prompt_causal")
def s3gen_encode_prompt_causal_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """s3gen_encode (built-in voice) as our streams' cached encoder prefix defines it: the
    prompt's tokens encoded as if alone (their pre-lookahead meets zeros after the prompt, their
    attention at both rates sees only the prompt), the speech tokens after them as usual.
    speech_ids -> mu [80, 2 x (prompt + speech)]."""
    import torch.nn.functional as F
    import chatterbox.models.s3gen.transformer.upsample_encoder as ue

    flow = load_s3gen(snapshot).flow
    prompt = load_conds(snapshot).gen["prompt_token"].numpy().reshape(-1)
    speech = np.asarray(inputs["speech_ids"]).reshape(-1)
    n_p, n = prompt.size, prompt.size + speech.size
    token = torch.from_numpy(np.concatenate([prompt, speech]).astype(np.int64))[None]
    orig_mask = ue.add_optional_chunk_mask
    layer = flow.encoder.pre_lookahead_layer

    def prompt_causal_mask(xs, masks, *a, **k):
        full = orig_mask(xs, masks, *a, **k)
        T = masks.shape[-1]
        p = n_p * T // n  # the prompt's frames at this rate
        allowed = torch.ones(T, T, dtype=torch.bool)
        allowed[:p, p:] = False
        return full.bool() & allowed[None]

    def lookahead_prompt_alone(inputs):  # PreLookaheadLayer.forward, the prompt's conv1 on its own
        x = inputs.transpose(1, 2)
        ahead = lambda seg: F.leaky_relu(layer.conv1(F.pad(seg, (0, layer.pre_lookahead_len))))
        h = torch.cat([ahead(x[..., :n_p]), ahead(x[..., n_p:])], dim=2)
        return layer.conv2(F.pad(h, (layer.conv2.kernel_size[0] - 1, 0))).transpose(1, 2) + inputs

    ue.add_optional_chunk_mask = prompt_causal_mask
    layer.forward = lookahead_prompt_alone
    try:
        with torch.inference_mode():
            h, _ = flow.encoder(flow.input_embedding(token), torch.tensor([n]))
            mu = flow.encoder_proj(h)
    finally:
        ue.add_optional_chunk_mask = orig_mask
        del layer.forward
    return {"mu": mu[0].T.contiguous().numpy()}
