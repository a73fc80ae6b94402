"""T3 KV caches belong to generation sessions: a cache is held by one live stream at a time,
close/completion release it, cancel() stops a stream between token steps, and two streams
on one T3 from two threads give the tokens each gives alone. Also: the options table and
the error classes native errors arrive as."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import engine_native
from engine_native import _core
from tests.helpers.models import model_path

TEXT = list(range(100, 120))


@pytest.fixture(scope="module")
def t3():
    return _core.T3(_core.ModelFile(str(model_path("nano", "q4_0")), threads=2))


def test_a_held_cache_refuses_a_second_stream_until_closed(t3):
    cache = _core.T3Cache(t3)
    a = t3.stream(TEXT, 20, 1, cache=cache)
    assert cache.in_use
    with pytest.raises(engine_native.EngineError, match="in use by another stream"):
        t3.stream(TEXT, 20, 2, cache=cache)
    a.next(3)
    a.close()
    assert a.done and not cache.in_use
    assert a.next(5) == []  # a closed stream never steps the cache again
    b = t3.stream(TEXT, 20, 1, cache=cache)  # same voice: the cached prefix is reused
    assert b.next(3) == a.tokens
    b.close()


def test_completion_releases_the_cache(t3):
    cache = _core.T3Cache(t3)
    s = t3.stream(TEXT, 4, 1, cache=cache)
    s.next(10)
    assert s.done and not cache.in_use


def test_cancel_stops_between_steps(t3):
    s = t3.stream(TEXT, 50, 1)
    s.next(2)
    s.cancel()
    assert s.next(10) == []
    assert s.done and s.cancelled


def test_two_streams_from_two_threads_match_their_solo_runs(t3):
    solo = [t3.generate(TEXT, 12, seed) for seed in (5, 6)]
    out = [None, None]

    def run(i, seed):
        s = t3.stream(TEXT, 12, seed)  # each with a private cache
        got = []
        while not s.done:
            got += s.next(2)
        out[i] = got

    threads = [threading.Thread(target=run, args=(i, seed)) for i, seed in enumerate((5, 6))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert out == [list(x) for x in solo]


def test_option_specs_drive_validation(t3):
    specs = {s["name"]: s for s in _core.option_specs()}
    assert specs["temperature"]["min_open"] and specs["temperature"]["max"] == 5.0
    assert specs["threads"] == {**specs["threads"], "kind": "int", "min": 1, "max": 256}
    assert specs["seed"]["max"] == 2**63 - 1000
    with pytest.raises(engine_native.ParameterError, match=r"temperature must be in \(0, 5\]"):
        t3.generate(TEXT, 4, 0, temperature=7.0)
    with pytest.raises(engine_native.ParameterError, match="threads"):
        _core.ModelFile(str(model_path("nano", "q4_0")), threads=999)


def test_native_errors_arrive_as_engine_error_classes(tmp_path):
    assert _core.EngineError is engine_native.EngineError
    with pytest.raises(engine_native.ModelError):
        _core.ModelFile(str(tmp_path / "missing.gguf"))
    with pytest.raises(engine_native.VoiceError):
        _core.T3(_core.ModelFile(str(model_path("nano", "q4_0")))).generate(TEXT, 2, speaker_emb=np.zeros(3))
