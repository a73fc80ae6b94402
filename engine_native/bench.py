"""A fixed, seeded speed workload for `chatterbox-studio bench`.

10 s of speech: T3 samples 250 tokens with the model's default sampling (random-weight
models never stop by themselves, so the count is fixed), S3Gen renders them with the
built-in voice, and a low-latency stream measures the time to first audio. Timings come
from the engine's own components, stage by stage, in one process. Then the user-level
figures: a whole streamed synthesis per preset beside a batch synthesis of the same text
(wall time over audio length), the cancel latency (Stop in the middle of a long S3Gen /
HiFT pass until the engine is free, and inside each stage: T3 prompt, encoder, CFM, HiFT),
the peak RSS of synthesis alone, and cloning a 10 s recording (its time, the peak RSS with
the cloning encoders loaded, and the RSS once they are released).
"""

from __future__ import annotations

import resource
import threading
import time

import numpy as np

from engine_native.engine import Engine, _CancelToken, _StreamVocoder
from engine_native.errors import Cancelled, EngineError

BENCH_TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet "
              "green forest before the sun goes down.")


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def run_bench(model_path, *, threads: int | None = None, n_tokens: int = 250, seed: int = 0,
              device: str = "auto", language: str | None = None, exaggeration: float | None = None,
              cfg_weight: float | None = None) -> dict:
    """`language`, `exaggeration`, `cfg_weight`: a Multilingual model's settings (None: its
    defaults, the language detected: English)."""
    t0 = time.perf_counter()
    engine = Engine(model_path, threads=threads, device=device)
    mtl = {"language": language, "exaggeration": exaggeration, "cfg_weight": cfg_weight}
    r = {"load_ms": _ms(t0), "variant": engine.variant, "quantization": engine.info["quantization"],
         "threads": threads or engine.info["threads"], "device": engine.device, "hift_device": engine.info["hift_device"]}
    if engine.device != "cpu":
        # A device's first graphs load kernels and build its caches: time the second run.
        engine.synthesize(BENCH_TEXT, seed=seed, max_tokens=min(n_tokens, 50), **mtl)
    voice = engine.builtin_voice
    _, p = engine._options(seed, {"max_tokens": n_tokens, "exaggeration": exaggeration, "cfg_weight": cfg_weight})
    ids = engine._text_ids(BENCH_TEXT, engine._language(language, BENCH_TEXT))
    r["text_ids"] = np.asarray(ids, np.int32)

    cancel = _CancelToken()
    t0 = time.perf_counter()
    stream, cache = engine._t3_session(ids, seed, p, voice, cancel)  # first prompt: also the voice's prefix
    r["t3_first_prompt_ms"] = _ms(t0)
    engine._end_session(stream, cache, cancel)
    vocoder = _StreamVocoder(engine._hift, seed)  # as the engine does: the HiFT noise is drawn while T3 runs
    t0 = time.perf_counter()
    stream, cache = engine._t3_session(ids, seed, p, voice, cancel)  # the voice's prefix is cached now
    r["t3_prompt_ms"] = _ms(t0)
    t0 = time.perf_counter()
    tokens = stream.next(n_tokens)
    t3_steps_ms = _ms(t0)
    engine._end_session(stream, cache, cancel)
    r["t3_tokens"] = len(tokens)
    r["t3_ms_per_token"] = t3_steps_ms / max(len(tokens), 1)
    r["t3_ms"] = r["t3_prompt_ms"] + t3_steps_ms

    speech = engine._speech_tokens(tokens, final=True)
    r["speech_ids"] = np.asarray([t for t in tokens if t < engine._speech_codes], np.int32)
    t0 = time.perf_counter()
    mu = engine._encoder.encode(np.concatenate([voice.prompt_token, np.asarray(speech, np.int32)]).tolist())
    r["encoder_ms"] = _ms(t0)
    rng = np.random.Generator(np.random.PCG64(seed))
    x0 = np.ascontiguousarray(rng.standard_normal((mu.shape[1], mu.shape[0]), dtype=np.float32).T)
    t0 = time.perf_counter()
    mel = engine._cfm.sample(mu, voice.prompt_feat, voice.embedding, x0, n_steps=p["cfm_steps"])
    r["cfm_ms"] = _ms(t0)
    t0 = time.perf_counter()
    wav, _ = vocoder.push(mel, final=True)
    r["hift_ms"] = _ms(t0)
    t0 = time.perf_counter()
    engine._hift.inference(mel, seed)  # the noise drawn only now, as before it was drawn ahead
    r["hift_noise_at_hift_ms"] = _ms(t0)
    r["audio_s"] = wav.size / engine.sample_rate
    r["generation_ms"] = r["t3_ms"] + r["encoder_ms"] + r["cfm_ms"] + r["hift_ms"]
    r["rtf"] = r["generation_ms"] / 1e3 / r["audio_s"]

    # First audio per preset: the voice's first stream with it (its cached stream prefix made
    # then), and the next one (the prefix cached, as the app readies it when a voice is chosen).
    for name, preset in (("ttfa_low_latency", engine.presets["low-latency"]), ("ttfa_default", engine.presets["quality"])):
        for when in ("first", "cached"):
            t0 = time.perf_counter()
            it = engine.stream(BENCH_TEXT, seed=seed, **preset, **mtl)
            next(it)
            r[f"{name}_{when}_ms"] = _ms(t0)
            it.close()
        r[f"{name}_ms"] = r[f"{name}_cached_ms"]

    # Whole syntheses of the same text and length: batch, then streamed with each preset.
    opts = {"seed": seed, "max_tokens": n_tokens, **mtl}
    t0 = time.perf_counter()
    batch = engine.synthesize(BENCH_TEXT, **opts)
    r["batch_ms"] = _ms(t0)
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
    return r


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def release_figures(engine: Engine) -> dict:
    """RSS now, and after the cloning encoders are released (what the engine's idle timer does)."""
    before = _rss_mb()
    freed = engine.release_voice_encoders()
    return {"rss_cloned_mb": before, "rss_released_mb": _rss_mb(), "released_mb": freed / 2**20}


class Watch:
    """Reports when a wrapped function starts and whether it finished or was cancelled."""

    def __init__(self):
        self.started, self.outcome = threading.Event(), []

    def wrap(self, fn):
        def run(*a, **k):
            self.started.set()
            try:
                out = fn(*a, **k)
            except Cancelled:
                self.outcome.append("cancelled")
                raise
            self.outcome.append("finished")
            return out
        return run


class WatchedComponent:
    """A native component whose `methods` are watched (pybind objects take no new attributes)."""

    def __init__(self, target, methods: tuple[str, ...], watch: Watch):
        self._target, self._methods, self._watch = target, methods, watch

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        return self._watch.wrap(attr) if name in self._methods else attr


def cancel_in(engine: Engine, stage: str, delay: float, text: str, seed: int, n_tokens: int) -> tuple[float, Watch, list]:
    """Streams `text` as one chunk of n_tokens and cancels `delay` s into `stage` ("t3_prompt",
    "encoder", "cfm", "hift"): (ms until the engine is free, the stage's Watch, the chunks got)."""
    w = Watch()
    if stage == "t3_prompt":
        engine._idle_caches.clear()  # a fresh KV cache: the prompt computes the voice's prefix too
        engine._t3_session = w.wrap(engine._t3_session)
        attr = None
    else:
        # A stream's passes take the voice prompt as a cached prefix (made on a first stream).
        attr, methods = {"encoder": ("_encoder", ("encode", "make_prefix", "encode_after_prefix")),
                         "cfm": ("_cfm", ("sample", "make_prefix", "sample_after_prefix")),
                         "hift": ("_hift", ("decode",))}[stage]
        component = getattr(engine, attr)
        setattr(engine, attr, WatchedComponent(component, methods, w))
    try:
        it = engine.stream(text, seed=seed, max_tokens=n_tokens, first_chunk_tokens=n_tokens, chunk_tokens=n_tokens)
        got, errors = [], []

        def consume():
            try:
                got.extend(it)
            except Exception as e:  # noqa: BLE001 - raised in the caller's thread below
                errors.append(e)

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        if not w.started.wait(600):
            raise EngineError(f"the stage {stage} never started")
        time.sleep(delay)
        t0 = time.perf_counter()
        it.cancel()
        with engine._t3_lock, engine._lock:  # the engine is free: the next caller gets in (T3 and S3Gen)
            ms = _ms(t0)
        t.join(120)
        if errors:
            raise errors[0]
    finally:
        if attr is None:
            del engine._t3_session
        else:
            setattr(engine, attr, component)
    return ms, w, got


def stream_cfm_seconds(engine: Engine, n_tokens: int) -> float:
    """Seconds of the CFM call a one-chunk stream of n_tokens makes with the built-in voice:
    against the voice prompt's cached prefix (prepared here first, as the app does), else over
    prompt + speech. Where to place a cancel inside it."""
    voice = engine.builtin_voice
    list(engine.prepare_stream(voice))
    n_mels = voice.prompt_feat.shape[1]
    if engine._prefixes:
        (_, prefix), = engine._prefixes.values()
        shape = (n_mels, n_tokens * engine._token_mel_ratio)
        run = lambda mu, x0: engine._cfm.sample_after_prefix(prefix, mu, x0)  # noqa: E731
    else:
        shape = (n_mels, voice.prompt_feat.shape[0] + n_tokens * engine._token_mel_ratio)
        run = lambda mu, x0: engine._cfm.sample(mu, voice.prompt_feat, voice.embedding, x0)  # noqa: E731
    mu = np.zeros(shape, np.float32)
    x0 = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    t0 = time.perf_counter()
    run(mu, x0)
    return time.perf_counter() - t0


def cancel_latency_by_stage(engine: Engine, seed: int, n_tokens: int, cfm_s: float) -> dict:
    """ms from Stream.cancel() to the engine being free, cancelling inside each stage: the T3
    prompt, the S3Gen encoder, the CFM in its first and last quarter (cfm_s: the stream's CFM
    call's length, stream_cfm_seconds), HiFT's decode. A stage that finished before the cancel reached it is marked."""
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
        started = threading.Event()
        mel = engine._mel

        def watched(*a, **k):
            started.set()
            return mel(*a, **k)

        engine._mel = watched
        try:
            it = engine.stream(BENCH_TEXT, seed=seed, max_tokens=n_tokens, first_chunk_tokens=n_tokens,
                               **(options or {}))
            t = threading.Thread(target=lambda: list(it), daemon=True)
            t.start()
            started.wait()
            time.sleep(delay)
            t0 = time.perf_counter()
            it.cancel()
            with engine._t3_lock, engine._lock:
                out.append(_ms(t0))
            t.join()
        finally:
            del engine._mel
    return out
