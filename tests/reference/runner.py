"""Run a reference stage from the project environment (numpy in, numpy out).

    from tests.reference.cache import snapshot_dir
    from tests.reference.runner import run_stage
    out = run_stage("tokenize", snapshot_dir("turbo"), texts=np.array(["Hello."]))
    out["ids"], out["offsets"]

Inputs are written to a temporary .npz (no pickle: use numeric or unicode
arrays, e.g. `np.array(list_of_str)`), the reference venv's python runs
`python -m tests.reference run STAGE ...`, and the output .npz comes back as a
dict of arrays. Each call is one process (models load per call).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from . import refenv


def run_stage(stage: str, snapshot_dir, **inputs) -> dict[str, np.ndarray]:
    arrays = {k: np.asarray(v) for k, v in inputs.items()}
    bad = [k for k, v in arrays.items() if v.dtype == object]
    if bad:
        raise TypeError(f"inputs {bad} are object arrays; pass numeric or unicode arrays")
    with tempfile.TemporaryDirectory(prefix="cbs-ref-") as td:
        inp, out = Path(td) / "in.npz", Path(td) / "out.npz"
        np.savez(inp, **arrays)
        refenv.run_in_ref(["run", stage, "--snapshot", str(Path(snapshot_dir).resolve()),
                           "--in", str(inp), "--out", str(out)], capture=True)
        with np.load(out, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
