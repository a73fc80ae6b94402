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
