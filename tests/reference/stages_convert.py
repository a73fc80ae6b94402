"""Reference stages for the converter tests. REFERENCE-VENV ONLY (imports torch).

Registered into `stages.STAGES` when `stages` is imported.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .stages import Inputs, load_conds, load_s3gen, stage


@stage("conds")
def conds_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """The built-in voice as `Conditionals.load` reads it."""
    c = load_conds(snapshot)
    return {
        "speaker_emb": c.t3.speaker_emb.numpy(),
        "cond_prompt_speech_tokens": c.t3.cond_prompt_speech_tokens.numpy(),
        "embedding": c.gen["embedding"].numpy(),
        "prompt_token": c.gen["prompt_token"].numpy(),
        "prompt_feat": c.gen["prompt_feat"].numpy(),
    }


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@stage("fold_check")
def fold_check_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """names[i] + t{i}: folded GGUF tensors (hift.*.weight of weight-normed convs,
    campplus.*.scale/shift). For each, run the reference module's own forward on a
    random input and the same op with the folded tensors; return rel per module."""
    s3 = load_s3gen(snapshot)
    names = [str(n) for n in inputs["names"]]
    folded = {n: torch.from_numpy(np.asarray(inputs[f"t{i}"])) for i, n in enumerate(names)}
    modules = dict(s3.named_modules())
    gen = torch.Generator().manual_seed(0)
    out_names, rels = [], []
    with torch.no_grad():
        for name, w in folded.items():
            if name.startswith("hift.") and name.endswith(".weight"):
                mod = modules["mel2wav." + name[len("hift."):-len(".weight")]]
                x = torch.randn(1, mod.in_channels, 64, generator=gen)
                if isinstance(mod, torch.nn.ConvTranspose1d):
                    mine = F.conv_transpose1d(x, w, mod.bias, mod.stride, mod.padding, mod.output_padding,
                                              mod.groups, mod.dilation)
                else:
                    mine = F.conv1d(x, w, mod.bias, mod.stride, mod.padding, mod.dilation, mod.groups)
                out_names.append(name)
                rels.append(_rel(mine, mod(x)))
            elif name.endswith(".scale"):
                prefix = name[: -len(".scale")]
                mod = modules["speaker_encoder." + prefix[len("campplus."):]]
                mod.eval()
                c = mod.num_features
                x = torch.randn(2, c, 7, 5, generator=gen) if isinstance(mod, torch.nn.BatchNorm2d) \
                    else torch.randn(2, c, 9, generator=gen)
                shape = (1, c) + (1,) * (x.dim() - 2)
                mine = x * w.reshape(shape) + folded[prefix + ".shift"].reshape(shape)
                out_names.append(prefix)
                rels.append(_rel(mine, mod(x)))
    return {"modules": np.array(out_names), "rel": np.asarray(rels, dtype=np.float64)}


@stage("hparams")
def hparams_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Hyperparameters the converter writes as constants, read off the reference modules."""
    from chatterbox.models.s3gen.const import S3GEN_SIL
    from chatterbox.models.voice_encoder.config import VoiceEncConfig

    s3 = load_s3gen(snapshot)
    enc = s3.flow.encoder
    hift = s3.mel2wav
    est = s3.flow.decoder.estimator
    layer = enc.encoders[0]
    attn0 = est.down_blocks[0][1][0].attn1
    tok = s3.tokenizer
    ve_hp = VoiceEncConfig()
    ups = [int(u.stride[0]) for u in hift.ups]
    return {
        "s3gen.silence_token": np.asarray(S3GEN_SIL),
        "s3gen.enc.n_head": np.asarray(layer.self_attn.h),
        "s3gen.enc.layer_eps": np.asarray(layer.norm_mha.eps),
        "s3gen.enc.after_norm_eps": np.asarray(enc.after_norm.eps),
        "s3gen.enc.embed_eps": np.asarray(enc.embed.out[1].eps),
        "s3gen.enc.pre_lookahead_len": np.asarray(enc.pre_lookahead_layer.pre_lookahead_len),
        "s3gen.enc.up_stride": np.asarray(enc.up_layer.stride),
        "s3gen.cfm.n_head": np.asarray(attn0.heads),
        "s3gen.cfm.meanflow": np.asarray(bool(est.meanflow) if hasattr(est, "meanflow") else True),
        "hift.upsample_rates": np.asarray(ups),
        "hift.upsample_kernel_sizes": np.asarray([int(u.kernel_size[0]) for u in hift.ups]),
        "hift.nb_harmonics": np.asarray(hift.nb_harmonics),
        "hift.istft_n_fft": np.asarray(hift.istft_params["n_fft"]),
        "hift.istft_hop": np.asarray(hift.istft_params["hop_len"]),
        "hift.lrelu_slope": np.asarray(hift.lrelu_slope),
        "hift.audio_limit": np.asarray(hift.audio_limit),
        "hift.sample_rate": np.asarray(hift.sampling_rate),
        "hift.nsf_alpha": np.asarray(hift.m_source.l_sin_gen.sine_amp),
        "hift.nsf_sigma": np.asarray(hift.m_source.l_sin_gen.noise_std),
        "hift.nsf_voiced_threshold": np.asarray(float(hift.m_source.l_sin_gen.voiced_threshold)),
        "hift.trim_fade_samples": np.asarray(s3.trim_fade.numel() // 2),
        "s3tok.n_head": np.asarray(tok.encoder.blocks[0].attn.n_head),
        "s3tok.n_layer": np.asarray(len(tok.encoder.blocks)),
        "ve.partial_frames": np.asarray(ve_hp.ve_partial_frames),
        "ve.sample_rate": np.asarray(ve_hp.sample_rate),
    }
