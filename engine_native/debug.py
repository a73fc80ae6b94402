"""Staged parity seams (docs/DESIGN.md, "Staged parity seams"): each stage of the engine
with numpy in/out, so tests can feed the same inputs to the engine and the reference."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from engine_native import _core

_tokenizers: dict[tuple, "_core.Gpt2Tokenizer"] = {}
_tokenizers_lock = threading.Lock()


def _tokenizer(model) -> "_core.Gpt2Tokenizer":
    """The model file's tokenizer, cached per (resolved path, size, mtime)."""
    path = Path(os.fspath(model)).resolve()
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
    except OSError:
        key = (str(path), None, None)  # the constructor raises EngineError with the path
    with _tokenizers_lock:
        tok = _tokenizers.get(key)
        if tok is None:
            tok = _core.Gpt2Tokenizer(str(path))
            _tokenizers[key] = tok
        return tok


def punc_norm(text: str, variant: str = "turbo") -> str:
    """`chatterbox.tts_turbo.punc_norm`; with variant="mtl", `chatterbox.mtl_tts.punc_norm`."""
    if variant == "mtl":
        return _core.punc_norm_mtl(text)
    return _core.punc_norm(text)


_mtl_tokenizers: dict[tuple, object] = {}


def _mtl_tokenizer(model):
    from engine_native.text_mtl import MtlTokenizer
    path = Path(os.fspath(model)).resolve()
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
    except OSError:
        key = (str(path), None, None)
    with _tokenizers_lock:
        tok = _mtl_tokenizers.get(key)
        if tok is None:
            tok = _mtl_tokenizers[key] = MtlTokenizer(path)
        return tok


def mtl_normalize(model, text: str, lang: str | None = None) -> str:
    """lower + NFKD + the language step of the Multilingual tokenizer (the model holds the
    Cangjie table; Japanese through pykakasi when installed)."""
    return _mtl_tokenizer(model).normalize(text, lang)


def mtl_tokenize(model, text: str, lang: str | None = None) -> np.ndarray:
    """`MTLTokenizer.text_to_tokens(text, language_id=lang)` (no punc_norm, no SOT/EOT): int32."""
    return _mtl_tokenizer(model).tokenize(text, lang)


def tokenize(model, text: str) -> np.ndarray:
    """The snapshot's HF tokenizer `input_ids` for `text` (no normalisation, no BOS/EOS):
    int32 array. `model` is the path of a Chatterbox GGUF model (only its metadata is read)."""
    return _tokenizer(model).encode(text)


_models: dict[str, object] = {}
_models_lock = threading.Lock()


def _component(model, kind: str):
    """A `_core` component (`kind` names its class) over a model file, loaded once per path."""
    path = str(Path(os.fspath(model)).resolve())
    with _models_lock:
        if _models.get("path") != path:
            _models.clear()
            _models["path"] = path
            _models["file"] = _core.ModelFile(path)
        if kind not in _models and kind != "ModelFile":
            _models[kind] = getattr(_core, kind)(_models["file"])
        if kind == "ModelFile":
            return _models["file"]
        return _models[kind]


def _voice_args(voice) -> dict:
    """voice: None for the model's built-in voice, or a mapping with `speaker_emb` and
    `cond_prompt_speech_tokens` (T3's two conditioning tensors)."""
    if voice is None:
        return {}
    return {"speaker_emb": np.asarray(voice["speaker_emb"], np.float32).reshape(-1).tolist(),
            "prompt_tokens": np.asarray(voice["cond_prompt_speech_tokens"]).reshape(-1).astype(np.int32).tolist()}


def _t3_args(voice, exaggeration=None, cfg_weight=None) -> dict:
    args = _voice_args(voice)
    if exaggeration is not None:
        args["exaggeration"] = float(exaggeration)
    if cfg_weight is not None:
        args["cfg_weight"] = float(cfg_weight)
    return args


def _two_rows(out: np.ndarray) -> np.ndarray:
    """The reference's batch of two: without guidance both rows are the same."""
    return out if out.shape[0] == 2 else np.repeat(out, 2, axis=0)


def t3_logits(model, text_ids, speech_ids, voice=None, *, exaggeration=None, cfg_weight=None) -> np.ndarray:
    """Teacher-forced speech logits [len(speech_ids), speech_vocab] (T3.forward's path);
    `speech_ids` starts with the start-of-speech token.

    Multilingual (llama) T3: [2, len(speech_ids), speech_vocab], the cond and uncond rows
    as `T3.inference` computes them (text_ids with the start/stop text tokens; the start
    token fed twice at learned speech position 0, speech_ids[j] at position j; row 1's
    text token embeddings zeroed when cfg_weight > 0, else equal to row 0). exaggeration
    and cfg_weight default to the model file's."""
    t3 = _component(model, "T3")
    text, speech = np.asarray(text_ids, np.int32).tolist(), np.asarray(speech_ids, np.int32).tolist()
    if t3.arch == "llama":
        return _two_rows(t3.logits(text, speech, **_t3_args(voice, exaggeration, cfg_weight)))
    return t3.logits(text, speech, **_voice_args(voice))


def t3_generate(model, text_ids, voice=None, n: int = 100, greedy: bool = True, *, seed: int = 0,
                **sampling) -> np.ndarray:
    """The first `n` speech tokens of `T3.inference_turbo` (Multilingual: `T3.inference`,
    with its alignment analyzer; text_ids with the start/stop text tokens), the stop token
    included if reached. greedy=True is top_k=1 (argmax after the processors); otherwise
    `sampling` (temperature, top_k, top_p, repetition_penalty, min_p; Multilingual also
    cfg_weight, exaggeration) defaults to the model file's, drawn from `seed`."""
    t3 = _component(model, "T3")
    if greedy:
        sampling = {**sampling, "top_k": 1}
    tokens = t3.generate(np.asarray(text_ids, np.int32).tolist(), int(n), int(seed), **sampling, **_voice_args(voice))
    return np.asarray(tokens, np.int32)


def t3_mtl_cond(model, voice=None, exaggeration=None) -> np.ndarray:
    """Multilingual: `T3.prepare_conditioning` -> [cond_len, n_embd] (speaker, 32 perceiver
    tokens over the voice's prompt speech, emotion)."""
    return _component(model, "T3").mtl_conditioning(**_t3_args(voice, exaggeration))


def t3_mtl_inputs(model, text_ids, voice=None, *, exaggeration=None, cfg_weight=None) -> np.ndarray:
    """Multilingual: the input embeddings of `T3.inference`'s first forward, [2, cond_len +
    len(text_ids) + 2, n_embd] (prepare_input_embeds with the start token, then bos_embed)."""
    t3 = _component(model, "T3")
    return _two_rows(t3.mtl_inputs(np.asarray(text_ids, np.int32).tolist(), [t3_start_token(model)],
                                   **_t3_args(voice, exaggeration, cfg_weight)))


def t3_mtl_rope(model) -> np.ndarray:
    """Multilingual: the RoPE frequencies after the llama3 scaling, f32 [head_dim / 2]
    (`LlamaRotaryEmbedding.inv_freq`)."""
    return _component(model, "T3").mtl_inv_freq


def t3_start_token(model) -> int:
    return int(_component(model, "ModelFile").get_int("chatterbox.t3.start_speech_token"))


def t3_mtl_replay(model, text_ids, forced, voice=None, *, exaggeration=None, cfg_weight=None) -> dict:
    """Multilingual: `T3.inference` teacher-forced with `forced` (one token per step):
    logits [2, len(forced) + 1, V] (cond, uncond of every forward), attn [heads, len(forced) + 2,
    len(text_ids)] (the alignment heads over the text: the start token's two rows, then one
    per forced token), and per step the AlignmentStreamAnalyzer's decisions on the guided
    logits (forced, suppressed, text_position, complete). Stops after a forced stop token."""
    t3 = _component(model, "T3")
    mf = _component(model, "ModelFile")
    forced = [int(t) for t in np.asarray(forced).reshape(-1)]
    stop = mf.get_int("chatterbox.t3.stop_speech_token")
    if stop in forced:
        forced = forced[:forced.index(stop) + 1]
    start = t3_start_token(model)
    text = np.asarray(text_ids, np.int32).tolist()
    speech = [start] + [t for t in forced if t != stop]
    logits, attn = t3.logits(text, speech, alignment=True, **_t3_args(voice, exaggeration, cfg_weight))
    w = float(cfg_weight) if cfg_weight is not None else float(mf.get_float("chatterbox.sampling.cfg_weight"))
    analyzer = _core.AlignmentAnalyzer(t3, len(text))
    steps = {"forced": [], "suppressed": [], "text_position": [], "complete": []}
    last = start
    for i in range(len(forced)):
        row = _core.apply_guidance(logits[0, i], logits[1, i], w) if logits.shape[0] == 2 else logits[0, i]
        heads = attn[:, :2] if i == 0 else attn[:, i + 1:i + 2]
        out, was_forced = analyzer.step(row, heads, last)
        steps["forced"].append(was_forced)
        steps["suppressed"].append(analyzer.suppressed and not was_forced)
        steps["text_position"].append(analyzer.text_position)
        steps["complete"].append(analyzer.complete)
        last = forced[i]
    return {"logits": _two_rows(logits), "attn": attn, **{k: np.asarray(v) for k, v in steps.items()}}


def alignment_steps(model, n_text: int, heads, logits, last_tokens) -> dict:
    """Multilingual: the AlignmentStreamAnalyzer over given steps: heads[i] [n_heads, rows,
    n_text] (step 0 may have several rows), logits[i] [V], last_tokens[i]; per step the
    logits it leaves, whether it forced the stop token, text_position and complete."""
    analyzer = _core.AlignmentAnalyzer(_component(model, "T3"), int(n_text))
    out = {"logits": [], "forced": [], "suppressed": [], "text_position": [], "complete": []}
    for h, lg, tok in zip(heads, logits, last_tokens, strict=True):
        lo, forced = analyzer.step(np.asarray(lg, np.float32), np.asarray(h, np.float32), int(tok))
        out["logits"].append(lo)
        out["forced"].append(forced)
        out["suppressed"].append(analyzer.suppressed and not forced)
        out["text_position"].append(analyzer.text_position)
        out["complete"].append(analyzer.complete)
    return {k: np.asarray(v) for k, v in out.items()}


def sampler_process(logits, history, *, temperature: float, top_k: int, top_p: float,
                    repetition_penalty: float, min_p: float = 0.0) -> np.ndarray:
    """One row of logits through the reference's processors (temperature, top-k, top-p,
    [min-p], repetition penalty); removed tokens are -inf."""
    return _core.sampler_process(np.asarray(logits, np.float32).tolist(), np.asarray(history, np.int32).tolist(),
                                 temperature, top_k, top_p, repetition_penalty, min_p)


def sampler_process_mtl(cond, uncond, history, *, cfg_weight: float, temperature: float, top_p: float,
                        repetition_penalty: float, min_p: float) -> np.ndarray:
    """Multilingual: guidance (cond + w (cond - uncond)), then the processors in `T3.inference`'s
    order (repetition penalty, temperature, min-p, top-p) on one row; removed tokens are -inf.
    The alignment analyzer, which sits between the two, is `alignment_steps`."""
    guided = _core.apply_guidance(np.asarray(cond, np.float32), np.asarray(uncond, np.float32), float(cfg_weight))
    return _core.sampler_process_mtl(guided, np.asarray(history, np.int32), temperature, top_p,
                                     repetition_penalty, min_p)


def s3gen_encode(model, speech_ids, voice=None) -> np.ndarray:
    """mu fed to the CFM, f32 [80, 2 x (prompt + speech tokens)]: the voice's prompt tokens
    then `speech_ids` through the encoder and encoder_proj. voice: None (built-in) or a
    mapping with `prompt_token`."""
    if voice is None:
        prompt = _component(model, "ModelFile").tensor_f32("voice.prompt_token").astype(np.int32)
    else:
        prompt = np.asarray(voice["prompt_token"], np.int32).reshape(-1)
    tokens = np.concatenate([prompt, np.asarray(speech_ids, np.int32).reshape(-1)])
    return _component(model, "S3GenEncoder").encode(tokens.tolist())


def hift_f0(model, mel) -> np.ndarray:
    """HiFT `f0_predictor` (ConvRNNF0Predictor) on mel f32 [80, T]: f0 f32 [T]."""
    return _component(model, "HiFT").f0(np.asarray(mel, np.float32))


def hift_decode(model, mel, source) -> np.ndarray:
    """`HiFTGenerator.decode(x=mel, s=source)`: mel f32 [80, T] and the excitation `source`
    (the `m_source` output, (1, 1, N) or (N,), N = 480 T for Turbo) to the waveform f32 [N],
    clamped to audio_limit as decode does, before any trim fade."""
    return _component(model, "HiFT").decode(np.asarray(mel, np.float32), np.asarray(source, np.float32))


def hift_excitation(model, f0, phases, noise) -> np.ndarray:
    """HiFT's m_source excitation for f0 [T] with the random parts given: phases [H]
    (the fundamental's ignored) and standard-normal noise [H, samples_per_frame x T]."""
    return _component(model, "HiFT").excitation(np.asarray(f0, np.float32).tolist(),
                                                np.asarray(phases, np.float32).tolist(),
                                                np.asarray(noise, np.float32).reshape(-1).tolist())


def hift_inference(model, mel, seed: int = 0) -> np.ndarray:
    """HiFTGenerator.inference: f0 -> excitation drawn from `seed` -> decode (no trim fade)."""
    return _component(model, "HiFT").inference(np.asarray(mel, np.float32), int(seed))


def _s3gen_voice(model, voice):
    """The CFM's prompt mel [T_prompt, 80] and x-vector [192]: the model's built-in voice or `voice`'s."""
    if voice is None:
        mf = _component(model, "ModelFile")
        return mf.tensor_f32("voice.prompt_feat"), mf.tensor_f32("voice.embedding")
    return voice["prompt_feat"], voice["embedding"]


def s3gen_mel(model, speech_ids, voice=None, x0=None, steps: int | None = None, *,
              guidance_batched: bool | None = None, replay_steps: bool | None = None) -> np.ndarray:
    """CFM output for the speech frames only, f32 [80, 2 x len(speech_ids)] (prompt frames
    removed, as `flow_inference` returns it): the voice's prompt tokens then `speech_ids`
    through the encoder, then the CFM sampler from `x0` f32 [80, 2 x (prompt + speech
    tokens)], the initial noise exactly as the estimator first receives it. voice: None
    (built-in) or a mapping with `prompt_token`, `prompt_feat` [T_prompt, 80] and
    `embedding` [192]. steps: Euler steps (None: the model's). The Multilingual model's
    standard CFM runs classifier-free guidance inside every step; guidance_batched picks
    one batch-of-two evaluation or two evaluations per step, replay_steps one graph for the
    pass or one step's graph computed again per step (None: the engine's choice)."""
    if x0 is None:
        raise ValueError("x0 is required")
    prompt_feat, embedding = _s3gen_voice(model, voice)
    mu = s3gen_encode(model, speech_ids, voice)
    prompt_feat = np.asarray(prompt_feat, np.float32).reshape(-1, mu.shape[0])
    cfm = _component(model, "S3GenCfm")
    saved = cfm.guidance_batched, cfm.replay_steps
    if guidance_batched is not None:
        cfm.guidance_batched = bool(guidance_batched)
    if replay_steps is not None:
        cfm.replay_steps = bool(replay_steps)
    try:
        return cfm.sample(mu, prompt_feat, np.asarray(embedding, np.float32).reshape(-1), np.asarray(x0, np.float32),
                          n_steps=int(steps or 0))
    finally:
        cfm.guidance_batched, cfm.replay_steps = saved


def s3gen_velocities(model, speech_ids, x, t: float, voice=None, r: float = 0.0) -> list[np.ndarray]:
    """One CFM estimator evaluation at time t on x f32 [80, 2 x (prompt + speech tokens)],
    conditioned as s3gen_mel conditions it: [v_cond] for a meanflow model (r its second
    time), [v_cond, v_uncond] (mu, speaker and prompt mel zero) for the standard CFM."""
    prompt_feat, embedding = _s3gen_voice(model, voice)
    mu = s3gen_encode(model, speech_ids, voice)
    return _component(model, "S3GenCfm").velocities(
        mu, np.asarray(prompt_feat, np.float32).reshape(-1, mu.shape[0]), np.asarray(embedding, np.float32).reshape(-1),
        np.asarray(x, np.float32), float(t), float(r))


def cfm_t_span(model, steps: int) -> np.ndarray:
    """The CFM's Euler times f32 [steps + 1]: linspace(0, 1) in float32, then for the standard
    CFM 1 - cos(t * 0.5 * pi) in float32, as CausalConditionalCFM.forward computes them."""
    return _component(model, "S3GenCfm").t_span(int(steps))


def fft(x, inverse: bool = False, single: bool = False) -> np.ndarray:
    """The engine's FFT (core/fft.h, any length) of a 1-D array: numpy.fft.fft(x), or with
    inverse the unscaled inverse (n * numpy.fft.ifft(x)); single runs it in float32 as
    HiFT's convolution tiles do. complex128."""
    x = np.asarray(x, np.complex128).reshape(-1)
    re, im = _core.fft(x.real.copy(), x.imag.copy(), bool(inverse), bool(single))
    return re + 1j * im


def mel_24k(model, wav24k) -> np.ndarray:
    """`s3gen.utils.mel.mel_spectrogram` of 24 kHz audio: the voice's prompt_feat, f32 [T, 80]."""
    return _component(model, "Mel24k").compute(np.asarray(wav24k, np.float32).reshape(-1).tolist())


def fbank80(model, wav16k) -> np.ndarray:
    """`torchaudio.compliance.kaldi.fbank(wav, num_mel_bins=80)` with its defaults, f32 [T, 80]
    (before CAMPPlus's mean subtraction)."""
    return _component(model, "KaldiFbank").compute(np.asarray(wav16k, np.float32).reshape(-1).tolist())


def ve_embed(model, wav16k) -> np.ndarray:
    """`VoiceEncoder.embeds_from_wavs([wav], sample_rate=16000)[0]`: f32 [256], L2-normalised."""
    return np.asarray(_component(model, "VoiceEncoder").embed(np.asarray(wav16k, np.float32).reshape(-1).tolist()),
                      np.float32)


def s3tok_logmel(model, wav16k) -> np.ndarray:
    """`S3Tokenizer.log_mel_spectrogram(wav)`: f32 [128, T]."""
    return _component(model, "S3TokLogMel").compute(np.asarray(wav16k, np.float32).reshape(-1).tolist())


def s3tok_tokens(model, wav16k, max_len: int | None = None) -> np.ndarray:
    """`S3Tokenizer.forward([wav16k], max_len=max_len)[0][0]`: the 25 Hz speech tokens, int32.
    max_len keeps the first 4 x max_len mel frames (prepare_conditionals passes T3's
    speech_cond_prompt_len)."""
    return _component(model, "S3Tokenizer").tokens(np.asarray(wav16k, np.float32).reshape(-1), max_len)


def s3tok_projection(model, wav16k, max_len: int | None = None) -> np.ndarray:
    """The tokenizer's FSQ input (project_down output, before tanh), f32 [n_tokens, 8]:
    for diagnosing token flips at rounding boundaries."""
    return _component(model, "S3Tokenizer").projection(np.asarray(wav16k, np.float32).reshape(-1), max_len)


def campplus_embed(model, wav16k) -> np.ndarray:
    """S3Gen's x-vector (`S3Gen.embed_ref`'s `speaker_encoder.inference([wav16k])`):
    Kaldi fbank, mean subtraction over time, CAMPPlus. f32 [192]."""
    return _component(model, "CampPlus").embed(np.asarray(wav16k, np.float32).reshape(-1).tolist())


def watermark(samples, sample_rate: int, model=None) -> np.ndarray:
    """`perth.PerthImplicitWatermarker().apply_watermark(samples, sample_rate=sample_rate)`:
    float32. `model`: a perth.gguf (default: engine_native.watermark.find_model())."""
    return _watermarker(model).apply(samples, int(sample_rate))


def watermark_bits(samples, sample_rate: int, model=None) -> np.ndarray:
    """`PerthImplicitWatermarker().get_watermark(samples, sample_rate, round=False)`: the
    detector's score in [0, 1], a 0-d float32 array as the reference returns it."""
    return _watermarker(model).bits(samples, int(sample_rate))


def watermark_frames(samples, sample_rate: int, model=None) -> dict:
    """The detector per frame: for each decoder branch (slow, normal, fast) the attention
    and mark outputs [frames] of its layers, the frame mask it averages them under, and the
    masked means; `score` is watermark_bits."""
    return _watermarker(model).decode(samples, int(sample_rate))


_watermarkers: dict[str, object] = {}


def _watermarker(model):
    from engine_native.watermark import Watermarker, find_model

    path = str(Path(os.fspath(model) if model is not None else find_model()).resolve())
    with _models_lock:
        if path not in _watermarkers:
            _watermarkers[path] = Watermarker(path)
        return _watermarkers[path]
