"""Which stage of a model fails on a device: each stage in a process of its own (a device
error aborts the process), with CUDA_LAUNCH_BLOCKING=1 so that the error names the failing
operation, and the end of its output.

    python benchmarks/gpu_stages.py MODEL.gguf cuda:0            # every stage, one process each
    python benchmarks/gpu_stages.py MODEL.gguf cuda:0 t3_logits  # one stage, in this process
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _inputs(mf, np):
    rng = np.random.default_rng(0)
    text = rng.integers(3, mf.get_int("chatterbox.t3.text_vocab"), 20).tolist()
    start = mf.get_int("chatterbox.t3.start_speech_token")
    return text, [start, *rng.integers(0, 6561, 30).tolist()]


def run_stage(model: str, device: str, stage: str) -> str:
    import numpy as np

    from engine_native import _core

    mf = _core.ModelFile(model, device=device)
    text, speech = _inputs(mf, np)
    if stage == "t3_conditioning":
        out = _core.T3(mf).mtl_conditioning() if _core.T3(mf).arch == "llama" else np.zeros(1)
    elif stage == "t3_logits":
        out = _core.T3(mf).logits(text, speech)
    elif stage == "t3_generate":
        out = np.asarray(_core.T3(mf).generate(text, 20, 0, top_k=1), np.float32)
    elif stage in ("encoder", "cfm"):
        prompt = mf.tensor_f32("voice.prompt_token").astype(np.int32).reshape(-1)
        mu = _core.S3GenEncoder(mf).encode(np.concatenate([prompt, np.asarray(speech[1:], np.int32)]))
        out = mu
        if stage == "cfm":
            feat = mf.tensor_f32("voice.prompt_feat").reshape(-1, mu.shape[0])
            x0 = np.random.default_rng(1).standard_normal(mu.shape, dtype=np.float32)
            out = _core.S3GenCfm(mf).sample(mu, feat, mf.tensor_f32("voice.embedding").reshape(-1), x0)
    elif stage == "hift":
        mel = np.random.default_rng(2).standard_normal((80, 100), dtype=np.float32) * 0.5 - 5
        out = _core.HiFT(mf).inference(mel, 0)
    elif stage == "synthesize":
        from engine_native import Engine

        eng = Engine(model, device=device)
        lang = {"language": "en"} if eng.variant == "mtl" else {}
        out = eng.synthesize("The quick brown fox jumps over the lazy dog.", seed=1, max_tokens=40, **lang)
    else:
        raise SystemExit(f"unknown stage {stage}")
    out = np.asarray(out, np.float64)
    return f"shape {out.shape}, finite {bool(np.isfinite(out).all())}, rms {float(np.sqrt((out ** 2).mean())):.4g}"


STAGES = ("t3_conditioning", "t3_logits", "t3_generate", "encoder", "cfm", "hift", "synthesize")


def main() -> int:
    model, device = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        t0 = time.perf_counter()
        print(f"{sys.argv[3]}: {run_stage(model, device, sys.argv[3])} ({time.perf_counter() - t0:.1f} s)", flush=True)
        return 0
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    failed = 0
    for stage in STAGES:
        res = subprocess.run([sys.executable, os.path.abspath(__file__), model, device, stage], env=env,
                             capture_output=True, text=True, timeout=300)
        if res.returncode == 0:
            print(res.stdout.strip().splitlines()[-1], flush=True)
            continue
        failed += 1
        lines = [ln for ln in (res.stdout + res.stderr).splitlines() if not ln.startswith(("/", "python3"))]
        print(f"{stage}: exit {res.returncode}\n    " + "\n    ".join(lines[-12:]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
