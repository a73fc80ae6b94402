"""Carry a full-size random-weight model to a machine that cannot build one, in a few MB.

A converted random-weight Turbo model is 2.5 GB of incompressible noise; the GPU machine
reaches no package registry to install the PyTorch reference that makes it. `pack` keeps a
model's metadata, its small tensors verbatim (norms, biases, filterbanks, token ids, the
voice) and, for each big tensor, only its shape, mean and standard deviation; `unpack`
writes a model of the same architecture and sizes whose big tensors are fresh Gaussian
draws with those statistics (seeded). It is a different random model than the source, of
the same scale: what speed and device-against-CPU parity need, not parity with the
reference (that stays the CPU tests' job).

    python benchmarks/model_skeleton.py pack turbo-f32.gguf turbo.skel.gguf [--big 2048]
    python benchmarks/model_skeleton.py unpack turbo.skel.gguf turbo-f32.gguf
    chatterbox-studio requantize turbo-f32.gguf -o turbo-q4_0.gguf --quant q4_0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf import GGMLQuantizationType as Q

# gguf and numpy only (no engine_native): the device machine runs this before the engine is built.
BIG = 1 << 16  # elements: tensors this large are regenerated, smaller ones carried
STATS_KEY = "skeleton.tensors"  # JSON, in file order: [name, shape, mean, std] (regenerated) or [name] (carried)


def _array(t) -> np.ndarray:
    if Q(t.tensor_type) not in (Q.F32, Q.F16, Q.I32):
        raise SystemExit(f"{t.name}: {Q(t.tensor_type).name}; pack an F32 model")
    a = np.asarray(t.data).reshape(tuple(int(n) for n in reversed(t.shape)))
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _write(out: Path, reader: GGUFReader, tensors, extra=None) -> None:
    arch = reader.get_field("general.architecture").contents()
    w = GGUFWriter(str(out), arch)
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name in ("general.architecture", STATS_KEY):
            continue
        vtype = GGUFValueType(f.types[0])
        sub = GGUFValueType(f.types[-1]) if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    if extra:
        w.add_string(STATS_KEY, extra)
    for name, arr in tensors:
        w.add_tensor(name, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def pack(src: Path, out: Path, big: int = BIG) -> None:
    reader = GGUFReader(str(src))
    order, kept = [], []
    for t in reader.tensors:
        a = _array(t)
        if a.dtype.kind == "f" and a.size >= big:
            d = a.astype(np.float64)
            order.append([t.name, list(a.shape), float(d.mean()), float(d.std())])
        else:
            order.append([t.name])
            kept.append((t.name, a))
    _write(out, reader, kept, json.dumps(order))
    print(f"packed {src} -> {out} ({out.stat().st_size / 2**20:.1f} MiB, "
          f"{sum(len(o) > 1 for o in order)} of {len(order)} tensors to regenerate)")


def unpack(skel: Path, out: Path, seed: int) -> None:
    reader = GGUFReader(str(skel))
    order = json.loads(reader.get_field(STATS_KEY).contents())
    carried = {t.name: t for t in reader.tensors}
    rng = np.random.Generator(np.random.PCG64(seed))

    def tensors():
        for entry in order:
            if len(entry) == 1:
                yield entry[0], _array(carried[entry[0]])
            else:
                name, shape, mean, std = entry
                yield name, rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)

    _write(out, reader, tensors())
    print(f"unpacked {skel} -> {out} ({out.stat().st_size / 2**20:.1f} MiB)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("pack")
    a.add_argument("src", type=Path)
    a.add_argument("out", type=Path)
    a.add_argument("--big", type=int, default=BIG, metavar="N",
                   help=f"regenerate float tensors of N values or more (default {BIG}; 2048 packs a full-size "
                   "model into 2-5 MB)")
    a = sub.add_parser("unpack")
    a.add_argument("skel", type=Path)
    a.add_argument("out", type=Path)
    a.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.cmd == "pack":
        pack(args.src, args.out, args.big)
    else:
        unpack(args.skel, args.out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
