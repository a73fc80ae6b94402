"""Test-wide setup.

The tests exercise the *installed* package (its compiled engine_native._core lives in
site-packages, not in the source tree). pytest puts the repository root first on
sys.path, where the source folders would shadow the installed packages, so move it
to the end: `engine_native`, `app`, `voice_lab` resolve to the installation, while
`tests.reference` still imports from the tree.
"""

import os
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != ROOT] + [ROOT]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
