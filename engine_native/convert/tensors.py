"""Reference state dicts -> GGUF tensors: names, transposes and foldings.

Layout rule: a numpy array of shape (a, b, c) becomes a ggml tensor with
ne = [c, b, a], so PyTorch `nn.Linear` weights (out, in) and `nn.Conv1d` weights
(out, in, k) are already in the layout ggml's mul_mat / conv kernels expect.
The exceptions are written out below:

- GPT-2 `Conv1D` weights (`c_attn`, `c_proj`, `c_fc`) are stored (in, out) by
  Hugging Face; they are transposed to (out, in).
- HiFT weight-norm (`parametrizations.weight.original0/1` = g, v) is folded into a
  plain weight: w = g * v / ||v||, the norm taken over every dim but the first
  (torch's `weight_norm(dim=0)`, also for the ConvTranspose1d upsamplers).
- CAMPPlus BatchNorm (weight, bias, running_mean, running_var) is folded into a
  per-channel `scale` = weight / sqrt(var + eps) and `shift` = bias - mean * scale.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np

from engine_native.convert.errors import ConvertError

BATCHNORM_EPS = 1e-5  # every BatchNorm in CAMPPlus uses torch's default eps

GPT2_CONV1D = re.compile(r"\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$")


def t3_tensors(state: dict[str, np.ndarray], source: str) -> Iterator[tuple[str, np.ndarray]]:
    """T3 (GPT-2 family). `tfmr.wte` and `text_head` are unused by inference and dropped."""
    for key, arr in state.items():
        if key in ("tfmr.wte.weight", "text_head.weight", "text_head.bias"):
            continue
        if key.startswith("tfmr.h."):
            name = "t3.blk." + key[len("tfmr.h."):]
        elif key.startswith("tfmr."):
            name = "t3." + key[len("tfmr."):]
        else:
            name = "t3." + key
        if GPT2_CONV1D.search(key):
            arr = arr.T
        yield name, arr


def s3gen_tensors(state: dict[str, np.ndarray], source: str) -> Iterator[tuple[str, np.ndarray]]:
    """S3Gen: flow (encoder + CFM), HiFT, CAMPPlus and S3TokenizerV2, one safetensors file."""
    weight_norm: dict[str, dict[str, np.ndarray]] = {}
    batch_norm: dict[str, dict[str, np.ndarray]] = {}
    for key, arr in state.items():
        if key.startswith("flow.encoder."):
            yield "s3gen.enc." + key[len("flow.encoder."):], arr
        elif key.startswith("flow.decoder.estimator."):
            yield "s3gen.cfm." + key[len("flow.decoder.estimator."):], arr
        elif key.startswith("flow."):
            yield "s3gen.flow." + key[len("flow."):], arr
        elif key.startswith("mel2wav."):
            name = "hift." + key[len("mel2wav."):]
            m = re.match(r"(.*)\.parametrizations\.weight\.original([01])$", name)
            legacy = re.match(r"(.*)\.weight_([gv])$", name)     # pre-parametrization weight_norm
            if m:
                weight_norm.setdefault(m.group(1), {})["gv"[int(m.group(2))]] = arr
            elif legacy:
                weight_norm.setdefault(legacy.group(1), {})[legacy.group(2)] = arr
            else:
                yield name, arr
        elif key.startswith("speaker_encoder."):
            name = "campplus." + key[len("speaker_encoder."):]
            m = re.match(r"(.*)\.(weight|bias|running_mean|running_var|num_batches_tracked)$", name)
            if m and _is_batchnorm(state, key):
                batch_norm.setdefault(m.group(1), {})[m.group(2)] = arr
            else:
                yield name, arr
        elif key.startswith("tokenizer."):
            yield "s3tok." + key[len("tokenizer."):], arr
        else:
            raise ConvertError(f"{source}: unexpected tensor {key!r} (not an S3Gen layout this converter knows)")

    for prefix, parts in weight_norm.items():
        if set(parts) != {"g", "v"}:
            raise ConvertError(f"{source}: weight-norm of {prefix} is incomplete ({sorted(parts)})")
        yield prefix + ".weight", fold_weight_norm(parts["g"], parts["v"])
    for prefix, parts in batch_norm.items():
        scale, shift = fold_batch_norm(parts, BATCHNORM_EPS)
        yield prefix + ".scale", scale
        yield prefix + ".shift", shift


def _is_batchnorm(state: dict[str, np.ndarray], key: str) -> bool:
    return key.rsplit(".", 1)[0] + ".running_var" in state


def fold_weight_norm(g: np.ndarray, v: np.ndarray) -> np.ndarray:
    v64 = v.astype(np.float64)
    norm = np.sqrt((v64 ** 2).reshape(v.shape[0], -1).sum(axis=1))
    w = v64 * (g.astype(np.float64).reshape(-1) / norm).reshape((-1,) + (1,) * (v.ndim - 1))
    return w.astype(np.float32)


def fold_batch_norm(parts: dict[str, np.ndarray], eps: float) -> tuple[np.ndarray, np.ndarray]:
    var = parts["running_var"].astype(np.float64)
    mean = parts["running_mean"].astype(np.float64)
    gamma = parts["weight"].astype(np.float64) if "weight" in parts else np.ones_like(var)
    beta = parts["bias"].astype(np.float64) if "bias" in parts else np.zeros_like(var)
    scale = gamma / np.sqrt(var + eps)
    shift = beta - mean * scale
    return scale.astype(np.float32), shift.astype(np.float32)


def ve_tensors(state: dict[str, np.ndarray], source: str) -> Iterator[tuple[str, np.ndarray]]:
    for key, arr in state.items():
        yield "ve." + key, arr
