"""The one quantisation policy: which tensors may be stored in a block-quantised type.

Both the converter and `requantize` call `storage_type()`; nothing else decides.
Only big 2-D matmul weights of T3 and of the S3Gen flow (conformer encoder, CFM
estimator) are eligible. Embeddings, position tables, norms, biases, convolution
kernels, HiFT, filterbanks, the voice encoders (VoiceEncoder, CAMPPlus,
S3TokenizerV2) and the built-in voice always stay F32: they are small, or they feed
the voice features where quantisation error changes the voice.
"""

from __future__ import annotations

from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES

QUANT_TYPES: dict[str, Q] = {
    "f32": Q.F32,
    "f16": Q.F16,
    "q8_0": Q.Q8_0,
    "q5_0": Q.Q5_0,
    "q4_0": Q.Q4_0,
}

_ELIGIBLE_PREFIXES = ("t3.blk.", "t3.speech_head.", "t3.cond_enc.", "s3gen.enc.", "s3gen.cfm.", "s3gen.flow.encoder_proj.")
_NEVER = ("_emb.", "wpe.", "input_embedding.", "norm", "ln_")
MIN_ELEMENTS = 1 << 16  # below this the saving is negligible and the matmul is not weight-bound


def storage_type(name: str, shape: tuple[int, ...], quant: str) -> Q:
    """The GGML type tensor `name` (numpy `shape`, row-major) is stored in for `quant`."""
    target = QUANT_TYPES[quant]
    if target == Q.F32 or not is_quantisable(name, shape):
        return Q.F32
    block = GGML_QUANT_SIZES[target][0]
    if shape[-1] % block != 0:  # ggml quantises along rows (the input dimension)
        return Q.F32
    return target


def is_quantisable(name: str, shape: tuple[int, ...]) -> bool:
    if len(shape) != 2 or not name.endswith(".weight"):
        return False
    if not name.startswith(_ELIGIBLE_PREFIXES) or any(part in name for part in _NEVER):
        return False
    return shape[0] * shape[1] >= MIN_ELEMENTS
