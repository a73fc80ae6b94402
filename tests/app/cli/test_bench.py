"""`chatterbox-studio bench --cpu avx2`: the switches it sets reach the native module as it
loads (the kernels the report names are the AVX2 ones), and the whole command runs on a small
workload with the report naming them. Speed itself is never asserted here."""

from __future__ import annotations

import os
import subprocess
import sys

from app.cli.bench import AVX2_ENV
from tests.helpers.models import model_path

PROBE = ("from engine_native import system_info\n"
         "s = system_info()\n"
         "print(s['q4_kernel_isa'], s['blas_core'], s['amx'], repr(s['int16_products']), repr(s['t3_prompt_products']))\n")


def test_avx2_switches_choose_the_avx2_kernels():
    """On any x86-64 host with AVX2 (the AVX-512 and AMX ones included)."""
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, **AVX2_ENV))
    assert res.returncode == 0, res.stderr
    isa, blas, amx, int16, prompts = res.stdout.split(maxsplit=4)
    assert (isa, blas.lower(), amx, int16, prompts.strip()) == ("AVX2", "haswell", "False", "'AVX2'", "'int8 tile, AVX2'"), res.stdout


def test_bench_reports_the_forced_kernels(tmp_path):
    model = str(model_path("nano", "q4_0"))
    res = subprocess.run([sys.executable, "-m", "app", "bench", "-m", model, "--tokens", "4", "--threads", "2",
                          "--cpu", "avx2", "--no-watermark"], capture_output=True, text=True, timeout=600,
                         cwd=os.getcwd(), env={k: v for k, v in os.environ.items() if k != "CBS_BENCH_CPU"})
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if "kernels (forced: --cpu avx2)" in ln)
    assert "T3 Q4_0 AVX2" in line and "OpenBLAS Haswell" in line and "AMX off" in line, line
    assert "S3Gen int16 products AVX2" in line and "int8 tile, AVX2" in line, line
    # the bounds (engine_native/bounds.py): the f32 rate at OpenBLAS Haswell's width, and both rows
    host = next(ln for ln in res.stdout.splitlines() if ln.startswith("  host, 2 threads: reads"))
    assert "(8 lanes, the exact products' width)" in host, host
    assert "bound: weights / bandwidth" in res.stdout and "bound: f32 multiply-adds" in res.stdout, res.stdout
