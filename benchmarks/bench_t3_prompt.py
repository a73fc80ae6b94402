"""T3's prompts on the CPU, the int8 tile against the path it replaced: processes alternating
between the default products and CBS_Q8_TILE=0 (sgemm on the converted weights from
q4_kernel_max_columns columns), so that a host's drift falls on both.

    .venv/bin/python benchmarks/bench_t3_prompt.py [--variants turbo,mtl] [--quant q4_0]
        [--threads 2] [--rounds 2] [--avx2]

Per variant and products, best of 3 in each process (ms): the first prompt (a fresh cache: the
voice's conditioning prefix computed too, as `bench`'s "T3 prompt (first, + voice)"), and a
sentence's prompt with the voice cached (`bench`'s BENCH_TEXT; the Multilingual model's guided
prompt, English). `--avx2`: every kernel in its AVX2 form (`bench --cpu avx2`'s switches; the
tile's AVX2 form against CBS_Q8_TILE=0). Prints, asserting nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.* (the model cache), after site-packages

from app.cli.bench import AVX2_ENV  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402

_CHILD = """
import json, sys
from engine_native import Engine, system_info
from engine_native.bench import BENCH_TEXT, StageWatch
model, threads, language = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None
e = Engine(model, threads=threads)
def prompt_ms(first):
    if first:
        e.stages.t3.release_idle_caches()
    w = StageWatch()
    with e.profile(w):
        e.speech_tokens(BENCH_TEXT, seed=0, max_tokens=1, language=language)
    return w.ms["t3_prompt"]
prompt_ms(True)  # warm
out = {"first": min(prompt_ms(True) for _ in range(3)), "sentence": min(prompt_ms(False) for _ in range(3)),
       "products": system_info()["t3_prompt_products"], "from": system_info()["q4_kernel_max_columns"]}
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="turbo,mtl")
    ap.add_argument("--quant", default="q4_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--avx2", action="store_true")
    args = ap.parse_args()
    base = dict(os.environ, **(AVX2_ENV if args.avx2 else {}))
    tile = base.get("CBS_Q8_TILE", "")
    for variant in args.variants.split(","):
        model = str(model_path(variant, quant=args.quant))
        language = "en" if variant == "mtl" else ""
        for r in range(args.rounds):
            for switch in (tile, "0"):
                env = dict(base, CBS_Q8_TILE=switch) if switch else {k: v for k, v in base.items() if k != "CBS_Q8_TILE"}
                done = subprocess.run([sys.executable, "-c", _CHILD, model, str(args.threads), language],
                                      env=env, capture_output=True, text=True, check=True)
                res = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"{variant} round {r + 1}: {res['products']} from {res['from']} columns: first prompt "
                      f"{res['first']:.0f} ms, a sentence's (voice cached) {res['sentence']:.0f} ms", flush=True)


if __name__ == "__main__":
    main()
