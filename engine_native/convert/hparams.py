"""Every hyperparameter the engine needs, written as GGUF metadata under `chatterbox.`.

Dimensions are read from the tensors themselves; what shapes cannot tell (head
counts, eps values, special token ids, sample rates, the reference `generate()`
defaults) is the reference implementation's constant, copied from `chatterbox-tts`
0.1.7 and checked against the reference modules by tests/engine_native/convert/test_model.py.
"""

from __future__ import annotations

import re

import numpy as np

from engine_native.convert.errors import ConvertError

GPT2_HEAD_DIM = 64  # every GPT-2 size (small, medium, large) uses 64-wide heads


def _count(state: dict[str, np.ndarray], pattern: str) -> int:
    rx = re.compile(pattern)
    return len({m.group(1) for k in state if (m := rx.match(k))})


def t3_hparams(t3: dict[str, np.ndarray], source: str) -> dict:
    try:
        n_embd = t3["text_emb.weight"].shape[1]
        hp = {
            "t3.arch": "gpt2",
            "t3.n_layer": _count(t3, r"tfmr\.h\.(\d+)\."),
            "t3.n_embd": n_embd,
            "t3.n_head": n_embd // GPT2_HEAD_DIM,
            "t3.n_ff": t3["tfmr.h.0.mlp.c_fc.weight"].shape[1],
            "t3.n_ctx": t3["tfmr.wpe.weight"].shape[0],
            "t3.ln_eps": 1e-5,
            "t3.activation": "gelu_new",  # GPT-2's tanh approximation
            "t3.text_vocab": t3["text_emb.weight"].shape[0],
            "t3.speech_vocab": t3["speech_emb.weight"].shape[0],
            "t3.speaker_embed_size": t3["cond_enc.spkr_enc.weight"].shape[1],
        }
    except KeyError as e:
        raise ConvertError(f"{source}: not a GPT-2 T3 checkpoint (missing {e.args[0]})") from None
    hp.update({
        "t3.start_text_token": 255,
        "t3.stop_text_token": 0,
        "t3.start_speech_token": 6561,
        "t3.stop_speech_token": 6562,
        "t3.speech_cond_prompt_len": 375,
        "t3.prompt_seconds": 15,   # ENC_COND_LEN: seconds of a recording that give T3's prompt tokens
        "t3.max_text_tokens": 2048,
        "t3.max_speech_tokens": 4096,
        # ChatterboxTurboTTS.generate() / T3.inference_turbo() defaults
        "sampling.temperature": 0.8,
        "sampling.top_k": 1000,
        "sampling.top_p": 0.95,
        "sampling.repetition_penalty": 1.2,
        "sampling.min_p": 0.0,
        "sampling.max_gen_len": 1000,
    })
    return hp


def s3gen_hparams(s3: dict[str, np.ndarray], meanflow: bool, source: str) -> dict:
    try:
        hp = {
            "s3gen.sample_rate": 24000,
            "s3gen.token_rate": 25,
            "s3gen.token_mel_ratio": 2,
            "s3gen.prompt_seconds": 10,  # DEC_COND_LEN: seconds of a recording that give S3Gen's prompt
            "s3gen.n_mels": 80,
            "s3gen.speech_vocab": s3["flow.input_embedding.weight"].shape[0],
            "s3gen.silence_token": 4299,
            "s3gen.n_silence_tokens": 3,
            "s3gen.spk_embed_dim": s3["flow.spk_embed_affine_layer.weight"].shape[1],
            # UpsampleConformerEncoder
            "s3gen.enc.d_model": s3["flow.encoder.after_norm.weight"].shape[0],
            "s3gen.enc.n_head": 8,
            "s3gen.enc.n_ff": s3["flow.encoder.encoders.0.feed_forward.w_1.weight"].shape[0],
            "s3gen.enc.n_blocks": _count(s3, r"flow\.encoder\.encoders\.(\d+)\."),
            "s3gen.enc.n_up_blocks": _count(s3, r"flow\.encoder\.up_encoders\.(\d+)\."),
            "s3gen.enc.layer_eps": 1e-12,
            "s3gen.enc.after_norm_eps": 1e-5,
            "s3gen.enc.embed_eps": 1e-5,  # LinearNoSubsampling's LayerNorm
            "s3gen.enc.lookahead_lrelu_slope": 0.01,  # F.leaky_relu default in PreLookaheadLayer
            "s3gen.enc.pre_lookahead_len": s3["flow.encoder.pre_lookahead_layer.conv1.weight"].shape[2] - 1,
            "s3gen.enc.up_stride": 2,
            "s3gen.enc.pos_enc": "rel_pos_espnet",
            # ConditionalDecoder (CFM estimator)
            "s3gen.cfm.in_channels": s3["flow.decoder.estimator.down_blocks.0.0.block1.block.0.weight"].shape[1],
            "s3gen.cfm.out_channels": s3["flow.decoder.estimator.final_proj.weight"].shape[0],
            "s3gen.cfm.channels": s3["flow.decoder.estimator.down_blocks.0.0.block1.block.0.weight"].shape[0],
            "s3gen.cfm.n_blocks": _count(s3, r"flow\.decoder\.estimator\.down_blocks\.0\.1\.(\d+)\."),
            "s3gen.cfm.n_mid_blocks": _count(s3, r"flow\.decoder\.estimator\.mid_blocks\.(\d+)\."),
            "s3gen.cfm.n_head": 8,
            "s3gen.cfm.head_dim": 64,
            "s3gen.cfm.causal": True,
            "s3gen.cfm.meanflow": meanflow,
            "s3gen.cfm.n_timesteps": 2 if meanflow else 10,
            "s3gen.cfm.t_scheduler": "cosine",
            "s3gen.cfm.inference_cfg_rate": 0.7,
            "s3gen.cfm.sigma_min": 1e-6,
            # HiFTGenerator as S3Token2Wav builds it
            "hift.sample_rate": 24000,
            "hift.base_channels": s3["mel2wav.conv_pre.bias"].shape[0],
            "hift.nb_harmonics": 8,
            "hift.upsample_rates": [8, 5, 3],
            "hift.upsample_kernel_sizes": [16, 11, 7],
            "hift.resblock_kernel_sizes": [3, 7, 11],
            "hift.resblock_dilations": [1, 3, 5],
            "hift.source_resblock_kernel_sizes": [7, 7, 11],
            "hift.source_resblock_dilations": [1, 3, 5],
            "hift.istft_n_fft": 16,
            "hift.istft_hop": 4,
            "hift.lrelu_slope": 0.1,
            "hift.audio_limit": 0.99,
            "hift.nsf_alpha": 0.1,
            "hift.nsf_sigma": 0.003,
            "hift.nsf_voiced_threshold": 10.0,
            "hift.trim_fade_samples": 24000 // 50,
            # CAMPPlus (x-vector) and S3TokenizerV2
            "campplus.embed_dim": s3["speaker_encoder.xvector.dense.linear.weight"].shape[0]
            if "speaker_encoder.xvector.dense.linear.weight" in s3 else 192,
            "campplus.batchnorm_eps": 1e-5,
            "s3tok.n_mels": s3["tokenizer._mel_filters"].shape[0],
            "s3tok.n_state": s3["tokenizer.encoder.conv1.weight"].shape[0],
            "s3tok.n_layer": _count(s3, r"tokenizer\.encoder\.blocks\.(\d+)\."),
            "s3tok.n_head": 20,
            "s3tok.fsmn_kernel": s3["tokenizer.encoder.blocks.0.attn.fsmn_block.weight"].shape[2],
            "s3tok.sample_rate": 16000,
            "s3tok.n_fft": 400,
            "s3tok.hop": 160,
            "s3tok.token_rate": 25,
            "s3tok.codebook_size": 6561,
        }
    except KeyError as e:
        raise ConvertError(f"{source}: not an S3Gen checkpoint this converter knows (missing {e.args[0]})") from None
    return hp


def ve_hparams(ve: dict[str, np.ndarray], source: str) -> dict:
    try:
        return {
            "ve.n_layer": _count(ve, r"lstm\.weight_ih_l(\d+)"),
            "ve.n_hidden": ve["lstm.weight_hh_l0"].shape[1],
            "ve.n_mels": ve["lstm.weight_ih_l0"].shape[1],
            "ve.embed_dim": ve["proj.weight"].shape[0],
            "ve.sample_rate": 16000,
            "ve.partial_frames": 160,
            "ve.partial_overlap": 0.5,
            "ve.min_coverage": 0.8,
        }
    except KeyError as e:
        raise ConvertError(f"{source}: not a VoiceEncoder checkpoint (missing {e.args[0]})") from None
