"""Reference stage for S3TokenizerV2 tokens. REFERENCE-VENV ONLY (imports torch)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, stage


@stage("s3tok_tokens")
def s3tok_tokens_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """wav (16 kHz) [, max_len] -> tokens int32 [T'] as chatterbox calls the tokenizer.

    With max_len: `s3gen.tokenizer.forward([wav], max_len=max_len)` (prepare_conditionals'
    T3 prompt tokens, numpy wav). Without: `s3gen.tokenizer(wav[None])` (embed_ref's
    prompt_token, a float tensor). Also returns `proj`, the project_down output (FSQ input
    before tanh) [T', 8] for recordings of one segment (<= 30 s), `seconds` (wall time of
    the call) and `threads` (torch's thread count).
    """
    from .stages import load_s3gen

    tok = load_s3gen(snapshot).tokenizer
    wav = np.asarray(inputs["wav"], np.float32).reshape(-1)
    max_len = int(inputs["max_len"]) if "max_len" in inputs else None

    captured = []
    hook = tok.quantizer._codebook.project_down.register_forward_hook(
        lambda _m, _i, out: captured.append(out.detach().float().numpy().copy()))
    t0 = time.perf_counter()
    if max_len is not None:
        tokens, lens = tok.forward([wav], max_len=max_len)
    else:
        tokens, lens = tok(torch.from_numpy(wav)[None].float())
    seconds = time.perf_counter() - t0
    hook.remove()

    n = int(lens[0])
    out = {"tokens": tokens[0, :n].numpy().astype(np.int32), "seconds": np.asarray(seconds),
           "threads": np.asarray(torch.get_num_threads())}
    if len(captured) == 1 and captured[0].shape[0] == n:  # one segment: rows are the tokens
        out["proj"] = captured[0].astype(np.float32)
    return out
