"""Per-stage device timings the full bench does not split out (the device tool's run):
T3 ms/token (greedy and with the default sampler), the S3Gen encoder and CFM and HiFT's
f0, excitation and decode, each timed on its first call at the size (allocation and kernel
loading included, as the bench's one pass) and then steady (median), the CFM with its q, k,
v products fused and not (CBS_CFM_QKV), its attention at f32 and at the model's precision
(CBS_CFM_ATTENTION_F32), HiFT on the device against the CPU kernels, 250
speech tokens = 500 mel frames (10 s). Prints numbers, asserts nothing.

    python benchmarks/gpu_probe.py MODEL.gguf cuda:0 [--profile | --hift]

--profile (with CBS_PROFILE_OPS=1 in the environment): one encoder, CFM and HiFT decode
pass, each graph's time by operation kind on stderr (core/graph_runner.cpp), nothing else.
--hift: only HiFT as the bench times it, split into f0, excitation and decode, and the
decode with ggml-cuda's im2col kernel against patches/0005's (the full probe ends with it).
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from engine_native import _core


def t3_ms_per_token(t3, text, n=101, **kw) -> float:
    t3.generate(text, 2, 0, **kw)
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        t3.generate(text, 1, 0, **kw)
        t1 = time.perf_counter()
        got = len(t3.generate(text, n, 0, **kw)) - 1
        t2 = time.perf_counter()
        best = min(best, ((t2 - t1) - (t1 - t0)) / max(got, 1))
    return best * 1e3


def median_ms(f, reps=5) -> float:
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def first_and_steady(f, reps=3) -> tuple[float, float]:
    t0 = time.perf_counter()
    f()
    first = (time.perf_counter() - t0) * 1e3
    return first, median_ms(f, reps)


def s3gen_inputs(mf, n_speech=250):
    prompt = mf.tensor_f32("voice.prompt_token").astype(np.int32).reshape(-1)
    speech = np.random.default_rng(1).integers(0, mf.get_int("chatterbox.s3gen.speech_vocab"), n_speech).astype(np.int32)
    return np.concatenate([prompt, speech])


def s3gen_stages(mf, profile=False) -> None:
    """Encoder, CFM (q, k, v fused and not), HiFT f0 / excitation / decode: first call and steady."""
    import os

    tokens = s3gen_inputs(mf)
    enc = _core.S3GenEncoder(mf)
    if profile:
        mu = enc.encode(tokens)
    else:
        # Where the first pass at a new size goes: a short input first (the process's first
        # graph), then the long one (compute buffers grown, new shapes, the position table
        # grown), then a fresh encoder at the long size (new buffers and table, shapes seen).
        short = np.concatenate([tokens[: len(tokens) - 250], tokens[-50:]])
        t_short, _ = first_and_steady(lambda: enc.encode(short), reps=1)
        first, steady = first_and_steady(lambda: enc.encode(tokens))
        fresh, _ = first_and_steady(lambda: _core.S3GenEncoder(mf).encode(tokens), reps=1)
        mu = enc.encode(tokens)
        print(f"  S3Gen encoder ({len(short)} tokens first in the process {t_short:7.1f} ms) ({len(tokens)} tokens)"
              f"  first {first:7.1f} ms  steady {steady:7.1f} ms  fresh encoder (load + first) {fresh:7.1f} ms")
        # S3GenEncoder.reserve (what the engine does at load on a GPU): buffers and table ahead
        for n in (len(tokens), 750, 1250):
            e2 = _core.S3GenEncoder(mf)
            t0 = time.perf_counter()
            nbytes = e2.reserve(n)
            t1 = time.perf_counter()
            e2.encode(tokens)
            t2 = time.perf_counter()
            print(f"  S3Gen encoder reserved for {n} tokens: {nbytes / 2**20:6.0f} MiB, {1e3 * (t1 - t0):5.1f} ms;"
                  f" then first encode of {len(tokens)} tokens {1e3 * (t2 - t1):6.1f} ms")
    feat = mf.tensor_f32("voice.prompt_feat").reshape(-1, mu.shape[0])
    emb = mf.tensor_f32("voice.embedding").reshape(-1)
    x0 = np.random.default_rng(2).standard_normal(mu.shape, dtype=np.float32)
    mels = {}
    for fuse in (("1",) if profile else ("1", "0")):
        os.environ["CBS_CFM_QKV"] = fuse  # read when the estimator is made
        cfm = _core.S3GenCfm(mf)
        os.environ.pop("CBS_CFM_QKV")
        if profile:
            mels[fuse] = cfm.sample(mu, feat, emb, x0)
            break
        first, steady = first_and_steady(lambda: cfm.sample(mu, feat, emb, x0))
        mels[fuse] = cfm.sample(mu, feat, emb, x0)
        print(f"  S3Gen CFM ({mu.shape[1]} frames, q k v {'fused' if fuse == '1' else 'apart'})"
              f"  first {first:7.1f} ms  steady {steady:7.1f} ms")
    if not profile:
        a, b = mels["1"].astype(np.float64), mels["0"].astype(np.float64)
        print(f"  CFM mel, q k v fused vs apart: rel {np.linalg.norm(a - b) / np.linalg.norm(b):.2e}")
        # The attention's two products at the device's default precision (TF32 on CUDA) for a
        # model whose matrices are not f32, against f32 (CBS_CFM_ATTENTION_F32=1, read when the
        # estimator is made): alternating, the same inputs.
        os.environ["CBS_CFM_ATTENTION_F32"] = "1"
        cfms = {"f32": _core.S3GenCfm(mf)}
        os.environ.pop("CBS_CFM_ATTENTION_F32")
        cfms["default"] = _core.S3GenCfm(mf)
        times = {name: [] for name in cfms}
        for _ in range(3):
            for name, c in cfms.items():
                t0 = time.perf_counter()
                mels[name] = c.sample(mu, feat, emb, x0)
                times[name].append(1e3 * (time.perf_counter() - t0))
        a, b = mels["default"].astype(np.float64), mels["f32"].astype(np.float64)
        print(f"  CFM attention products f32 / the model's default: {min(times['f32']):7.1f} / "
              f"{min(times['default']):7.1f} ms (best of 3, alternating); mel rel "
              f"{np.linalg.norm(a - b) / np.linalg.norm(b):.2e}, max_abs {np.abs(a - b).max():.2e}")
    mel = np.ascontiguousarray(mels["1"])
    h = _core.HiFT(mf)
    if profile:
        f0 = h.f0(mel)
        h.decode(mel, h.excitation_continue(f0, h.source_state(0)))
        return
    f0_first, f0_steady = first_and_steady(lambda: h.f0(mel))
    f0 = h.f0(mel)
    ex_first, ex_steady = first_and_steady(lambda: h.excitation_continue(f0, h.source_state(0)))
    src = h.excitation_continue(f0, h.source_state(0))
    de_first, de_steady = first_and_steady(lambda: h.decode(mel, src))
    print(f"  HiFT ({mel.shape[1]} frames) f0 first {f0_first:6.1f} / steady {f0_steady:6.1f} ms, excitation (noise drawn"
          f" now) {ex_first:6.1f} / {ex_steady:6.1f} ms, decode {de_first:6.1f} / {de_steady:6.1f} ms")


def hift_push_split(mf, n_frames=500, reps=5) -> None:
    """HiFT as the bench times it (a vocoder stream's push, final, noise drawn ahead), its
    parts apart: f0, excitation_continue, decode; and decode with ggml-cuda's own im2col
    kernel (GGML_CUDA_IM2COL_LEGACY, read per call; patches/0005) against the tiled one,
    alternating in one process."""
    import os

    from engine_native.pipeline.concurrency import FairLock
    from engine_native.pipeline.profile import Profiler
    from engine_native.pipeline.vocoder_stream import Vocoder

    mel = np.random.default_rng(5).standard_normal((80, n_frames), dtype=np.float32) * 0.5 - 5
    h = _core.HiFT(mf)
    vocoder = Vocoder(h, 0, FairLock(), Profiler())
    parts = {"push": [], "f0": [], "excitation": [], "decode": []}
    for _ in range(reps + 1):
        v = vocoder.stream(0)
        time.sleep(0.3)  # the noise drawn ahead, as while T3 runs
        t0 = time.perf_counter()
        v.push(mel, final=True)
        t1 = time.perf_counter()
        st = h.source_state(0)
        time.sleep(0.3)
        t2 = time.perf_counter()
        f0 = h.f0(mel)
        t3 = time.perf_counter()
        src = h.excitation_continue(f0, st)
        t4 = time.perf_counter()
        h.decode(mel, src)
        t5 = time.perf_counter()
        for k, a, b in (("push", t0, t1), ("f0", t2, t3), ("excitation", t3, t4), ("decode", t4, t5)):
            parts[k].append((b - a) * 1e3)
    med = {k: statistics.median(v[1:]) for k, v in parts.items()}
    print(f"  HiFT push ({n_frames} frames, as the bench) {med['push']:6.1f} ms = f0 {med['f0']:5.1f} + excitation "
          f"{med['excitation']:5.1f} + decode {med['decode']:5.1f} ms (medians of {reps}; first push {parts['push'][0]:.1f})")
    src = h.excitation_continue(h.f0(mel), h.source_state(0))
    ab = {"tiled": [], "legacy": []}
    outs = {}
    for i in range(2 * reps + 2):
        name = "legacy" if i % 2 else "tiled"
        if name == "legacy":
            os.environ["GGML_CUDA_IM2COL_LEGACY"] = "1"
        t0 = time.perf_counter()
        outs[name] = h.decode(mel, src)
        ab[name].append((time.perf_counter() - t0) * 1e3)
        os.environ.pop("GGML_CUDA_IM2COL_LEGACY", None)
    a, b = outs["tiled"].astype(np.float64), outs["legacy"].astype(np.float64)
    print(f"  HiFT decode, im2col tiled {statistics.median(ab['tiled'][1:]):6.1f} ms vs ggml's "
          f"{statistics.median(ab['legacy'][1:]):6.1f} ms (alternating, medians of {reps}); outputs max_abs "
          f"{np.abs(a - b).max():.2e}")


def main() -> None:
    path, dev = sys.argv[1], sys.argv[2]
    mf = _core.ModelFile(path, device=dev)
    if "--hift" in sys.argv[3:]:
        print(f"probe {path} on {dev}: HiFT")
        hift_push_split(mf)
        return
    if "--profile" in sys.argv[3:]:
        print(f"profile {path} on {dev} (per-operation figures on stderr)")
        s3gen_stages(mf, profile=True)
        return
    print(f"probe {path} on {dev}")
    s3gen_stages(mf)
    t3 = _core.T3(mf)
    text = list(range(1000, 1040))
    print(f"probe {path} on {dev}")
    print(f"  T3 ms/token greedy          {t3_ms_per_token(t3, text, top_k=1):7.2f}")
    print(f"  T3 ms/token default sampler {t3_ms_per_token(t3, text):7.2f}")
    mel = np.random.default_rng(0).standard_normal((80, 500), dtype=np.float32) * 0.5 - 5
    h, ref = _core.HiFT(mf), _core.HiFT(mf, on_device=False)
    f0 = ref.f0(mel)
    src = ref.excitation_continue(f0, ref.source_state(0))
    for name, x in (("device " + h.device, h), ("CPU kernels", ref)):
        print(f"  HiFT {name:22s} f0 {median_ms(lambda x=x: x.f0(mel)):7.1f} ms  decode {median_ms(lambda x=x: x.decode(mel, src)):7.1f} ms"
              f"  inference {median_ms(lambda x=x: x.inference(mel, 0)):7.1f} ms")
    d, r = h.decode(mel, src), ref.decode(mel, src)
    print(f"  HiFT decode 500 frames, device vs CPU kernels: rel {np.linalg.norm(d - r) / np.linalg.norm(r):.2e}, "
          f"max_abs {np.abs(d - r).max():.2e}")
    # 24 s: over 65535 frames at the last stage (ggml-cuda launches some ops a block row per frame)
    mel = np.random.default_rng(4).standard_normal((80, 1200), dtype=np.float32) * 0.5 - 5
    src = ref.excitation_continue(ref.f0(mel), ref.source_state(0))
    t0 = time.perf_counter()
    d = h.decode(mel, src)
    t1 = time.perf_counter()
    r = ref.decode(mel, src)
    print(f"  HiFT decode 1200 frames on the device {1e3 * (t1 - t0):.1f} ms (first at the size), vs CPU kernels: "
          f"rel {np.linalg.norm(d - r) / np.linalg.norm(r):.2e}, max_abs {np.abs(d - r).max():.2e}")
    hift_push_split(mf)


if __name__ == "__main__":
    main()
