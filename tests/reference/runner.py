"""Run a reference stage from the project environment (numpy in, numpy out).

    from tests.reference.cache import snapshot_dir
    from tests.reference.runner import run_stage
    out = run_stage("tokenize", snapshot_dir("turbo"), texts=np.array(["Hello."]))
    out["ids"], out["offsets"]

Inputs are written to a temporary .npz (no pickle: use numeric or unicode
arrays, e.g. `np.array(list_of_str)`) and the output .npz comes back as a dict of
arrays. The stages run in one reference-venv process kept for the whole session
(`python -m tests.reference serve`): importing torch and chatterbox costs ~10 s,
which a process per call paid every time (the suite makes a few hundred calls).
That process gives every stage a fresh process's state (see __main__._serve) and
loads the models per call, as before. CBS_REF_WORKER=0: a process per call.
"""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from . import refenv

# A worker past this resident size is replaced after its call (what a stage's models
# leave behind in the allocator stays with the process).
_WORKER_RSS_LIMIT = 6 << 30


class _Worker:
    def __init__(self) -> None:
        py = refenv.ensure_ref_python()
        self.log = tempfile.NamedTemporaryFile(prefix="cbs-ref-worker-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([str(py), "-m", "tests.reference", "serve"], cwd=str(refenv.REPO_ROOT),
                                     env=refenv.child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)

    def call(self, request: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.close()
            raise RuntimeError(f"the reference worker died (rc={self.proc.poll()}) in stage "
                               f"{request['stage']}:\n{self.log_tail()}")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(f"reference stage {request['stage']} failed:\n{reply['error']}")

    def rss(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                return next(int(l.split()[1]) << 10 for l in f if l.startswith("VmRSS:"))
        except (OSError, StopIteration):
            return 0

    def log_tail(self) -> str:
        try:
            return Path(self.log.name).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


_worker: _Worker | None = None
_lock = threading.Lock()


def _close_worker() -> None:
    global _worker
    if _worker is not None:
        _worker.close()
        _worker = None


atexit.register(_close_worker)


def _run_in_worker(stage: str, snapshot: Path, inp: Path, out: Path) -> None:
    global _worker
    with _lock:
        if _worker is None or _worker.proc.poll() is not None:
            _worker = _Worker()
        try:
            _worker.call({"stage": stage, "snapshot": str(snapshot), "in": str(inp), "out": str(out)})
        finally:
            if _worker is not None and (_worker.proc.poll() is not None or _worker.rss() > _WORKER_RSS_LIMIT):
                _close_worker()


def run_stage(stage: str, snapshot_dir, **inputs) -> dict[str, np.ndarray]:
    arrays = {k: np.asarray(v) for k, v in inputs.items()}
    bad = [k for k, v in arrays.items() if v.dtype == object]
    if bad:
        raise TypeError(f"inputs {bad} are object arrays; pass numeric or unicode arrays")
    snapshot = Path(snapshot_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="cbs-ref-") as td:
        inp, out = Path(td) / "in.npz", Path(td) / "out.npz"
        np.savez(inp, **arrays)
        if os.environ.get("CBS_REF_WORKER") == "0":
            refenv.run_in_ref(["run", stage, "--snapshot", str(snapshot), "--in", str(inp), "--out", str(out)],
                              capture=True)
        else:
            _run_in_worker(stage, snapshot, inp, out)
        with np.load(out, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
