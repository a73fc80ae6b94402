"""The least time the host's hardware allows for T3's steps and for the exact CFM, so that the
bench can say how close to it each runs (issue 37's "within 1.5x of the memory-bandwidth bound",
"how close to the f32 bound").

- A T3 step multiplies one position (two with guidance) by every weight of its blocks and its
  speech head: a multiply-add or two per byte, so its time is at least those bytes over the
  host's read bandwidth (its KV cache, read too, may stay in a large L3).
- The exact mode's CFM is f32 products (OpenBLAS's sgemm and attention): its time is at least
  its multiply-adds over the host's f32 FMA rate at the width OpenBLAS's kernels use.

Both rates are measured here on this host (`_core.host_read_gbps`, `_core.host_f32_fma_gmacs`);
the work is counted from the GGUF's shapes (its header, read once: `read_header`), nothing from a
model size written down.
"""

from __future__ import annotations

import re

from engine_native import _core
from engine_native.gguf_header import GGUFHeader

# OpenBLAS kernels (`system_info()["blas_core"]`) whose sgemm runs on 512-bit registers.
_AVX512_BLAS_CORES = ("skylakex", "cooperlake", "sapphirerapids")
# Read buffer for the bandwidth (MiB): far past any cache this class of machine has.
_READ_MIB = 1024


def _block_index(name: str, prefix: str) -> int | None:
    m = re.match(re.escape(prefix) + r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def t3_step_bytes(header: GGUFHeader) -> int:
    """Bytes of the weights one T3 step reads: every tensor of its blocks, its final norm and
    its speech head (the embedding tables give one row a step)."""
    total = 0
    for t in header.tensors:
        if not t.name.startswith("t3."):
            continue
        if _block_index(t.name, "t3.") is not None or t.name.startswith(("t3.speech_head.", "t3.norm.", "t3.ln_f.")):
            total += t.nbytes
    return total


def t3_kv_bytes_per_position(header: GGUFHeader, rows: int) -> int:
    """Bytes of the KV cache one past position adds to a step's reads: keys and values of
    every layer for `rows` rows (two with guidance), f32 where the model's blocks are f32,
    else f16 (the engine's cache types, t3/t3_gpt2.cpp and t3/t3_llama.cpp)."""
    layers, kv_dim, f32 = set(), 0, False
    for t in header.tensors:
        i = _block_index(t.name, "t3.")
        if i is None:
            continue
        layers.add(i)
        if i == 0 and t.name.endswith(("attn.c_attn.weight", "self_attn.k_proj.weight")):
            out = t.shape[1]
            kv_dim = out // 3 if "c_attn" in t.name else out
            f32 = t.type == 0
    return len(layers) * 2 * kv_dim * (4 if f32 else 2) * rows


def t3_prompt_positions(header: GGUFHeader, voice_prompt_tokens: int, text_tokens: int) -> int:
    """Positions a T3 prompt fills: the speaker, the voice's conditioning (the Multilingual
    perceiver's queries with its emotion position, else the voice's prompt tokens), the text
    and the start of speech."""
    query = 0
    emotion = 0
    for t in header.tensors:
        if t.name == "t3.cond_enc.perceiver.pre_attention_query":
            query = int(t.shape[1])
        elif t.name == "t3.cond_enc.emotion_adv_fc.weight":
            emotion = 1
    return 1 + (query + emotion if query else voice_prompt_tokens) + text_tokens + 1


def cfm_macs_per_pass(header: GGUFHeader, frames: int) -> int:
    """Multiply-adds of one CFM estimator pass over `frames` frames (prompt and speech) for
    one row: every weight of its convolutions and linear layers once per frame (a conv's
    taps included), the attention's two products (scores and values: 2 x frames x inner
    dimension per query frame and block). The time embedding's layers run once per pass, not
    per frame, and are left out (a few million)."""
    per_frame, attention = 0, 0
    for t in header.tensors:
        name = t.name
        if not name.startswith("s3gen.cfm.") or not name.endswith(".weight") or len(t.shape) < 2:
            continue
        if name.startswith(("s3gen.cfm.time_mlp.", "s3gen.cfm.time_embed_mixer.")) or ".mlp.1." in name:
            continue  # the time embedding (meanflow's mixer too) and each block's projection of it
        elements = 1
        for d in t.shape:
            elements *= int(d)
        per_frame += elements
        if name.endswith("attn1.to_q.weight"):
            attention += 2 * int(t.shape[1])  # inner dimension (ggml order: [in, out])
    return per_frame * frames + attention * frames * frames


def f32_fma_lanes() -> int:
    """The register width (floats) of the CPU's f32 products in the exact mode: OpenBLAS's
    kernels where the engine has it (the variant it loaded), else the CPU's own widest."""
    info = _core.system_info()
    core = str(info.get("blas_core") or "").lower()
    if core:
        return 16 if any(core.startswith(c) for c in _AVX512_BLAS_CORES) else 8
    return 16 if "AVX512" in str(info.get("cpu_features", "")).split() else 8


def host_rates(threads: int, rounds: int = 3) -> dict:
    """This host's read bandwidth (GB/s) and f32 FMA rate (G multiply-adds/s, at the exact
    mode's width) with `threads` threads, measured now."""
    lanes = f32_fma_lanes()
    return {"read_gbps": _core.host_read_gbps(threads, _READ_MIB, rounds),
            "fma_gmacs": _core.host_f32_fma_gmacs(threads, lanes, rounds), "fma_lanes": lanes}


def read_bound_ms(nbytes: float, rates: dict) -> float:
    """The least ms reading `nbytes` takes at the measured bandwidth (T3's step: t3_step_bytes;
    its KV cache is not counted, as a large L3 may hold it)."""
    return nbytes / (rates["read_gbps"] * 1e9) * 1e3


def fma_bound_ms(macs: float, rates: dict) -> float:
    """The least ms `macs` f32 multiply-adds take at the measured rate (NaN where the CPU lacks
    the width's FMA)."""
    return macs / (rates["fma_gmacs"] * 1e9) * 1e3 if rates["fma_gmacs"] > 0 else float("nan")
