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


import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_memory_after_each_module():
    """Engines are module fixtures; a Stream's generator and its Engine can form a reference
    cycle, which Python's collector does not hurry to free because the native weights it
    holds are invisible to its thresholds. Collect at the end of every module (after its
    fixtures are finalised) and hand free heap back, so one module's models never stack on
    the next one's in the suite's one process."""
    yield
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
