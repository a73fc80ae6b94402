"""The engine on a GPU (CUDA, Vulkan) against the same engine on the CPU.

The CPU engine is itself proven stage by stage against the PyTorch reference (test_t3_gpt2,
test_s3gen_encoder, test_s3gen_cfm, test_hift, ...), so a device stage that matches the CPU stage on the
same weights and inputs matches the reference within the sum of both tolerances.

Tests marked `gpu` need a GPU device (`engine_native.devices()`; CBS_TEST_DEVICE names one,
e.g. vulkan:0) and are skipped elsewhere (CI). The model: CBS_TEST_MODEL (a full-size Turbo
GGUF; the device machine makes one with benchmarks/model_skeleton.py), else the cached
random-weight Turbo F32 of the CPU tests.

Tolerances (rel = ||dev - cpu|| / ||cpu||): the device's flash attention rounds K, V and the
attention product through F16 and its matrix products accumulate in another order, so
F32 stages agree to about 1e-4..1e-3, not bit for bit. Every figure is printed.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest

from engine_native import _core

gpu = pytest.mark.gpu


def _rel(got, ref) -> tuple[float, float]:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)), float(np.abs(got - ref).max())


def _gpu_device() -> str | None:
    want = os.environ.get("CBS_TEST_DEVICE")
    devs = _core.devices()
    if want:
        return want if any(d["id"] == want for d in devs) else None
    return next((d["id"] for d in devs if d["type"] in ("gpu", "igpu")), None)


@pytest.fixture(scope="module")
def device():
    dev = _gpu_device()
    if dev is None:
        pytest.skip("no GPU device in this build or on this machine")
    return dev


def model_from_env(env: str, variant: str, size: str = "full") -> str:
    """The F32 model a GPU test runs: $env where set (the device machine converts its own),
    else the CPU tests' cached random-weight one."""
    path = os.environ.get(env)
    if path:
        return path
    from tests.helpers.models import model_path

    return str(model_path(variant, "f32", size=size))


@pytest.fixture(scope="module")
def model_file():
    return model_from_env("CBS_TEST_MODEL", "turbo")


@pytest.fixture(scope="module")
def pair(device, model_file):
    """(cpu ModelFile, device ModelFile) of the same file."""
    return _core.ModelFile(model_file, device="cpu"), _core.ModelFile(model_file, device=device)


def _ids(mf, n_text=40, n_speech=60, seed=0):
    rng = np.random.default_rng(seed)
    text = rng.integers(0, mf.get_int("chatterbox.t3.text_vocab"), n_text).tolist()
    start = mf.get_int("chatterbox.t3.start_speech_token")
    speech = [start] + rng.integers(0, mf.get_int("chatterbox.s3gen.speech_vocab"), n_speech - 1).tolist()
    return text, speech


# --- devices (every machine) ---------------------------------------------------------------------


def test_devices_list_the_cpu_with_its_memory_and_auto_is_the_first():
    devs = _core.devices()
    ids = [d["id"] for d in devs]
    assert "cpu" in ids and len(set(ids)) == len(ids)
    cpu = devs[ids.index("cpu")]
    assert cpu["backend"] == "CPU" and cpu["type"] == "cpu" and cpu["memory_total"] > 0
    print("devices:", ", ".join(f"{d['id']} ({d['description']})" for d in devs))
    info = _core.system_info()
    assert info["devices"] == devs and info["backend_dir"]


def test_an_unknown_device_is_refused_naming_the_devices_present(model_file):
    from engine_native import DeviceError, Engine

    with pytest.raises(DeviceError, match=r"'cuda:7' is not present \(devices: .*cpu"):
        Engine(model_file, device="cuda:7")
    with pytest.raises(DeviceError, match="not present"):
        _core.ModelFile(model_file, device="tpu")


# --- stage parity, device against CPU -------------------------------------------------------------


@gpu
def test_t3_logits_and_greedy_tokens_match_the_cpu(pair):
    cpu, dev = pair
    t_cpu, t_dev = _core.T3(cpu), _core.T3(dev)
    text, speech = _ids(cpu)
    a, b = t_cpu.logits(text, speech), t_dev.logits(text, speech)
    rel, mx = _rel(b, a)
    print(f"\nT3 logits {a.shape}: rel {rel:.2e}, max_abs {mx:.2e}")
    assert rel < 2e-3
    n = 100
    g_cpu = t_cpu.generate(text, n, top_k=1)
    g_dev = t_dev.generate(text, n, top_k=1)
    same = next((i for i, (x, y) in enumerate(zip(g_cpu, g_dev)) if x != y), min(len(g_cpu), len(g_dev)))
    print(f"T3 greedy: {same} of {len(g_cpu)} tokens identical")
    assert list(g_dev) == list(g_cpu)


@gpu
def test_s3gen_encoder_and_cfm_match_the_cpu(pair):
    cpu, dev = pair
    prompt = cpu.tensor_f32("voice.prompt_token").astype(np.int32).reshape(-1)
    _, speech = _ids(cpu, n_speech=80, seed=1)
    tokens = np.concatenate([prompt, np.asarray(speech[1:], np.int32)])
    mu_cpu = _core.S3GenEncoder(cpu).encode(tokens)
    mu_dev = _core.S3GenEncoder(dev).encode(tokens)
    rel, mx = _rel(mu_dev, mu_cpu)
    print(f"\nS3Gen encoder mu {mu_cpu.shape}: rel {rel:.2e}, max_abs {mx:.2e}")
    assert rel < 1e-3

    feat = cpu.tensor_f32("voice.prompt_feat").reshape(-1, mu_cpu.shape[0])
    emb = cpu.tensor_f32("voice.embedding").reshape(-1)
    x0 = np.random.default_rng(2).standard_normal(mu_cpu.shape, dtype=np.float32)
    mel_cpu = _core.S3GenCfm(cpu).sample(mu_cpu, feat, emb, x0)
    mel_dev = _core.S3GenCfm(dev).sample(mu_cpu, feat, emb, x0)
    rel, mx = _rel(mel_dev, mel_cpu)
    print(f"S3Gen CFM mel {mel_cpu.shape} ({_core.S3GenCfm(cpu).n_timesteps} steps): rel {rel:.2e}, max_abs {mx:.2e}")
    assert rel < 1e-3


@contextlib.contextmanager
def _device_filled(device, leave_bytes):
    """The CUDA device's free memory taken (cudaMalloc through the CUDA runtime the backend
    itself loaded) but `leave_bytes`, for the block's duration; skips elsewhere."""
    if not device.startswith("cuda"):
        pytest.skip("fills the device with cudaMalloc")
    import ctypes

    try:
        rt = ctypes.CDLL("libcudart.so.13")
    except OSError:
        pytest.skip("no CUDA runtime library to allocate with")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)) == 0
    hog = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(hog), ctypes.c_size_t(max(free.value - leave_bytes, 0))) == 0
    try:
        yield
    finally:
        rt.cudaFree(hog)


def _hift_stages(h, ref, mel):
    """f0 and decode of `h` against `ref` (the CPU kernels) on the same mel and excitation."""
    f0_ref = ref.f0(mel)
    src = ref.excitation_continue(f0_ref, ref.source_state(0))
    return _rel(h.f0(mel), f0_ref), _rel(h.decode(mel, src), ref.decode(mel, src)), float(np.abs(ref.decode(mel, src)).max())


def test_hift_graph_of_ggml_ops_matches_the_cpu_kernels_on_the_cpu(model_file):
    """The GPU's HiFT graph (standard ggml operations, hift_ggml.cpp) run on the CPU backend
    against the CPU kernels: the same function on every machine (CI included)."""
    mf = _core.ModelFile(model_file, device="cpu")
    ref, h = _core.HiFT(mf), _core.HiFT(mf, ggml_ops=True)
    for T in (40, 7):
        mel = np.random.default_rng(T).standard_normal((80, T), dtype=np.float32) * 0.5 - 5
        (rf, mf0), (rd, md), peak = _hift_stages(h, ref, mel)
        print(f"\nHiFT ggml ops on the CPU, {T} frames: f0 rel {rf:.2e} max_abs {mf0:.2e}; "
              f"decode rel {rd:.2e} max_abs {md:.2e} (peak {peak:.3f})")
        assert rf < 1e-4 and rd < 1e-4


@gpu
def test_hift_on_the_device_matches_the_cpu_kernels(pair):
    cpu, dev = pair
    ref, h = _core.HiFT(cpu), _core.HiFT(dev)
    assert h.device != "CPU" and not h.note
    # CUDA: full F32 products (patches/0002; measured rel ~1e-6). Vulkan's F32 products measured decode rel
    # 1.21e-3 (500 frames, 2026-11-30), like CUDA's TF32 (f0 3.35e-3 at 40 frames).
    f0_tol, dec_tol = (1e-4, 1e-4) if h.device.startswith("CUDA") else (5e-3, 2e-3)
    for T in (40, 7, 250):
        mel = np.random.default_rng(T).standard_normal((80, T), dtype=np.float32) * 0.5 - 5
        (rf, mf0), (rd, md), peak = _hift_stages(h, ref, mel)
        print(f"\nHiFT on {h.device}, {T} frames: f0 rel {rf:.2e} max_abs {mf0:.2e}; "
              f"decode rel {rd:.2e} max_abs {md:.2e} (peak {peak:.3f})")
        assert rf < f0_tol and rd < dec_tol
    # on_device=False: the CPU kernels (weights copied off the device), bit for bit
    mel = np.random.default_rng(3).standard_normal((80, 40), dtype=np.float32) * 0.5 - 5
    assert np.array_equal(_core.HiFT(dev, on_device=False).inference(mel, 0), ref.inference(mel, 0))


@gpu
def test_cuda_tiled_im2col_equals_ggmls_kernel(pair, monkeypatch):
    """patches/0005's 1-D im2col (tiles through shared memory) copies exactly what ggml-cuda's
    own kernel does (GGML_CUDA_IM2COL_LEGACY, read per call): HiFT's decode, whose
    convolutions cover strides 1, 4 and 15, dilations 1, 3, 5 and kernels 1 to 30, and the
    S3Gen encoder, bit for bit."""
    cpu, dev = pair
    h = _core.HiFT(dev)
    if not h.device.startswith("CUDA"):
        pytest.skip("CUDA only")
    mel = np.random.default_rng(11).standard_normal((80, 130), dtype=np.float32) * 0.5 - 5
    src = _core.HiFT(cpu).excitation_continue(_core.HiFT(cpu).f0(mel), _core.HiFT(cpu).source_state(0))
    enc = _core.S3GenEncoder(dev)
    tokens = np.random.default_rng(12).integers(0, 6561, 90).astype(np.int32)
    tiled = h.decode(mel, src), enc.encode(tokens)
    monkeypatch.setenv("GGML_CUDA_IM2COL_LEGACY", "1")
    legacy = h.decode(mel, src), enc.encode(tokens)
    for a, b in zip(tiled, legacy):
        assert np.array_equal(a, b)


@gpu
def test_hift_out_of_device_memory_mid_synthesis_falls_back_to_the_cpu(device, pair):
    """HiFT loaded on the device, then the device filled (cudaMalloc): the next decode runs
    out of memory there and goes on on the CPU kernels, with a RuntimeWarning."""
    cpu, dev = pair
    ref, h = _core.HiFT(cpu), _core.HiFT(dev)
    mel = np.random.default_rng(5).standard_normal((80, 300), dtype=np.float32) * 0.5 - 5
    with _device_filled(device, 64 << 20), pytest.warns(RuntimeWarning, match="runs on the CPU"):
        got = h.inference(mel, 0)
    print(f"\nHiFT fallback: {h.note}")
    assert h.device == "CPU" and "memory" in h.note
    assert np.array_equal(got, ref.inference(mel, 0))


@gpu
def test_cloning_encoders_match_the_cpu(pair):
    cpu, dev = pair
    t = np.arange(16000 * 3) / 16000
    wav = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    wav += np.random.default_rng(4).standard_normal(wav.size).astype(np.float32) * 0.01
    a, b = _core.CampPlus(cpu).embed(wav), _core.CampPlus(dev).embed(wav)
    rel, mx = _rel(b, a)
    print(f"\nCAMPPlus embedding: rel {rel:.2e}, max_abs {mx:.2e}")
    assert rel < 1e-3
    ta, tb = _core.S3Tokenizer(cpu).tokens(wav, None), _core.S3Tokenizer(dev).tokens(wav, None)
    same = int(np.sum(np.asarray(ta) == np.asarray(tb)))
    print(f"S3Tokenizer: {same} of {len(ta)} tokens identical")
    assert same >= 0.95 * len(ta)


# --- the public API on the device -------------------------------------------------------------------


@pytest.fixture(scope="module")
def engines(device, model_file):
    from engine_native import Engine

    return Engine(model_file, device="cpu"), Engine(model_file, device=device)


TEXT = "The quick brown fox jumps over the lazy dog. It was a bright cold day in April."


def check_synthesis_matches_the_cpu(engines, device, name: str, **opts) -> None:
    """Greedy synthesis of TEXT on the device against the CPU engine's (a model's own options)."""
    cpu, dev = engines
    assert dev.device == device and dev.info["device"] == device and not dev.device_note
    opts = dict(seed=5, top_k=1, max_tokens=80, **opts)
    a, b = cpu.synthesize(TEXT, **opts), dev.synthesize(TEXT, **opts)
    print(f"\n{name}synthesis: cpu {a.size} samples, {device} {b.size}")
    assert a.size == b.size, "the greedy tokens differ between the devices"
    rel, mx = _rel(b, a)
    print(f"{name}synthesis (greedy T3): rel {rel:.2e}, max_abs {mx:.2e}")
    assert rel < 1e-2


def check_stream_agrees_with_batch(engines, name: str, **opts) -> None:
    _, dev = engines
    opts = dict(seed=6, max_tokens=120, **opts)
    batch = dev.synthesize(TEXT, **opts)
    streamed = np.concatenate([c.samples for c in dev.stream(TEXT, **opts)])
    assert streamed.size == batch.size
    rel, mx = _rel(streamed, batch)
    print(f"\n{name}stream vs batch on the device: rel {rel:.4f}, max_abs {mx:.4f}")
    assert rel < 0.05  # the CPU's bound (test_engine, test_engine_mtl): the streamed CFM sees fewer tokens


@gpu
def test_synthesis_on_the_device_matches_the_cpu(engines, device):
    check_synthesis_matches_the_cpu(engines, device, "")


@gpu
def test_stream_agrees_with_batch_on_the_device(engines):
    check_stream_agrees_with_batch(engines, "")


@gpu
def test_a_device_out_of_memory_falls_back_to_the_cpu(device, model_file):
    """The device has no room left for the model (another allocation holds it): the engine
    says so and runs on the CPU. The memory is taken with cudaMalloc through the CUDA runtime
    the backend itself loaded."""
    from engine_native import Engine

    with _device_filled(device, 256 << 20), pytest.warns(RuntimeWarning, match="running on the CPU"):
        eng = Engine(model_file, device=device)
    print(f"\nfallback: {eng.device_note}")
    assert eng.device == "cpu" and device in eng.device_note
    assert eng.synthesize("Hello.", seed=1, max_tokens=20).size > 0


@gpu
def test_many_graphs_in_turn_replay_the_same_audio(engines, model_file, device):
    """An app session on the device: two engines (two models' graphs), batch, a stream left
    after its first chunk, a cloned voice, in turn for three rounds. With ggml-cuda's CUDA
    graphs on (the default) every graph that repeats is replayed from its capture: each round
    must give the first round's audio (the same seeds), and nothing may abort."""
    from engine_native import Engine

    _, a = engines
    b = Engine(model_file, device=device)
    t = np.arange(16000 * 7) / 16000  # cloning takes more than 5 s
    wav = (0.3 * np.sin(2 * np.pi * 150 * t) * (1 + 0.5 * np.sin(2 * np.pi * 2 * t))).astype(np.float32)
    wav += np.random.default_rng(8).standard_normal(wav.size).astype(np.float32) * 0.01
    rounds = []
    for _ in range(3):
        first = a.synthesize(TEXT, seed=3, max_tokens=60)
        for chunk in b.stream(TEXT, seed=4, max_tokens=80):
            head = chunk.samples
            break
        voice = b.voice_from_audio(wav, 16000, name="probe")
        cloned = a.synthesize("A cloned voice speaks.", voice, seed=2, max_tokens=40)
        rounds.append((first, head, cloned))
    for i, got in enumerate(rounds[1:], 2):
        for name, x, y in zip(("batch", "first chunk", "cloned"), got, rounds[0]):
            assert x.size == y.size, f"round {i}: {name} has another length"
            rel, mx = _rel(x, y)
            print(f"round {i} {name}: rel {rel:.2e}, max_abs {mx:.2e}")
            assert rel < 1e-5, f"round {i}: {name} differs from round 1"
