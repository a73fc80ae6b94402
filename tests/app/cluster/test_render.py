"""say --cluster (app.cluster.render, pool, workers) on a real local Ray cluster, against a local
render of the same text, voice and seed: sample-identical output, the same parts folder, a
worker killed mid-render (its pieces sent again), Ctrl-C then resume."""

import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tests.helpers.ray_cluster import env

pytestmark = pytest.mark.cluster
TEXT = "\n\n".join(" ".join(f"Sentence number {4 * p + k + 1} is spoken here." for k in range(4))
                   for p in range(2)) + "\n\nAnd the last two. They end it.\n"
PIECES = 10


@pytest.fixture(scope="module")
def model(cluster_model):
    return cluster_model


def _say(tmp_path, model, out, *extra, kill_after=None, interrupt_after=None):
    """Runs `say` and reads its log as it comes: SIGKILLs a worker or SIGINTs the command after
    N finished pieces. Returns (returncode, log lines, killed worker pid)."""
    cmd = [sys.executable, "-m", "app", "say", "-f", "script.txt", "-o", out, "-m", model, "--seed", "3",
           "--max-tokens", "4", "--progress", "lines", "--keep-parts", *extra]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env={**env(), "XDG_DATA_HOME": str(tmp_path / "xdg")})
    lines, pids, killed = [], [], None
    for line in p.stderr:
        lines.append(line.rstrip())
        if m := re.search(r"ready on .* \(pid (\d+)", line):
            pids.append(int(m.group(1)))
        done = int(m.group(1)) if (m := re.match(r"progress\s+(\d+)/", line)) else 0
        if kill_after is not None and killed is None and done >= kill_after:
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
        if interrupt_after is not None and done >= interrupt_after:
            p.send_signal(signal.SIGINT)
            interrupt_after = None
    return p.wait(timeout=600), lines, killed


def _audio(path):
    x, rate = sf.read(str(path), dtype="float32")
    assert rate == 24000
    return x


def test_cluster_render_equals_local_survives_a_killed_worker_and_resumes(ray_cluster, model, tmp_path):
    (tmp_path / "script.txt").write_text(TEXT)
    rc, log, _ = _say(tmp_path, model, "local.wav", "--threads", "2")
    assert rc == 0, "\n".join(log)
    local = _audio(tmp_path / "local.wav")
    local_parts = sorted(os.listdir(tmp_path / "local.wav.parts"))
    assert len([f for f in local_parts if f.endswith(".wav")]) == PIECES

    cluster = ["--cluster", ray_cluster.address, "--workers", "2", "--threads", "1"]
    # Ctrl-C after two pieces: exit 130, the finished pieces stay in the parts folder
    rc, log, _ = _say(tmp_path, model, "cluster.wav", *cluster, interrupt_after=2)
    assert rc == 130, "\n".join(log)
    assert "stopped" in log[-1] and "Traceback" not in "\n".join(log)
    kept = len(list((tmp_path / "cluster.wav.parts").glob("*.wav")))
    assert kept >= 2
    # the same command resumes; a worker killed mid-render costs only its pieces
    rc, log, killed = _say(tmp_path, model, "cluster.wav", *cluster, kill_after=kept + 1)
    text = "\n".join(log)
    assert rc == 0, text
    assert f"resume    {kept} finished pieces" in text
    assert killed is not None and f"(pid {killed}) lost" in text
    retried = int(re.search(r", (\d+) sent again after a lost worker \((\d+) workers replaced\)", text).group(1))
    assert retried >= 1, text
    print(f"\nkilled worker {killed}: {retried} pieces sent again; {kept} pieces resumed")
    got = _audio(tmp_path / "cluster.wav")
    assert got.shape == local.shape and np.array_equal(got, local)
    # the same pieces under the same keys as the local render (and the same samples)
    assert sorted(os.listdir(tmp_path / "cluster.wav.parts")) == local_parts
    for name in local_parts:
        if name.endswith(".wav"):
            assert np.array_equal(_audio(tmp_path / "cluster.wav.parts" / name),
                                  _audio(tmp_path / "local.wav.parts" / name)), name


def test_a_render_finished_locally_resumes_on_the_cluster_from_its_parts(ray_cluster, model, tmp_path):
    """The keys are the local render's: a cluster render of the same output finds every piece."""
    (tmp_path / "script.txt").write_text("One short line. And a second one.\n")
    rc, log, _ = _say(tmp_path, model, "out.wav", "--threads", "2")
    assert rc == 0, "\n".join(log)
    first = _audio(tmp_path / "out.wav")
    rc, log, _ = _say(tmp_path, model, "out.wav", "--cluster", ray_cluster.address, "--workers", "1")
    text = "\n".join(log)
    assert rc == 0, text
    assert "resume    2 finished pieces" in text and "cluster   0 pieces on 1 workers" in text
    assert np.array_equal(_audio(tmp_path / "out.wav"), first)


def test_book_on_the_cluster_writes_the_local_renders_chapters(ray_cluster, model, tmp_path):
    """`book --cluster`: every chapter's float32 WAV in the parts folder equals the local one
    (same name: the chapter's key; same samples), retakes of implausible lengths included."""
    from tests.helpers.book_files import SHORT_BOOK, write_epub

    write_epub(tmp_path / "short.epub", SHORT_BOOK)
    common = ["book", "short.epub", "-m", model, "--seed", "5", "--max-tokens", "4", "--retries", "1",
              "--keep-parts", "--progress", "none"]
    environ = {**env(), "XDG_DATA_HOME": str(tmp_path / "xdg")}

    def book(out, *extra):
        r = subprocess.run([sys.executable, "-m", "app", *common, "-o", out, *extra], capture_output=True, text=True,
                           cwd=tmp_path, env=environ, timeout=900)
        assert r.returncode == 0, r.stderr
        return r.stderr

    book("local.m4b", "--threads", "2")
    log = book("cluster.m4b", "--cluster", ray_cluster.address, "--workers", "2", "--threads", "1")
    assert "3 chapters" in log and "cluster   " in log
    local = sorted((tmp_path / "local.m4b.parts" / "chapters").glob("*.wav"))
    remote = sorted((tmp_path / "cluster.m4b.parts" / "chapters").glob("*.wav"))
    assert [p.name for p in local] == [p.name for p in remote] and len(local) == 3
    for a, b in zip(local, remote):
        assert np.array_equal(_audio(a), _audio(b)), a.name


def test_no_watermark_reaches_the_workers(ray_cluster, model, tmp_path):
    """`say --cluster --no-watermark`: the workers' engines leave the speech unmarked, as a local
    `--no-watermark` render does (same samples, no "watermark: perth" in the file's tags);
    without the flag they mark it (test above: the cluster's render equals the marked local one)."""
    import soundfile

    (tmp_path / "script.txt").write_text("One short line. And a second one.\n")
    rc, log, _ = _say(tmp_path, model, "marked.wav", "--threads", "2", "--no-resume")
    assert rc == 0, "\n".join(log)
    rc, log, _ = _say(tmp_path, model, "local.wav", "--threads", "2", "--no-resume", "--no-watermark")
    assert rc == 0, "\n".join(log)
    rc, log, _ = _say(tmp_path, model, "cluster.wav", "--cluster", ray_cluster.address, "--workers", "1",
                      "--no-resume", "--no-watermark")
    text = "\n".join(log)
    assert rc == 0, text
    assert "not watermarking (--no-watermark)" in text
    local, got = _audio(tmp_path / "local.wav"), _audio(tmp_path / "cluster.wav")
    assert got.shape == local.shape and np.array_equal(got, local)
    marked = _audio(tmp_path / "marked.wav")
    assert marked.shape == local.shape and not np.array_equal(marked, local)
    comments = {name: soundfile.SoundFile(str(tmp_path / name)).copy_metadata().get("comment", "")
                for name in ("marked.wav", "cluster.wav")}
    assert comments["marked.wav"].endswith("watermark: perth") and "watermark" not in comments["cluster.wav"]
