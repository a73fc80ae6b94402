"""`chatterbox-studio bench`: the engine's speed on a fixed 10 s workload, optionally beside
the PyTorch reference on the same weights, threads and token count (in the same run)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


# What `--cpu avx2` sets: the engine's kernels as on a CPU with AVX2 and FMA only (most desktop
# and laptop CPUs; AMD before Zen 4), on a machine that has more. ggml's own CPU module is
# forced to its Haswell variant where the build has variants (CBS_CPU_ALL_VARIANTS=ON, the
# wheel's default); a native build keeps its own, which the report says. The reference is
# held to AVX2 too (PyTorch's ATen kernels, oneDNN, MKL).
AVX2_ENV = {"CBS_Q4_KERNEL": "avx2", "CBS_Q8_TILE": "avx2", "CBS_AMX": "0", "CBS_VNNI": "avx2", "CBS_HIFT_AVX512": "0",
            "CBS_OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_CORETYPE": "Haswell",
            "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
FORCED_MARK = "CBS_BENCH_CPU"


def _force_avx2() -> None:
    """Runs this command again with AVX2_ENV: the kernels are chosen as the native module
    loads, so the variables must be there before it is."""
    env = dict(os.environ, **AVX2_ENV, **{FORCED_MARK: "avx2"})
    from importlib.util import find_spec

    spec = find_spec("engine_native")
    folder = Path(spec.origin).parent if spec and spec.origin else None
    if folder is not None and (folder / "libggml-cpu-haswell.so").exists():
        env["CBS_CPU_VARIANT"] = "haswell"
    os.execve(sys.executable, [sys.executable, "-m", "app", *sys.argv[1:]], env)


def _kernels_line() -> str:
    """The host's CPU features and the kernels this run takes."""
    from engine_native import system_info

    s = system_info()
    forced = " (forced: --cpu avx2)" if os.environ.get(FORCED_MARK) == "avx2" else ""
    variant = s.get("cpu_variant") or "native build"
    return (f"  CPU {s['devices'][0]['description']}: {' '.join(s['cpu_features'])}\n"
            f"  kernels{forced}: ggml CPU module {variant}; T3 Q4_0 {s.get('q4_kernel_isa', '-')} "
            f"(prompts from {s.get('q4_kernel_max_columns', '-')} columns: {s.get('t3_prompt_products', '-')}); "
            f"S3Gen f32 products OpenBLAS {s.get('blas_core', '-')}; AMX {'on' if s.get('amx') else 'off'}; "
            f"S3Gen int16 products {s.get('int16_products') or 'off'}")


class ReferenceUnavailable(Exception):
    """The PyTorch reference cannot be run from here; the message says what to do."""


def _source_checkout() -> Path | None:
    """The source checkout that holds the oracle (tests/reference/): $CBS_SOURCE_DIR, or the
    working folder or one above it."""
    start = os.environ.get("CBS_SOURCE_DIR")
    for d in ([Path(start)] if start else [Path.cwd(), *Path.cwd().parents]):
        if (d / "tests" / "reference" / "__main__.py").is_file():
            return d.resolve()
    return None


def run_reference_bench(snapshot: str, **inputs) -> dict:
    """Times the PyTorch reference in its own interpreter (the checkout's .venv-ref, or
    $CBS_REF_PYTHON): the oracle is a separate program, never imported into the app."""
    import numpy as np

    root = _source_checkout()
    if root is None:
        raise ReferenceUnavailable("--reference needs a source checkout (run from it, or set CBS_SOURCE_DIR)")
    py = Path(os.environ.get("CBS_REF_PYTHON") or root / ".venv-ref" / "bin" / "python")
    if not py.exists():
        raise ReferenceUnavailable(f"the reference environment {py} is missing: run `bash scripts/setup.sh test`")
    env = dict(os.environ, CBS_REF_INNER="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])]))
    with tempfile.TemporaryDirectory(prefix="cbs-bench-") as td:
        inp, out = Path(td) / "in.npz", Path(td) / "out.npz"
        np.savez(inp, **{k: np.asarray(v) for k, v in inputs.items()})
        res = subprocess.run([str(py), "-m", "tests.reference", "run", "bench", "--snapshot",
                              str(Path(snapshot).resolve()), "--in", str(inp), "--out", str(out)],
                             cwd=root, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            raise ReferenceUnavailable(f"the reference run failed: {res.stderr.strip()[-2000:]}")
        with np.load(out, allow_pickle=False) as z:
            return {k: float(z[k]) for k in z.files}


def _row(name: str, ours, ref=None, unit: str = "ms", fmt: str = "{:.1f}") -> str:
    o = fmt.format(ours) + " " + unit if ours is not None else "-"
    if ref is None:
        return f"  {name:<28} {o:>14}"
    r = fmt.format(ref) + " " + unit
    ratio = f"{ref / ours:.2f}x" if ours else "-"
    return f"  {name:<28} {o:>14} {r:>14} {ratio:>9}"


def cmd_bench(args) -> int:
    if args.cpu == "avx2" and os.environ.get(FORCED_MARK) != "avx2":
        _force_avx2()  # does not return
    from engine_native import EngineError
    from engine_native.bench import run_bench

    try:
        r = run_bench(args.model, threads=args.threads, n_tokens=args.tokens, device=args.device,
                      language=args.language, exaggeration=args.exaggeration, cfg_weight=args.cfg_weight,
                      watermark=not args.no_watermark, decoder=args.decoder)
    except EngineError as e:
        print(f"chatterbox-studio: error: {e}", file=sys.stderr)
        return 1
    ref = None
    if args.reference:
        print("running the PyTorch reference ...", file=sys.stderr, flush=True)
        try:
            # On the same kind of device as ours: a CUDA GPU -> torch's "cuda" (no Vulkan in torch).
            ref_device = "cuda" if str(r["device"]).startswith("cuda") else "cpu"
            # The reference's prepare_conditionals fails on CUDA (its S3 tokenizer multiplies a float64
            # filterbank into float32): cloning is timed on the CPU reference only.
            clone = {"clone_wav": r["clone_wav"]} if ref_device == "cpu" else {}
            ref = run_reference_bench(args.reference, text_ids=r["text_ids"], tokens=args.tokens,
                                      speech_ids=r["speech_ids"], threads=r["threads"], device=ref_device, **clone)
        except ReferenceUnavailable as e:
            print(f"chatterbox-studio: error: {e}", file=sys.stderr)
            return 1
        ref = {k: float(v) for k, v in ref.items()}
    print(f"chatterbox-studio bench: {r['variant']} {r['quantization']} on {r['device']} (HiFT on {r['hift_device']}), "
          f"{r['threads']} threads, "
          f"{r['t3_tokens']} speech tokens ({r['audio_s']:.2f} s of audio)")
    if r["decoder"]:
        print(f"  decoder: {r['decoder']} ({r['cfm_steps']} CFM steps; the reference decodes with its own S3Gen)")
    print(_kernels_line())
    if "host_read_gbps" in r:
        print(f"  host, {r['threads']} threads: reads {r['host_read_gbps']:.1f} GB/s, f32 FMA {r['host_fma_gmacs']:.0f} G "
              f"multiply-adds/s ({r['host_fma_lanes']} lanes, the exact products' width)")
    head = f"  {'':<28} {'native':>14}"
    print(head + (f" {'PyTorch':>14} {'speed-up':>9}" if ref else "") + (f"   (PyTorch on {ref_device})" if ref else ""))
    g = (lambda k: ref.get(k)) if ref else (lambda k: None)
    print(_row("load", r["load_ms"], g("load_ms")))
    print(_row("T3 prompt (voice cached)", r["t3_prompt_ms"]))
    print(_row("T3 prompt (first, + voice)", r["t3_first_prompt_ms"]))
    # The reference's sampling (its own draws, its alignment analyzer) may stop at another length.
    ref_per_token = ref["t3_ms"] / max(ref["t3_tokens"], 1) if ref and "t3_tokens" in ref else None
    print(_row("T3 per token", r["t3_ms_per_token"], ref_per_token)
          + (f"   (PyTorch: {ref['t3_tokens']:.0f} tokens)" if ref_per_token is not None else ""))
    if "t3_bound_ms" in r:
        print(_row("  bound: weights / bandwidth", r["t3_bound_ms"]) + f"   ({r['t3_step_mb']:.0f} MB of weights a step; its KV "
              f"cache, {r['t3_kv_mb']:.0f} MB, may stay in cache: measured {r['t3_ms_per_token'] / r['t3_bound_ms']:.2f}x)")
    print(_row("T3 total", r["t3_ms"], g("t3_ms")))
    s3 = r["encoder_ms"] + r["cfm_ms"]
    print(_row("S3Gen encoder", r["encoder_ms"]))
    print(_row("S3Gen CFM", r["cfm_ms"]))
    if r.get("cfm_bound_ms", 0) > 0:
        print(_row("  bound: f32 multiply-adds", r["cfm_bound_ms"]) + f"   ({r['cfm_gmacs']:.0f} G over {r['cfm_passes']} "
              f"passes of {r['cfm_frames']} frames: measured {r['cfm_ms'] / r['cfm_bound_ms']:.2f}x)")
    print(_row("S3Gen encoder + CFM", s3, g("s3gen_ms")))
    print(_row("HiFT", r["hift_ms"], g("hift_ms")) + f"   (noise drawn at HiFT: {r['hift_noise_at_hift_ms']:.1f} ms)")
    ref_gen = (ref["t3_ms"] + ref["s3gen_ms"] + ref["hift_ms"]) if ref else None
    print(_row("generation (end to end)", r["generation_ms"], ref_gen))
    print(_row("generation RTF", r["rtf"], ref_gen / 1e3 / ref["audio_s"] if ref else None, "", "{:.3f}"))
    marked = " (watermarked)" if r["watermark"] else ""
    for key, label in (("ttfa_low_latency", "low-latency"), ("ttfa_default", "quality")):
        print(_row(f"first audio, {label}", r[f"{key}_ms"]) + f"   (voice prepared){marked}")
        if f"{key}_unmarked_ms" in r:
            ms = r[f"{key}_unmarked_ms"]
            print(_row("  without the watermark", ms) + f"   (the mark adds {100 * (r[f'{key}_ms'] / ms - 1):+.1f} %)")
        if f"{key}_first_ms" in r:
            print(_row("  the voice's first stream", r[f"{key}_first_ms"]))
    print(_row("whole synthesis (batch)", r["batch_ms"]) + marked)
    if r["watermark"]:
        print(_row("  of which the watermark", r["batch_watermark_ms"])
              + f"   ({100 * r['batch_watermark_ms'] / r['batch_ms']:.1f} % of the batch)")
    for name, label in (("low_latency", "low-latency"), ("quality", "quality")):
        ms = r[f"stream_{name}_ms"]
        print(_row(f"whole stream, {label}", ms) + f"   RTF {r[f'stream_{name}_rtf']:.3f}, "
              f"{ms / r['batch_ms']:.2f}x batch")
    if "stream_quality_first_ms" in r:
        ms = r["stream_quality_first_ms"]
        print(_row("  the voice's first stream", ms) + f"   {ms / r['batch_ms']:.2f}x batch")
    c = sorted(r["cancel_ms"])
    print(_row("cancel -> engine free (max)", c[-1]) + "   (" + ", ".join(f"{x:.0f}" for x in r["cancel_ms"]) + " ms)")
    _print_cancel_by_stage(r)
    if "clone_ms" in r:
        print(_row("clone a 10 s recording", r["clone_ms"], g("clone_ms")))
        print(_row("  first, loading encoders", r["clone_first_ms"], None))
    else:
        print(f"  {'clone a 10 s recording':<28} {'-':>14}   ({r['clone_error']})")
    print(_row("peak RSS, synthesis", r["peak_rss_mb"], g("peak_rss_mb"), "MB", "{:.0f}"))
    if "peak_rss_cancel_mb" in r:
        print(_row("  after the cancel tests", r["peak_rss_cancel_mb"], None, "MB", "{:.0f}"))
    print(_row("peak RSS, after cloning", r["peak_rss_clone_mb"], g("peak_rss_clone_mb"), "MB", "{:.0f}"))
    _print_release(r)
    return 0


def _print_cancel_by_stage(r: dict) -> None:
    """Stop inside each stage of a one-chunk stream: ms until the engine is free."""
    for name, (ms, outcome) in r.get("cancel_stage_ms", {}).items():
        note = "" if outcome == "cancelled" else f"   ({outcome} before the cancel)"
        print(_row(f"  cancel in {name}", ms) + note)


def _print_release(r: dict) -> None:
    """RSS with the cloning encoders loaded, then released (what the idle timer does)."""
    if "rss_released_mb" in r:
        print(_row("RSS, cloning encoders loaded", r["rss_cloned_mb"], None, "MB", "{:.0f}"))
        print(_row("RSS, encoders released", r["rss_released_mb"], None, "MB", "{:.0f}")
              + f"   ({r['released_mb']:.0f} MB of weights freed)")


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure speed on a fixed 10 s workload (optionally beside PyTorch)")
    p.add_argument("-m", "--model", required=True, help="the model .gguf")
    p.add_argument("--decoder", metavar="MODEL.gguf", help="decode with this model's S3Gen and HiFT (Engine's decoder)")
    p.add_argument("--reference", metavar="SNAPSHOT_DIR",
                   help="also time the PyTorch reference on this snapshot (the model's source weights)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for both (default: all cores)")
    p.add_argument("--tokens", type=int, default=250, help="speech tokens (default 250 = 10 s)")
    p.add_argument("--no-watermark", action="store_true",
                   help="the engine without the Perth watermark (by default it marks, and first audio is timed "
                   "without the mark too)")
    p.add_argument("--cpu", choices=("native", "avx2"), default="native",
                   help="avx2: the engine's kernels as on a CPU with AVX2 only (no AVX-512, VNNI or AMX), "
                   "for figures of ordinary desktops on a bigger machine (default: native, this CPU's best)")
    from app.cli.common import add_device_argument, add_multilingual_arguments

    add_device_argument(p)
    add_multilingual_arguments(p)  # the reference runs generate()'s settings (guidance 0.5, 10 CFM steps)
    p.set_defaults(func=cmd_bench)
