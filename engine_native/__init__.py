"""Chatterbox Studio's native engine: a C++/ggml port of Chatterbox behind pybind11.

The public surface: `Engine`, `Voice`, `Chunk`, `Stream`, `StageTimes` / `StageEvent` (what
each stage cost: `Chunk.stages`, `Engine.profile`), the error classes, and
`system_info()` / `ggml_version()`. The submodules `convert` (model files), `debug`
(parity seams) and `_core` (the native module) are for tools and tests.
"""

import os

# ggml's CPU backend runs on OpenMP. Spinning threads waiting for work make every graph
# 5-20x slower as soon as another process (the GUI, a browser, a second engine) wants
# the same cores; sleeping instead costs microseconds per graph. libgomp reads this when
# the native module loads it, so it must be set first. A user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# ... but a few microseconds of spinning first (libgomp honours it beside PASSIVE): T3's
# per-token graphs wait at hundreds of barriers, and sleeping at each doubles a token's
# time on a quiet machine. Measured on 2 cores (benchmarks/bench_repack.py, Q4_0 Turbo,
# repacked): quiet 45-54 ms/token -> 25 ms (ACTIVE: 22); two busy processes beside it
# 66 -> 86 ms (ACTIVE there: seconds a token).
os.environ.setdefault("GOMP_SPINCOUNT", "2000")


def _engine_openblas_core() -> str | None:
    """The kernel set for the engine's own OpenBLAS (scipy-openblas32, S3Gen's f32 products),
    None to let it choose. It picks by CPU model when it loads, and 0.3.34 takes AMD's Zen 5
    (family 0x1A) for a Haswell: 8-lane AVX2 kernels on a CPU with full-width AVX-512. On an
    AMD CPU with the AVX-512 subsets its SkylakeX kernels need, those (measured on a 2-core
    Zen 5, Q4_0 Turbo, 10 s of audio: CFM 3.8 s -> 1.7 s). Intel CPUs it knows."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            first_cpu = f.read(1 << 16).split("\n\n", 1)[0].splitlines()
    except OSError:  # not Linux
        return None
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first_cpu)}
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= set(fields.get("flags", "").split())
    return "SKYLAKEX" if fields.get("vendor_id") == "AuthenticAMD" and avx512 else None


def _import_core() -> None:
    """Loads the native module with the engine's choice of OpenBLAS kernels, where it has one
    (CBS_OPENBLAS_CORETYPE, else _engine_openblas_core): that library is the engine's own copy
    and reads OPENBLAS_CORETYPE once, as it loads, so the variable is set only meanwhile. An
    inherited OPENBLAS_CORETYPE (some machines set Haswell for every process) is put back for
    the process's other OpenBLAS (numpy's); without a choice of the engine's it applies."""
    choice = os.environ.get("CBS_OPENBLAS_CORETYPE") or _engine_openblas_core()
    inherited = os.environ.get("OPENBLAS_CORETYPE")
    if choice:
        os.environ["OPENBLAS_CORETYPE"] = choice
    try:
        from engine_native import _core  # noqa: F401 - loaded here; imported from below
    finally:
        if choice:
            os.environ.pop("OPENBLAS_CORETYPE", None)
            if inherited is not None:
                os.environ["OPENBLAS_CORETYPE"] = inherited


# ggml-cuda's CUDA graphs (a graph that repeats, T3's step and the CFM's steps, replayed from
# one capture: T3 ~0.9 ms/token faster on CUDA), for every model: a graph captured anew is
# instantiated anew (patches/0008: an F16 model's updated one aborted). CBS_CUDA_GRAPHS=0
# turns them off.
if os.environ.get("CBS_CUDA_GRAPHS") == "0":
    os.environ.setdefault("GGML_CUDA_DISABLE_GRAPHS", "1")


def _find_native_module() -> None:
    """Run from a source checkout (the repository root is on sys.path first), this folder has
    no compiled `_core`: use the installed one of the same distribution, or say what to run."""
    here = os.path.dirname(os.path.abspath(__file__))
    if any(n.startswith("_core.") for n in os.listdir(here)):
        return
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("chatterbox-studio")
        core = next(f for f in dist.files or () if f.parent.name == "engine_native" and f.name.startswith("_core."))
        installed = os.path.dirname(os.path.abspath(str(dist.locate_file(core))))
    except (PackageNotFoundError, StopIteration):
        raise ImportError("the native engine (engine_native._core) is not built: run `bash scripts/setup.sh app` "
                          "and use .venv/bin/python") from None
    if installed != here:
        __path__.append(installed)  # noqa: F821 - a package's own __path__


_find_native_module()

from engine_native.errors import (Cancelled, DeviceError, EmptyTextError, EngineBusyError, EngineError,  # noqa: E402
                                  IncompatibleVoiceError, ModelError, OutOfMemoryError, ParameterError,
                                  NoSpeechError, SilentAudioError, SourceError, SourceTooShortError, Superseded,
                                  VoiceError, VoiceTooShortError)
_import_core()
from engine_native._core import ModelFile, devices, ggml_version, system_info  # noqa: E402


def __getattr__(name: str):  # the engine loads numpy-heavy modules: import it on first use
    if name in ("Engine", "Chunk", "Stream", "StageTimes", "StageEvent", "MIN_VOICE_SECONDS"):
        from engine_native import engine

        return getattr(engine, name)
    if name == "Voice":
        from engine_native.voice import Voice

        return Voice
    if name in ("Sentence", "split_text"):
        from engine_native import text

        return getattr(text, name)
    raise AttributeError(f"module 'engine_native' has no attribute {name!r}")


__all__ = ["Engine", "Voice", "Chunk", "Stream", "StageTimes", "StageEvent", "Sentence", "split_text", "EngineError", "ModelError", "VoiceError",
           "VoiceTooShortError", "SilentAudioError", "IncompatibleVoiceError", "SourceError",
           "SourceTooShortError", "NoSpeechError", "EmptyTextError", "ParameterError",
           "Cancelled", "Superseded", "OutOfMemoryError", "EngineBusyError", "DeviceError", "ModelFile", "devices", "ggml_version",
           "system_info", "MIN_VOICE_SECONDS"]
