"""The one options schema: every synthesis option's name, type, range and meaning.

The ranges live in the native engine's table (`_core.option_specs()`), which the C++
validation uses too, so Python and C++ accept exactly the same values. Defaults come from
the model file (`Engine.defaults`). The Engine, the command line's argument parser, the
app's sampling panel and its typed settings all read this module.

`check(name, value)` turns any value of any type or size into a number within the
option's range or a `ParameterError` naming the option and its range: 2**64, 10**400,
NaN, "abc", True and None (for a required option) included.
"""

from __future__ import annotations

import math
import numbers
import secrets
from dataclasses import dataclass
from functools import lru_cache

from engine_native.errors import ParameterError

# Options that shape the sampling and the audio (sent to synthesize / stream).
SAMPLING = ("temperature", "top_k", "top_p", "repetition_penalty", "min_p", "cfm_steps", "max_tokens",
            "prompt_seconds")
# Options of Multilingual models only (a Turbo or Nano model refuses them unless None).
MTL = ("exaggeration", "cfg_weight")
# Options of Engine.stream only: how the audio is cut into chunks.
STREAMING = ("first_chunk_tokens", "chunk_tokens")


@dataclass(frozen=True)
class Option:
    name: str
    kind: type            # int or float
    min: float
    max: float
    min_open: bool        # True: the minimum itself is excluded
    max_open: bool
    doc: str

    @property
    def flag(self) -> str:
        """The command-line flag: --top-k for top_k."""
        return "--" + self.name.replace("_", "-")

    def range_text(self) -> str:
        lo = int(self.min) if self.kind is int else self.min
        hi = int(self.max) if self.kind is int else self.max
        return f"{'(' if self.min_open else '['}{lo}, {hi}{')' if self.max_open else ']'}"

    def check(self, value, *, upper: float | None = None):
        """`value` as this option's type, or ParameterError. `upper` narrows the maximum
        (e.g. max_tokens by the model's context)."""
        hi = self.max if upper is None else min(self.max, upper)
        rng = self.range_text() if upper is None else Option(self.name, self.kind, self.min, hi, self.min_open,
                                                              self.max_open, self.doc).range_text()
        bad = ParameterError(f"{self.name} must be {'a whole number' if self.kind is int else 'a number'} "
                             f"in {rng}; got {_show(value)}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise bad
        if self.kind is int:
            if isinstance(value, numbers.Integral):
                v = int(value)
            else:
                try:
                    f = float(value)
                except (OverflowError, ValueError):
                    raise bad from None
                if not math.isfinite(f) or f != math.floor(f):
                    raise bad
                v = int(f)
        else:
            try:
                v = float(value)
            except (OverflowError, ValueError):
                raise bad from None
            if not math.isfinite(v):
                raise bad
        # Python compares ints and floats exactly, whatever their size.
        if v < self.min or v > hi or (self.min_open and v == self.min) or (self.max_open and v == hi):
            raise bad
        return v

    def parse(self, text: str):
        """A command-line string -> the checked value (argparse `type=`)."""
        try:
            value = int(text) if self.kind is int else float(text)
        except ValueError:
            raise ParameterError(f"{self.flag} takes {'a whole number' if self.kind is int else 'a number'}; "
                                 f"got {text!r}") from None
        return self.check(value)


def _show(value) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


@lru_cache(maxsize=1)
def options() -> dict[str, Option]:
    """Every option by name, from the native table."""
    from engine_native import _core

    out = {}
    for s in _core.option_specs():
        out[s["name"]] = Option(s["name"], int if s["kind"] == "int" else float, s["min"], s["max"],
                                bool(s["min_open"]), bool(s["max_open"]), s["doc"])
    return out


def option(name: str) -> Option:
    try:
        return options()[name]
    except KeyError:
        raise ParameterError(f"unknown option {name!r}; the options are {', '.join(sorted(options()))}") from None


def check(name: str, value, *, upper: float | None = None):
    return option(name).check(value, upper=upper)


# Seeds a take draws when none is given: the range every caller's seed option accepts and
# that fits a C int on every side of the native boundary.
_RANDOM_SEEDS = 2**31


def random_seed() -> int:
    """A fresh random seed for a take (in [0, 2**31)): the one place a seed is drawn, so the
    engine, the app and the command line choose seeds alike."""
    return secrets.randbelow(_RANDOM_SEEDS)


def take_seed(seed) -> int:
    """The seed a take uses: `seed` checked (ParameterError when out of range), a fresh
    `random_seed()` when None."""
    return random_seed() if seed is None else check("seed", seed)


def derived_seed(seed: int, offset: int) -> int:
    """The seed of a take's part (a sentence: + its index; a retry, a best-of candidate, a
    chapter: + their strides): `seed + offset`, wrapped into the seed option's range, so every
    documented seed works for a text of any length (a part's seed may then repeat another
    take's, which only makes two takes share a draw). `seed` itself must be a valid seed
    (ParameterError otherwise: a part never turns an invalid seed into a valid one)."""
    return (check("seed", seed) + offset) % (option("seed").max + 1)
