"""`python -m tests.reference ...`; see __init__.py.

Run with the project python it re-executes itself with the reference venv's
python (`$CBS_REF_PYTHON` or <repo>/.venv-ref/bin/python); only that child
imports torch.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import refenv


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.reference")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot", help="build a random-weight HF-layout snapshot")
    s.add_argument("--variant", choices=("turbo", "nano", "mtl"), required=True)
    s.add_argument("--size", choices=("full", "small"), default="full",
                   help="small: a reduced T3 of the same architecture (mtl only, for CI)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run", help="run one reference stage on .npz inputs")
    r.add_argument("stage")
    r.add_argument("--snapshot", type=Path, required=True)
    r.add_argument("--in", dest="inp", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    sub.add_parser("stages", help="list the registered stages")
    sub.add_parser("serve", help="run stages named on stdin, one JSON request a line (runner.py's worker)")
    return p


def _run_files(stage: str, snapshot: Path, inp: Path, out: Path) -> None:
    """One stage: inputs from the .npz `inp`, outputs written atomically to `out`."""
    import numpy as np
    from .stages import STAGES
    if stage not in STAGES:
        raise KeyError(f"unknown stage {stage!r}; known: {sorted(STAGES)}")
    with np.load(inp, allow_pickle=False) as z:
        inputs = {k: z[k] for k in z.files}
    outputs = STAGES[stage](snapshot, inputs)
    arrays = {k: np.asarray(v) for k, v in outputs.items()}
    bad = [k for k, v in arrays.items() if v.dtype == object]
    if bad:
        raise TypeError(f"stage {stage} returned object arrays: {bad}")
    tmp = out.with_name(out.name + ".part.npz")
    np.savez(tmp, **arrays)
    tmp.replace(out)


def _serve() -> int:
    """Stages one after another in this process, so torch and chatterbox are imported once
    (~10 s a call). Every stage starts from the state a fresh process gives it: torch's
    thread count and default seed, the stages' own caches (stages.reset), and no module
    hidden from import (a stage may hide one, e.g. pykakasi). Replies go to the original
    stdout; anything printed goes to stderr, the runner's log."""
    import gc
    import traceback

    import torch

    from .stages import reset
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    threads, seed = torch.get_num_threads(), torch.initial_seed()
    for line in sys.stdin:
        req = json.loads(line)
        hidden = {k for k, v in sys.modules.items() if v is None}
        try:
            torch.set_num_threads(threads)
            torch.manual_seed(seed)
            _run_files(req["stage"], Path(req["snapshot"]), Path(req["in"]), Path(req["out"]))
            reply = {"ok": True}
        except BaseException:  # noqa: BLE001 - every failure goes back to the caller
            reply = {"ok": False, "error": traceback.format_exc()[-4000:]}
        finally:
            for k in [k for k, v in sys.modules.items() if v is None and k not in hidden]:
                del sys.modules[k]
            reset()
            gc.collect()
        replies.write(json.dumps(reply) + "\n")
    return 0


def _inner(args: argparse.Namespace) -> int:
    if args.cmd == "snapshot":
        from .build import build_snapshot
        out = args.out
        if out.exists() and any(out.iterdir()):
            print(f"error: {out} exists and is not empty", file=sys.stderr)
            return 2
        t0 = time.time()
        timings = build_snapshot(args.variant, args.seed, out,
                                 log=lambda m: print(m, file=sys.stderr), size=args.size)
        timings["wall"] = time.time() - t0
        print(json.dumps({k: round(v, 2) for k, v in timings.items()}))
        return 0
    if args.cmd == "stages":
        from .stages import STAGES
        for name, fn in sorted(STAGES.items()):
            print(f"{name}: {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
        return 0
    if args.cmd == "run":
        from .stages import STAGES
        if args.stage not in STAGES:  # a stage's own KeyError keeps its traceback
            print(f"error: unknown stage {args.stage!r}; known: {sorted(STAGES)}", file=sys.stderr)
            return 2
        _run_files(args.stage, args.snapshot, args.inp, args.out)
        return 0
    if args.cmd == "serve":
        return _serve()
    raise AssertionError(args.cmd)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    if not refenv.in_ref_env():
        # Project environment: hand the whole command to the reference python.
        # The child runs in the repo root: pass absolute paths.
        if args.cmd == "snapshot":
            argv = ["snapshot", "--variant", args.variant, "--seed", str(args.seed),
                    "--size", args.size, "--out", str(args.out.resolve())]
        elif args.cmd == "run":
            argv = ["run", args.stage, "--snapshot", str(args.snapshot.resolve()),
                    "--in", str(args.inp.resolve()), "--out", str(args.out.resolve())]
        try:
            refenv.run_in_ref(argv)
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 1
        return 0
    return _inner(args)


if __name__ == "__main__":
    sys.exit(main())
