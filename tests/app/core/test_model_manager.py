"""The model manager against a Hugging Face Hub stand-in on 127.0.0.1 (tests/helpers/hub_server.py),
reached through huggingface_hub with HF_ENDPOINT: a download paused and resumed by a new manager
(a restart) through a dropped connection, a corrupted file refused and deleted, the free-space
check, the Hugging Face cache used offline, and one whole get() of the random Nano (download,
verify, convert to Q4_0, record) whose model the engine then speaks with.

The quick tests fetch the random Nano snapshot's small files (the voice encoder, the built-in
voice, the tokenizer: 7 MB) under a catalogue entry of their own; the whole get() fetches all of
it (1.9 GB, converted), which takes a minute or two.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from app.core import hub as hub_api
from app.core.model_manager import ManagerError, ModelManager
from engine_native.errors import Cancelled
from tests.helpers.hub_server import SMALL_FILES, SMALL_REPO, HubServer, small_files_hub
from tests.reference.cache import snapshot_dir

SMALL, TINY_REPO = SMALL_FILES, SMALL_REPO


@pytest.fixture
def hub_and_catalogue(tmp_path, monkeypatch):
    with small_files_hub(tmp_path, monkeypatch) as served:
        yield served


@pytest.fixture
def hub(hub_and_catalogue):
    return hub_and_catalogue[0]


@pytest.fixture
def tiny(hub_and_catalogue):
    return hub_and_catalogue[1]


def test_a_paused_download_resumes_in_a_new_manager_through_a_dropped_connection(hub, tiny, tmp_path):
    models = tmp_path / "models"
    stages, stop = [], threading.Event()
    hub.hold["ve.safetensors"] = 2_000_000  # the server stalls there, as a slow network would

    def progress(p):
        stages.append(p)

    def pause_when_held():
        partial = models / ".downloads" / TINY_REPO.replace("/", "--") / "ve.safetensors.part"
        while not (partial.exists() and partial.stat().st_size >= 1_000_000):
            threading.Event().wait(0.02)
        stop.set()            # Pause
        hub.release.set()     # the next bytes arrive; the download stops at them

    t = threading.Thread(target=pause_when_held)
    t.start()
    with pytest.raises(Cancelled):
        ModelManager(str(models), tiny).download("tiny", progress=progress, stop=stop)
    t.join()
    (pending,) = ModelManager(str(models), tiny).pending()
    kept = pending.have
    assert pending.key == "tiny" and pending.repo == TINY_REPO and 1_000_000 <= kept < pending.total
    down = [p for p in stages if p.stage == "downloading"]
    assert down and down[-1].total == pending.total and down[-1].speed > 0 and down[-1].eta is not None
    print(f"\npaused: {kept:,} of {pending.total:,} bytes kept; last progress: {down[-1].text()}")

    # "After a restart": a new manager resumes; the connection breaks once more on the way.
    hub.hold.clear()
    hub.release.clear()
    partial_size = (models / ".downloads" / TINY_REPO.replace("/", "--") / "ve.safetensors.part").stat().st_size
    hub.drop_once["ve.safetensors"] = partial_size + 1_500_000
    folder, listing = ModelManager(str(models), tiny).download("tiny", progress=progress)
    ranges = hub.gets("ve.safetensors")
    print("GETs of ve.safetensors (Range):", ranges)
    assert ranges[0] is None                                  # the first request: the whole file
    assert ranges[1] == f"bytes={partial_size}-"              # resumed where the pause left it
    assert len(ranges) == 3 and int(ranges[2][6:-1]) > partial_size  # and again after the drop
    for f in listing.files:
        path = os.path.join(folder, f.name)
        assert os.path.getsize(path) == f.size and not os.path.exists(path + ".part")
        assert hub_api.file_digest(path, "sha256") == hub.repos[TINY_REPO].files[f.name].sha256
    assert [p.stage for p in stages].count("verifying") >= 1
    assert ModelManager(str(models), tiny).pending()[0].have == pending.total  # all there, not yet converted


def test_a_corrupted_file_is_refused_deleted_and_fetched_again(hub, tiny, tmp_path):
    models = tmp_path / "models"
    hub.corrupt.add("vocab.json")   # a git-blob (non-LFS) file
    hub.corrupt.add("conds.pt")     # an LFS file: its sha256 is the ETag
    with pytest.raises(hub_api.CorruptedDownload) as e:
        ModelManager(str(models), tiny).download("tiny")
    msg = str(e.value)
    print("\nrefused:", msg)
    assert "conds.pt" in msg and "corrupted" in msg and "deleted" in msg and "sha256" in msg
    folder = models / ".downloads" / TINY_REPO.replace("/", "--")
    assert not (folder / "conds.pt").exists() and not (folder / "conds.pt.part").exists()
    hub.corrupt.discard("conds.pt")
    with pytest.raises(hub_api.CorruptedDownload) as e:
        ModelManager(str(models), tiny).download("tiny")
    assert "vocab.json" in str(e.value) and "sha1" in str(e.value)
    hub.corrupt.clear()
    before = {n: len(hub.gets(n)) for n in SMALL}
    ModelManager(str(models), tiny).download("tiny")
    again = {n: len(hub.gets(n)) - before[n] for n in SMALL}
    assert again["vocab.json"] == 1 and again["conds.pt"] == 0  # only what was refused is fetched again
    assert again["added_tokens.json"] == 0


def test_not_enough_free_space_is_refused_before_any_download(hub, tiny, tmp_path, monkeypatch):
    import shutil

    from app.core import model_manager

    real = shutil.disk_usage
    monkeypatch.setattr(model_manager.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=3_000_000))  # a nearly full disk
    with pytest.raises(ManagerError) as e:
        ModelManager(str(tmp_path / "models"), tiny).download("tiny")
    print("\nrefused:", e.value)
    assert "not enough free space" in str(e.value) and "3.0 MB is free" in str(e.value)
    assert not any(m == "GET" and "/resolve/" in p for m, p, _r in hub.requests)


def test_files_in_the_hugging_face_cache_are_used_online_and_offline(hub, tiny, tmp_path, monkeypatch):
    from huggingface_hub import snapshot_download

    snapshot_download(TINY_REPO, endpoint=hub.url, cache_dir=hub_api.cache_dir())  # e.g. from the PyTorch package
    fetched = len([1 for m, p, _r in hub.requests if m == "GET" and "/resolve/" in p])
    folder, _ = ModelManager(str(tmp_path / "online"), tiny).download("tiny")
    assert len([1 for m, p, _r in hub.requests if m == "GET" and "/resolve/" in p]) == fetched  # none again
    assert sorted(os.listdir(folder)) == sorted([*SMALL, "download.json"])

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = len(hub.requests)
    folder, listing = ModelManager(str(tmp_path / "offline"), tiny).download("tiny")
    assert len(hub.requests) == n  # offline: not one request
    assert listing.revision == hub.repos[TINY_REPO].commit
    for f in SMALL:
        assert os.path.getsize(os.path.join(folder, f)) == hub.repos[TINY_REPO].files[f].size
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    with pytest.raises(ManagerError) as e:
        ModelManager(str(tmp_path / "offline2"), tiny).download("tiny")
    print("\noffline without the files:", e.value)
    assert "offline" in str(e.value) and "HF_HUB_OFFLINE" in str(e.value)


def test_hub_errors_are_one_line(hub, tmp_path, monkeypatch):
    with pytest.raises(hub_api.HubError) as e:
        hub_api.list_files("nobody/nothing")
    assert "nobody/nothing was not found" in str(e.value)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: no network
    with pytest.raises(hub_api.HubError) as e:
        hub_api.list_files(TINY_REPO)
    print("\nno network:", e.value)
    assert "cannot reach" in str(e.value) and "\n" not in str(e.value)


def test_get_downloads_converts_records_and_the_engine_speaks(tmp_path, monkeypatch):
    """The whole way, as the app's manager does it: the random Nano published at the Hub's URLs,
    downloaded with a pause and a resume, verified, converted to Q4_0, recorded; then spoken."""
    from engine_native import Engine

    snap = snapshot_dir("nano")
    with HubServer({"ResembleAI/chatterbox-nano": snap}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        models = tmp_path / "models"
        stop, stages = threading.Event(), []

        t0, seen = time.monotonic(), set()

        def progress(p):
            stages.append(p.stage)
            if p.stage not in seen:  # where the time goes, on a busy machine
                seen.add(p.stage)
                print(f"{time.monotonic() - t0:6.1f} s  {p.stage}")
            if p.stage == "downloading" and p.done > 200 << 20:
                stop.set()

        with pytest.raises(Cancelled):
            ModelManager(str(models)).get("nano", "q4_0", progress=progress, stop=stop)
        (paused,) = ModelManager(str(models)).pending()
        assert paused.key == "nano" and paused.have > 200 << 20
        seen.clear()
        model = ModelManager(str(models)).get("nano", "q4_0", progress=progress)
    assert {"listing", "downloading", "verifying", "converting", "writing", "done"} <= set(stages)
    assert model.file == str(models / "chatterbox-nano-q4_0.gguf") and os.path.isfile(model.file)
    assert model.variant == "nano" and model.quant == "q4_0" and model.languages == ["en"]
    assert model.source == {"repo": "ResembleAI/chatterbox-nano", "revision": server.repos[
        "ResembleAI/chatterbox-nano"].commit}
    assert not (models / ".downloads" / "ResembleAI--chatterbox-nano").exists()  # the weights, once converted
    (listed,) = ModelManager(str(models)).installed()
    assert listed.source_text().startswith("ResembleAI/chatterbox-nano @ ")
    engine = Engine(model.file, threads=2)
    audio = engine.synthesize("Hello.", seed=1, max_tokens=10)
    assert audio.size > 0
    ModelManager(str(models)).remove(model.file)
    assert not os.path.exists(model.file) and ModelManager(str(models)).installed() == []
