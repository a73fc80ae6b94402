"""Choose the part of a recording to clone from.

Prefer one continuous slice from the middle of the longest speech region (the
speaker is warmed up and has not started wrapping up). When no region is as long as
the target, join the best (longest) regions, each trimmed around its middle, in
their original order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from voice_lab.errors import NoSpeechError, TooLittleSpeechError
from voice_lab.silence import Span

#: Joined pieces shorter than this are not worth a cut.
MIN_PIECE_SECONDS = 0.5


@dataclass
class Window:
    method: str  # "continuous" or "joined"
    spans: list[Span] = field(default_factory=list)
    target: float = 0.0

    @property
    def duration(self) -> float:
        return sum(s.duration for s in self.spans)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "target": round(self.target, 4),
            "duration": round(self.duration, 4),
            "spans": [s.to_list() for s in self.spans],
        }


def _middle(region: Span, length: float) -> Span:
    mid = (region.start + region.end) / 2.0
    start = max(region.start, mid - length / 2.0)
    return Span(start, min(region.end, start + length))


def choose_window(regions: list[Span], target: float, minimum: float) -> Window:
    """Pick spans totalling `target` seconds (or all the speech there is, if longer than `minimum`).

    Raises NoSpeechError without speech, TooLittleSpeechError when the speech is not
    longer than `minimum` in total.
    """
    regions = [r for r in regions if r.duration > 0]
    if not regions:
        raise NoSpeechError("no speech found: the recording is silent throughout")
    total = sum(r.duration for r in regions)
    if total <= minimum:
        raise TooLittleSpeechError(
            f"only {total:.2f} s of speech found; cloning needs more than {minimum:.1f} s"
        )
    longest = max(regions, key=lambda r: r.duration)
    if longest.duration >= target:
        return Window("continuous", [_middle(longest, target)], target)
    # join: longest first, each trimmed around its middle to what is still needed
    chosen: list[Span] = []
    need = target
    for r in sorted(regions, key=lambda r: r.duration, reverse=True):
        if need <= 1e-9:
            break
        if r.duration < MIN_PIECE_SECONDS and sum(c.duration for c in chosen) > minimum:
            break
        take = min(r.duration, need)
        if take < MIN_PIECE_SECONDS and chosen and sum(c.duration for c in chosen) > minimum:
            break
        chosen.append(_middle(r, take))
        need -= take
    chosen.sort(key=lambda s: s.start)
    return Window("joined", chosen, target)
