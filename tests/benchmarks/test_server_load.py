"""A seconds-long smoke of benchmarks/server_load.py (the 30-minute load run): the script runs, its
clients and checks work, and a short load of good, streamed, cut-off and bad requests leaves no
error that is not the client's and no ERROR in the server's log. No figure is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.load
def test_a_short_load_run_has_no_errors(tmp_path):
    from tests.helpers.models import model_path

    model_path("nano", "q4_0")  # built (once) outside the run's time
    out = tmp_path / "load.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "server_load.py"), "--duration", "20",
                        "--clients", "2", "--sample-every", "2", "--json", str(out)],
                       capture_output=True, text=True, timeout=900, cwd=str(ROOT))
    print(r.stdout, r.stderr[-3000:])
    summary = json.loads(out.read_text())
    assert r.returncode == 0, summary["error_examples"]
    assert summary["errors"] == 0 and not summary["server_log_errors"]
    assert summary["outcomes"].get("good", 0) >= 1
    assert summary["requests"] == sum(summary["outcomes"].values())
    assert len(summary["rss_mb"]["samples"]) >= 3
