"""`python -m tests.reference ...`; see __init__.py.

Run with the project python it re-executes itself with the reference venv's
python (`$CBS_REF_PYTHON` or <repo>/.venv-ref/bin/python); only that child
imports torch.
"""
from __future__ import annotations

import argparse
import json
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
    return p


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
        import numpy as np
        from .stages import STAGES
        if args.stage not in STAGES:
            print(f"error: unknown stage {args.stage!r}; known: {sorted(STAGES)}", file=sys.stderr)
            return 2
        with np.load(args.inp, allow_pickle=False) as z:
            inputs = {k: z[k] for k in z.files}
        outputs = STAGES[args.stage](args.snapshot, inputs)
        arrays = {k: np.asarray(v) for k, v in outputs.items()}
        bad = [k for k, v in arrays.items() if v.dtype == object]
        if bad:
            raise TypeError(f"stage {args.stage} returned object arrays: {bad}")
        tmp = args.out.with_name(args.out.name + ".part.npz")
        np.savez(tmp, **arrays)
        tmp.replace(args.out)
        return 0
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
