"""The PyTorch oracle: random-weight Chatterbox snapshots and reference stages.

Project-side modules (standard library + numpy, never torch):
    refenv   where the reference venv is, how to call into it
    cache    snapshot_dir(variant, seed=0, size="full") -> Path (built on demand)
    runner   run_stage(stage, snapshot_dir, **inputs) -> dict[str, np.ndarray]
Reference-venv modules (torch; imported only by the re-executed child):
    build    the snapshot builder
    stages   the stage registry STAGES and the from_local-style model loaders

Command line (from the repo root, any python):
    python -m tests.reference snapshot --variant turbo --seed 0 --out DIR
    python -m tests.reference snapshot --variant mtl [--size small] --out DIR
        (Multilingual; small = 14 layers x FFN 1536 for CI. Full-size MTL parity:
         CBS_MTL_SIZE=full pytest tests/engine_native/test_text_mtl.py tests/engine_native/convert/test_mtl.py)
    python -m tests.reference run STAGE --snapshot DIR --in IN.npz --out OUT.npz
    python -m tests.reference stages
"""
