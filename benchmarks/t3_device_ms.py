"""T3 ms/token on one device, greedy and with the default sampler, three times each
(gpu_probe's timing: best of 3 generations of 101 tokens, the prompt subtracted).

    CBS_CUDA_GRAPHS=0 python benchmarks/t3_device_ms.py MODEL.gguf cuda:0   # without CUDA graphs
    python benchmarks/t3_device_ms.py MODEL.gguf cuda:0                     # the default
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.gpu_probe import t3_ms_per_token  # noqa: E402
from engine_native import _core  # noqa: E402

mf = _core.ModelFile(sys.argv[1], device=sys.argv[2])
t3 = _core.T3(mf)
text = list(range(10, 60))
greedy = [t3_ms_per_token(t3, text, top_k=1) for _ in range(3)]
sampled = [t3_ms_per_token(t3, text) for _ in range(3)]
print(f"CBS_CUDA_GRAPHS={os.environ.get('CBS_CUDA_GRAPHS', '(default)')}: T3 greedy "
      f"{' '.join(f'{x:.2f}' for x in greedy)} ms/token, default sampler {' '.join(f'{x:.2f}' for x in sampled)}")
