"""A script (timed pauses, a cast, a lexicon, best-of-N: engine_native.script) as a stream of
chunks shaped like the engine's `Chunk`, so that whatever plays the engine's streams (the
app's player and take) plays a script the same way.

A pause joins the piece before it (a pause before the first piece joins the first piece):
a chunk always belongs to a sentence of the text, whose span the editor highlights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np


@dataclass
class ScriptChunk:
    """A piece of a rendered script, with the fields of the engine's Chunk a player reads."""

    samples: np.ndarray
    span: tuple[int, int]
    sentence_index: int
    n_sentences: int
    text: str
    is_last: bool
    timings: dict = field(default_factory=dict)
    score: float | None = None  # the piece's likeness (best-of-N), None for the rest


def script_chunks(engine, text: str, voices: dict, *, seed: int, options: dict, lexicon=None, best_of: int = 1,
                  speakers=None, cancel=None) -> Iterator[ScriptChunk]:
    """The script's audio as ScriptChunks. `voices`: speaker name (None: the narrator) -> Voice
    (None: the model's own); `cancel` (anything with `is_set()`) stops between chunks."""
    from engine_native.script import Pause, parse_script, pieces, render

    items = parse_script(text, speakers=speakers or None)
    n = len(pieces(items))
    last, held = None, []
    for part in render(engine, items, voices=voices, seed=seed, lexicon=lexicon, best_of=best_of,
                       options=options, cancel=cancel):
        if cancel is not None and cancel.is_set():
            return
        item = part.item
        if isinstance(item, Pause):
            if last is None:
                held.append(part.samples)
                continue
            item, final, score = last, False, None
        else:
            final, score, last = part.final, part.score, item
        samples = np.concatenate(held + [part.samples]) if held else part.samples
        held = []
        yield ScriptChunk(samples, (item.start, item.end), item.index, n, item.text, final, {"seed": seed}, score)
