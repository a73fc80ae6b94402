"""A fixed, seeded speed workload for `chatterbox-studio bench`.

10 s of speech: T3 samples 250 tokens with the model's default sampling (random-weight
models never stop by themselves, so the count is fixed), S3Gen renders them with the
built-in voice, and a low-latency stream measures the time to first audio. Timings come
from the stages themselves (`Engine.profile`'s events, a `StageTimes` record), stage by
stage, in one process; the bench calls only public names (`Engine`, `Engine.stages`).
Then the user-level figures: a whole streamed synthesis per preset beside a batch synthesis
of the same text (wall time over audio length), the cancel latency (Stop in the middle of a
long S3Gen / HiFT pass until the engine is free, and inside each stage: T3 prompt, encoder,
CFM, HiFT), the peak RSS of synthesis alone, and cloning a 10 s recording (its time, the
peak RSS with the cloning encoders loaded, and the RSS once they are released).
"""

from __future__ import annotations

import resource
import threading
import time
from collections import defaultdict

import numpy as np

from engine_native import bounds
from engine_native.engine import Engine, StageTimes
from engine_native.errors import EngineError
from engine_native.gguf_header import read_header

BENCH_TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet "
              "green forest before the sun goes down.")


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


class StageWatch:
    """A hook for `Engine.profile`: when one of `stages` (None: any) first starts, how each of
    its runs ended ("finished", "cancelled", "failed") and their ms by stage."""

    def __init__(self, stages=None):
        self.stages = None if stages is None else set(stages)
        self.started = threading.Event()
        self.outcome: list[str] = []
        self.ms: dict[str, float] = defaultdict(float)

    def __call__(self, event) -> None:
        if self.stages is not None and event.stage not in self.stages:
            return
        if event.phase == "start":
            self.started.set()
        else:
            self.outcome.append(event.outcome)
            self.ms[event.stage] += event.ms


def run_bench(model_path, *, threads: int | None = None, n_tokens: int = 250, seed: int = 0,
              device: str = "auto", language: str | None = None, exaggeration: float | None = None,
              cfg_weight: float | None = None, watermark: bool = True, decoder=None) -> dict:
    """`language`, `exaggeration`, `cfg_weight`: a Multilingual model's settings (None: its
    defaults, the language detected: English). `watermark`: the engine marks its audio (the
    default), and first audio is timed without the mark too. `decoder`: Engine's."""
    t0 = time.perf_counter()
    engine = Engine(model_path, threads=threads, device=device, watermark=watermark, decoder=decoder)
    stages = engine.stages
    mtl = {"language": language, "exaggeration": exaggeration, "cfg_weight": cfg_weight}
    r = {"load_ms": _ms(t0), "variant": engine.variant, "quantization": engine.info["quantization"],
         "threads": threads or engine.info["threads"], "device": engine.device, "hift_device": engine.info["hift_device"],
         "decoder": engine.info["decoder"], "cfm_steps": engine.defaults["cfm_steps"]}
    if engine.device != "cpu":
        # A device's first graphs load kernels and build its caches: time the second run.
        engine.synthesize(BENCH_TEXT, seed=seed, max_tokens=min(n_tokens, 50), **mtl)
    voice = engine.builtin_voice
    r["text_ids"] = np.asarray(engine.text_tokens(BENCH_TEXT, language), np.int32)

    # T3: a first prompt (a fresh KV cache: the voice's prefix computed too), then a prompt
    # with the voice's prefix cached and n_tokens steps.
    stages.t3.release_idle_caches()
    first = StageWatch()
    with engine.profile(first):
        engine.speech_tokens(BENCH_TEXT, seed=seed, max_tokens=1, **mtl)
    r["t3_first_prompt_ms"] = first.ms["t3_prompt"]
    vocoder = stages.vocoder.stream(seed)  # as the engine does: the HiFT noise is drawn while T3 runs
    t3 = StageWatch()
    with engine.profile(t3):
        tokens = engine.speech_tokens(BENCH_TEXT, seed=seed, max_tokens=n_tokens, **mtl)[0]
    r["t3_prompt_ms"] = t3.ms["t3_prompt"]
    r["t3_tokens"] = len(tokens)
    r["t3_ms_per_token"] = t3.ms["t3_steps"] / max(len(tokens), 1)
    r["t3_ms"] = r["t3_prompt_ms"] + t3.ms["t3_steps"]

    # S3Gen and HiFT on those tokens, a whole sentence's pass (the reference's).
    flow = stages.flow
    r["speech_ids"] = np.asarray(flow.speech_input(tokens, final=False), np.int32)
    times = StageTimes()
    mel = flow.mel(flow.speech_input(tokens, final=True), voice, seed, final=True, times=times)
    wav = vocoder.push(mel, final=True, times=times)
    r["encoder_ms"], r["cfm_ms"], r["hift_ms"] = times.encoder_ms, times.cfm_ms, times.hift_ms
    t0 = time.perf_counter()
    stages.vocoder.hift.inference(mel, seed)  # the noise drawn only now, as before it was drawn ahead
    r["hift_noise_at_hift_ms"] = _ms(t0)
    r["audio_s"] = wav.size / engine.sample_rate
    r["generation_ms"] = r["t3_ms"] + r["encoder_ms"] + r["cfm_ms"] + r["hift_ms"]
    r["rtf"] = r["generation_ms"] / 1e3 / r["audio_s"]
    speech_frames = mel.shape[1]

    # First audio per preset: the voice's first stream with it (its cached stream prefix made
    # then), and the next one (the prefix cached, as the app readies it when a voice is chosen).
    # Where the engine marks its audio, also the cached stream without the mark, in turn with
    # it (the machine's drift falls on both).
    r["watermark"] = engine.watermark
    for name, preset in (("ttfa_low_latency", engine.presets["low-latency"]), ("ttfa_default", engine.presets["quality"])):
        for when in ("first", "cached") + (("unmarked", "cached", "unmarked") if watermark else ()):
            engine.watermark = watermark and when != "unmarked"
            t0 = time.perf_counter()
            it = engine.stream(BENCH_TEXT, seed=seed, **preset, **mtl)
            next(it)
            ms = _ms(t0)
            r[f"{name}_{when}_ms"] = min(ms, r.get(f"{name}_{when}_ms", ms)) if when != "first" else ms
            it.close()
        engine.watermark = watermark
        r[f"{name}_ms"] = r[f"{name}_cached_ms"]

    # Whole syntheses of the same text and length: batch, then streamed with each preset.
    opts = {"seed": seed, "max_tokens": n_tokens, **mtl}
    marking = StageWatch(("watermark",))
    t0 = time.perf_counter()
    with engine.profile(marking):
        batch = engine.synthesize(BENCH_TEXT, **opts)
    r["batch_ms"] = _ms(t0)
    r["batch_watermark_ms"] = marking.ms["watermark"]
    r["batch_audio_s"] = batch.size / engine.sample_rate
    for name, preset in (("low_latency", engine.presets["low-latency"]), ("quality", engine.presets["quality"])):
        # The voice readied as the app does when it is chosen (a batch synthesis freed it).
        list(engine.prepare_stream(voice, **{k: v for k, v in {**opts, **preset}.items() if k != "seed"}))
        t0 = time.perf_counter()
        n = sum(c.samples.size for c in engine.stream(BENCH_TEXT, **opts, **preset))
        r[f"stream_{name}_ms"] = _ms(t0)
        r[f"stream_{name}_rtf"] = r[f"stream_{name}_ms"] / 1e3 / (n / engine.sample_rate)
    # The quality stream again, its voice's stream prefix made first (a voice's first stream).
    engine.release_stream_prefixes()
    t0 = time.perf_counter()
    sum(c.samples.size for c in engine.stream(BENCH_TEXT, **opts, **engine.presets["quality"]))
    r["stream_quality_first_ms"] = _ms(t0)

    # Synthesis only (batch and both streams; the cloning encoders are not loaded), taken before
    # the cancel tests, whose abandoned sessions overlap the next ones' (a stress of Stop).
    r["peak_rss_mb"] = _peak_rss_mb()
    r["cancel_ms"] = cancel_latency(engine, seed, n_tokens, mtl)
    r["cancel_stage_ms"] = cancel_latency_by_stage(engine, seed, n_tokens, stream_cfm_seconds(engine, n_tokens))
    r["peak_rss_cancel_mb"] = _peak_rss_mb()

    # Cloning a 10 s recording: the batch synthesis above, cut or repeated to 10 s.
    rec = np.resize(batch, 10 * engine.sample_rate).astype(np.float32)
    r["clone_wav"] = rec
    # The first clone loads the cloning encoders (released when idle); the second has them,
    # as the reference always does.
    t0 = time.perf_counter()
    try:
        engine.voice_from_audio(rec, engine.sample_rate)
        r["clone_first_ms"] = _ms(t0)
        t0 = time.perf_counter()
        engine.voice_from_audio(rec, engine.sample_rate)
        r["clone_ms"] = _ms(t0)
    except EngineError as e:  # a random-weight model's speech may not pass the speech check
        r["clone_error"] = str(e)
    r["peak_rss_clone_mb"] = _peak_rss_mb()
    r.update(release_figures(engine))
    if engine.device == "cpu":  # last: its 1 GiB read buffer must not reach the RSS figures above
        r.update(bound_figures(engine, r, voice, speech_frames))
    return r


def bound_figures(engine: Engine, r: dict, voice, speech_frames: int) -> dict:
    """The host's read bandwidth and f32 FMA rate, measured now, and the least time they allow
    a T3 step and the CFM's passes of this run in f32 (engine_native/bounds.py)."""
    config, cfm = engine.stages.config, engine.stages.flow.cfm
    header, s3gen_header = read_header(engine.path), read_header(engine.info["decoder"] or engine.path)
    rates = bounds.host_rates(r["threads"])
    rows = 2 if config.mtl else 1  # the Multilingual T3 samples with guidance: two rows a step
    positions = bounds.t3_prompt_positions(header, voice.cond_prompt_speech_tokens.size, len(r["text_ids"]))
    frames = engine.stages.flow.prompt(voice, None)[1].shape[0] + speech_frames
    passes = cfm.n_timesteps * (2 if cfm.guided else 1)
    step_bytes, cfm_macs = bounds.t3_step_bytes(header), bounds.cfm_macs_per_pass(s3gen_header, frames) * passes
    return {"host_read_gbps": rates["read_gbps"], "host_fma_gmacs": rates["fma_gmacs"],
            "host_fma_lanes": rates["fma_lanes"], "t3_step_mb": step_bytes / 1e6,
            "t3_kv_mb": bounds.t3_kv_bytes_per_position(header, rows) * (positions + r["t3_tokens"] / 2) / 1e6,
            "t3_bound_ms": bounds.read_bound_ms(step_bytes, rates), "cfm_gmacs": cfm_macs / 1e9,
            "cfm_frames": frames, "cfm_passes": passes, "cfm_bound_ms": bounds.fma_bound_ms(cfm_macs, rates)}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def release_figures(engine: Engine) -> dict:
    """RSS now, and after the cloning encoders are released (what the engine's idle timer does)."""
    before = _rss_mb()
    freed = engine.release_voice_encoders()
    return {"rss_cloned_mb": before, "rss_released_mb": _rss_mb(), "released_mb": freed / 2**20}


def _cancel_when_started(engine: Engine, it, watch: StageWatch, delay: float, what: str) -> tuple[float, list]:
    """Consumes `it` on a thread, cancels it `delay` s after the watched stage first started:
    (ms from the cancel until the engine is free, the chunks got)."""
    got, errors = [], []

    def consume():
        try:
            got.extend(it)
        except Exception as e:  # noqa: BLE001 - raised in the caller's thread below
            errors.append(e)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    if not watch.started.wait(600):
        raise EngineError(f"the stage {what} never started")
    time.sleep(delay)
    t0 = time.perf_counter()
    it.cancel()
    with engine.stages.exclusive():  # the engine is free: the next caller gets in (T3 and S3Gen)
        ms = _ms(t0)
    t.join(120)
    if errors:
        raise errors[0]
    return ms, got


def cancel_in(engine: Engine, stage: str, delay: float, text: str, seed: int, n_tokens: int) -> tuple[float, StageWatch, list]:
    """Streams `text` as one chunk of n_tokens and cancels `delay` s into `stage` ("t3_prompt",
    "encoder", "cfm", "hift"): (ms until the engine is free, the stage's StageWatch, the chunks got)."""
    watch = StageWatch({stage})
    if stage == "t3_prompt":
        engine.stages.t3.release_idle_caches()  # a fresh KV cache: the prompt computes the voice's prefix too
    with engine.profile(watch):
        it = engine.stream(text, seed=seed, max_tokens=n_tokens, first_chunk_tokens=n_tokens, chunk_tokens=n_tokens)
        ms, got = _cancel_when_started(engine, it, watch, delay, stage)
    return ms, watch, got


def stream_cfm_seconds(engine: Engine, n_tokens: int) -> float:
    """Seconds of the CFM call a one-chunk stream of n_tokens makes with the built-in voice:
    against the voice prompt's cached prefix (prepared here first, as the app does), else over
    prompt + speech. Where to place a cancel inside it."""
    voice, flow = engine.builtin_voice, engine.stages.flow
    list(engine.prepare_stream(voice))
    times = StageTimes()
    flow.mel(flow.speech_input([0] * n_tokens, final=True), voice, 0, final=True,
             cached_prompt=flow.prefix_usable(), times=times)
    return times.cfm_ms / 1e3


def cancel_latency_by_stage(engine: Engine, seed: int, n_tokens: int, cfm_s: float) -> dict:
    """ms from Stream.cancel() to the engine being free, cancelling inside each stage: the T3
    prompt, the S3Gen encoder, the CFM in its first and last quarter (cfm_s: the stream's CFM
    call's length, stream_cfm_seconds), HiFT. A stage that finished before the cancel reached it is marked."""
    out = {}
    for name, stage, delay in (("T3 prompt", "t3_prompt", 0.05), ("S3Gen encoder", "encoder", 0.05),
                               ("CFM, early", "cfm", 0.25 * cfm_s), ("CFM, late", "cfm", 0.75 * cfm_s),
                               ("HiFT", "hift", 0.05)):
        ms, w, _ = cancel_in(engine, stage, delay, BENCH_TEXT, seed, n_tokens)
        out[name] = (ms, w.outcome[-1] if w.outcome else "not reached")
    return out


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cancel_latency(engine: Engine, seed: int, n_tokens: int, options=None, delays=(0.1, 0.4, 0.8)) -> list[float]:
    """ms from Stream.cancel() to the engine being free (the next caller holds its lock), for a
    cancel `delay` seconds after a long S3Gen pass (a whole sentence in one chunk) started."""
    out = []
    for delay in delays:
        watch = StageWatch({"s3gen"})
        with engine.profile(watch):
            it = engine.stream(BENCH_TEXT, seed=seed, max_tokens=n_tokens, first_chunk_tokens=n_tokens,
                               **(options or {}))
            out.append(_cancel_when_started(engine, it, watch, delay, "s3gen")[0])
    return out
