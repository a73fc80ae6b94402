"""serve --cluster (app.cluster.serve) on a real local Ray cluster, driven by the official `openai`
client: two replicas each with an engine, requests spread over both, streaming kept, the local
server's error answers, and a replica killed while it streams (the request fails cleanly or is
retried, nothing hangs, the replica comes back)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers.ray_cluster import env, free_port

pytestmark = pytest.mark.cluster
TEXT = "The lighthouse keeper counted the ships. A small bell rang twice."


@pytest.fixture(scope="module")
def server(ray_cluster, cluster_model, tmp_path_factory):
    pytest.importorskip("openai")
    port = free_port()
    voices = tmp_path_factory.mktemp("voices")
    cmd = [sys.executable, "-m", "app", "serve", "-m", cluster_model, "--cluster",
           ray_cluster.address, "--replicas", "2", "--threads", "1", "--port", str(port), "--voices", str(voices)]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env(), start_new_session=True)
    log = []
    for line in p.stderr:
        log.append(line.rstrip())
        if line.startswith("serving"):
            break
    else:
        pytest.fail("the server did not start:\n" + "\n".join(log))
    threading.Thread(target=lambda: log.extend(ln.rstrip() for ln in p.stderr), daemon=True).start()
    yield f"http://127.0.0.1:{port}/v1", log
    os.killpg(p.pid, signal.SIGINT)
    try:
        assert p.wait(timeout=120) == 0, "\n".join(log)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def _speech(base, seed, *, kill=None, max_retries=2):
    """One streamed WAV request; kill(replica) is called once the first audio came."""
    from openai import OpenAI

    client = OpenAI(base_url=base, api_key="none", timeout=300.0, max_retries=max_retries)
    out = {"bytes": 0, "replica": None, "error": None}
    t0 = time.monotonic()
    try:
        with client.audio.speech.with_streaming_response.create(
                model="tts-1", voice="default", input=TEXT, response_format="wav",
                extra_body={"seed": seed, "max_tokens": 6}) as resp:
            out["replica"] = resp.headers.get("x-chatterbox-replica")
            for chunk in resp.iter_bytes():
                out["bytes"] += len(chunk)
                if kill is not None:
                    kill(out["replica"])
                    kill = None
    except Exception as e:
        out["error"] = type(e).__name__
    out["seconds"] = time.monotonic() - t0
    return out


def _run(n, target):
    results = [None] * n
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, target(i))) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a request hung"
    return results


def test_four_clients_spread_over_two_replicas_same_seed_same_audio(server):
    base, _ = server
    results = _run(4, lambda i: _speech(base, seed=7))
    assert all(r["error"] is None and r["bytes"] > 44 for r in results), results
    assert len({r["bytes"] for r in results}) == 1                      # one seed, one answer, any replica
    assert len({r["replica"] for r in results}) == 2, results          # both replicas served


def test_errors_are_the_local_servers(server):
    from openai import BadRequestError, NotFoundError, OpenAI

    base, _ = server
    client = OpenAI(base_url=base, api_key="none", max_retries=0)
    with pytest.raises(NotFoundError) as e:
        client.audio.speech.create(model="tts-1", voice="nobody", input="hello")
    assert e.value.body["code"] == "voice_not_found"
    with pytest.raises(BadRequestError) as e:
        client.audio.speech.create(model="tts-1", voice="default", input="hello", response_format="wav", speed=9)
    assert e.value.body["param"] == "speed"


def test_sse_events_stream_through_the_proxy(server):
    import base64
    import json

    from openai import OpenAI

    base, _ = server
    events = []
    client = OpenAI(base_url=base, api_key="none", timeout=300.0)
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="default", input=TEXT, response_format="pcm",
            extra_body={"stream_format": "sse", "seed": 7, "max_tokens": 6}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1) and len(events) > 2
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] > 0
    assert sum(len(base64.b64decode(e["audio"])) for e in events[:-1]) > 0


def test_a_replica_killed_while_streaming_fails_cleanly_and_is_replaced(server):
    base, log = server
    killed = []

    def kill(replica):
        pid = int(replica.split("@")[0])
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    results = _run(4, lambda i: _speech(base, seed=11, kill=kill if i == 0 else None))
    assert killed, results
    victim = results[0]
    # the client saw the cut (or the retry succeeded), within seconds: never a hang
    assert victim["error"] is not None or victim["bytes"] > 44, victim
    assert victim["seconds"] < 120, victim
    print(f"\nkilled replica {killed[0]}; its request: {victim}; others: {results[1:]}")
    # the other clients and later requests are answered; Serve replaced the replica
    deadline = time.monotonic() + 300
    replicas = set()
    while time.monotonic() < deadline and len(replicas) < 2:
        after = _run(2, lambda i: _speech(base, seed=13))
        assert all(r["error"] is None for r in after), after
        replicas |= {r["replica"] for r in after}
    assert len(replicas) == 2 and str(killed[0]) not in " ".join(replicas), replicas
