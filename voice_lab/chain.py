"""Filter chains as data: ordered, switchable steps, JSON round trip, ffmpeg rendering.

A chain is a list of steps (highpass, lowpass, peaking equalizer, denoise, loudness
normalisation, limiter, gain); each has parameters and an `enabled` switch. Chains
serialise to JSON (and so into a voice's metadata) and render through ffmpeg's filter
graph. Two presets: "clean" trusts the source, "lossy" repairs low-bitrate codecs
(a gentle high-pass, presence EQ, denoise, loudness, limiter); `choose_preset` picks one from the probe.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field

import numpy as np

from voice_lab.errors import ChainError, FfmpegMissingError

# kind -> {param: (default, min, max)}; every parameter is a number.
STEP_KINDS: dict[str, dict[str, tuple[float, float, float]]] = {
    "highpass": {"f": (60.0, 1.0, 20000.0)},
    "lowpass": {"f": (8000.0, 20.0, 96000.0)},
    # peaking equalizer: centre f (Hz), bandwidth w (Hz), gain g (dB)
    "equalizer": {"f": (1000.0, 1.0, 20000.0), "w": (200.0, 1.0, 20000.0), "g": (0.0, -30.0, 30.0)},
    # afftdn: noise reduction nr (dB), noise floor nf (dBFS); white-noise model
    "denoise": {"nr": (12.0, 0.01, 97.0), "nf": (-50.0, -80.0, -20.0)},
    # EBU R128 loudness normalisation: integrated I (LUFS), true peak TP (dBTP), range LRA (LU)
    "loudnorm": {"I": (-18.0, -70.0, -5.0), "TP": (-2.0, -9.0, 0.0), "LRA": (8.0, 1.0, 50.0)},
    # brick-wall limiter: ceiling as linear amplitude (0.85 ~ -1.4 dBFS), no auto level
    "limiter": {"limit": (0.85, 0.0625, 1.0)},
    "gain": {"db": (0.0, -60.0, 30.0)},
}


@dataclass
class Step:
    kind: str
    params: dict = field(default_factory=dict)
    enabled: bool = True

    def __post_init__(self) -> None:
        spec = STEP_KINDS.get(self.kind)
        if spec is None:
            raise ChainError(f"unknown filter step {self.kind!r} (known: {', '.join(STEP_KINDS)})")
        unknown = set(self.params) - set(spec)
        if unknown:
            raise ChainError(f"{self.kind}: unknown parameter(s) {', '.join(sorted(unknown))} "
                             f"(known: {', '.join(spec)})")
        full = {}
        for name, (default, lo, hi) in spec.items():
            v = self.params.get(name, default)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise ChainError(f"{self.kind}.{name} must be a number, got {v!r}")
            if not lo <= v <= hi:
                raise ChainError(f"{self.kind}.{name} = {v} is outside [{lo:g}, {hi:g}]")
            full[name] = float(v)
        self.params = full
        self.enabled = bool(self.enabled)

    def to_dict(self) -> dict:
        return {"type": self.kind, "enabled": self.enabled, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: dict) -> Step:
        if not isinstance(d, dict) or "type" not in d:
            raise ChainError(f"a chain step must be an object with a 'type', got {d!r}")
        return cls(d["type"], dict(d.get("params") or {}), d.get("enabled", True))

    def to_ffmpeg(self, loudnorm_measured: dict | None = None) -> str:
        p = {k: _num(v) for k, v in self.params.items()}
        if self.kind == "highpass":
            return f"highpass=f={p['f']}"
        if self.kind == "lowpass":
            return f"lowpass=f={p['f']}"
        if self.kind == "equalizer":  # widths are in Hz (t=h), as the presets give them
            return f"equalizer=f={p['f']}:t=h:w={p['w']}:g={p['g']}"
        if self.kind == "denoise":
            return f"afftdn=nr={p['nr']}:nf={p['nf']}:nt=w"
        if self.kind == "loudnorm":
            s = f"loudnorm=I={p['I']}:TP={p['TP']}:LRA={p['LRA']}"
            if loudnorm_measured is None:
                return s
            if loudnorm_measured == {}:
                return s + ":print_format=json"
            m = loudnorm_measured
            return (s + f":measured_I={m['input_i']}:measured_TP={m['input_tp']}"
                    f":measured_LRA={m['input_lra']}:measured_thresh={m['input_thresh']}"
                    f":offset={m['target_offset']}:linear=true")
        if self.kind == "limiter":
            return f"alimiter=limit={p['limit']}:level=disabled:latency=1"
        if self.kind == "gain":
            return f"volume={p['db']}dB"
        raise ChainError(f"unknown filter step {self.kind!r}")  # pragma: no cover


def _num(v: float) -> str:
    return f"{v:.6g}"


@dataclass
class Chain:
    name: str
    steps: list[Step] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "steps": [s.to_dict() for s in self.steps]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict) -> Chain:
        if not isinstance(d, dict) or not isinstance(d.get("steps"), list):
            raise ChainError("a chain must be an object with a 'steps' list")
        return cls(str(d.get("name", "custom")), [Step.from_dict(s) for s in d["steps"]])

    @classmethod
    def from_json(cls, text: str) -> Chain:
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ChainError(f"the chain is not valid JSON: {e}") from None
        return cls.from_dict(d)

    @classmethod
    def load(cls, path: str) -> Chain:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ChainError(f"cannot read chain file {path}: {e.strerror}") from None
        return cls.from_json(text)

    def copy(self) -> Chain:
        return copy.deepcopy(self)

    def enabled_steps(self) -> list[Step]:
        return [s for s in self.steps if s.enabled]

    def to_ffmpeg_filter(self, loudnorm_measured: dict | None = None) -> str:
        """The enabled steps as an ffmpeg filter graph string ('' when none is enabled)."""
        return ",".join(s.to_ffmpeg(loudnorm_measured if s.kind == "loudnorm" else None)
                        for s in self.enabled_steps())


def preset(name: str) -> Chain:
    """A fresh copy of a built-in chain: "clean" or "lossy"."""
    if name == "clean":
        return Chain("clean", [Step("highpass", {"f": 60}), Step("limiter", {"limit": 0.85})])
    if name == "lossy":
        return Chain("lossy", [
            Step("highpass", {"f": 60}),
            Step("denoise", {"nr": 6}),
            Step("equalizer", {"f": 200, "w": 150, "g": -1}),
            Step("equalizer", {"f": 3200, "w": 2200, "g": 2.5}),
            Step("equalizer", {"f": 7500, "w": 2500, "g": 3}),
            Step("loudnorm", {"I": -18, "TP": -2, "LRA": 8}),
            Step("limiter", {"limit": 0.85}),
        ])
    raise ChainError(f"unknown preset {name!r} (use 'clean' or 'lossy')")


PRESETS = ("clean", "lossy")
_LOSSLESS = {"flac", "alac", "wavpack", "ape", "tta", "truehd", "mlp", "shorten", "wmalossless"}


def choose_preset(probe) -> tuple[str, str]:
    """("clean" | "lossy", reason) from the probe's codec and bitrate.

    clean: PCM (WAV) and lossless codecs, AAC >= 96 kbps, MP3 >= 128 kbps;
    lossy: Opus and Vorbis at any bitrate, lower-bitrate AAC / MP3 (and other lossy
    codecs under 128 kbps or of unknown bitrate).
    """
    codec = (probe.codec or "").lower()
    br = probe.bit_rate
    kbps = f"{br / 1000:.0f} kbps" if br else "unknown bitrate"
    if codec.startswith("pcm_") or codec in _LOSSLESS:
        return "clean", f"{codec} is lossless"
    if codec in ("opus", "vorbis"):
        return "lossy", f"{codec} ({kbps}) always gets the lossy chain"
    limit = {"aac": 96000, "mp3": 128000}.get(codec, 128000)
    if br is not None and br >= limit:
        return "clean", f"{codec} at {kbps} (>= {limit // 1000} kbps)"
    return "lossy", f"{codec} at {kbps} (< {limit // 1000} kbps)"


def resolve(chain, probe) -> tuple[Chain, str]:
    """A Chain from "auto" / "clean" / "lossy" / a JSON file path / a Chain / a dict."""
    if isinstance(chain, Chain):
        return chain.copy(), "given"
    if isinstance(chain, dict):
        return Chain.from_dict(chain), "given"
    if chain in (None, "auto"):
        name, reason = choose_preset(probe)
        return preset(name), f"auto: {reason}"
    if chain in PRESETS:
        return preset(chain), "chosen by name"
    if isinstance(chain, str) and chain.lower().endswith(".json"):
        return Chain.load(chain), f"loaded from {chain}"
    raise ChainError(f"unknown chain {chain!r}: use auto, clean, lossy or a .json file")


#: Rendering may take this long plus one second per second of audio.
RENDER_TIMEOUT = 60.0
_JSON_BLOCK = re.compile(r"\{[^{}]*\"input_i\"[^{}]*\}", re.S)


def render(samples: np.ndarray, rate: int, chain: Chain, out_rate: int | None = None) -> tuple[np.ndarray, str]:
    """Run mono float32 `samples` through the chain with ffmpeg; returns (out_rate mono float32, filter).

    The signal is resampled to `out_rate` (default: the lab's OUTPUT_RATE) first, so every step
    sees the output rate.
    A loudnorm step runs in two passes (measure, then linear normalisation), which
    lands the integrated loudness on its target.
    """
    if out_rate is None:
        from voice_lab import OUTPUT_RATE

        out_rate = OUTPUT_RATE
    x = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
    steps = chain.enabled_steps()
    measured = None
    if any(s.kind == "loudnorm" for s in steps):
        pre = Chain(chain.name, steps[: next(i for i, s in enumerate(steps) if s.kind == "loudnorm") + 1])
        graph = f"aresample={out_rate}," + pre.to_ffmpeg_filter(loudnorm_measured={})
        _, err = _run_ffmpeg(x, rate, out_rate, graph)
        blocks = _JSON_BLOCK.findall(err)
        if not blocks:
            raise ChainError("loudnorm did not report its measurement")
        measured = json.loads(blocks[-1])
        if not np.isfinite(float(measured["input_i"])):  # silent input: nothing to normalise
            measured = None
    body = chain.to_ffmpeg_filter(loudnorm_measured=measured)
    graph = ",".join(p for p in (f"aresample={out_rate}", body, f"aresample={out_rate}") if p)
    if measured is None and any(s.kind == "loudnorm" for s in steps):
        graph = graph.replace(":print_format=json", "")
    out, _ = _run_ffmpeg(x, rate, out_rate, graph)
    return out, graph


def _run_ffmpeg(x: np.ndarray, rate: int, out_rate: int, graph: str) -> tuple[np.ndarray, str]:
    from voice_lab import ffmpeg_run

    if not ffmpeg_run.available():
        raise FfmpegMissingError("rendering a filter chain needs ffmpeg, which is not installed "
                                 "(install it, e.g. `apt install ffmpeg`)")
    seconds = x.size / rate
    # info level: loudnorm reports its measurement there
    command = ffmpeg_run.ffmpeg_command(*ffmpeg_run.pcm_input("f32le", rate, 1), "-af", graph, "-f", "f32le",
                                        "-acodec", "pcm_f32le", "-ar", str(out_rate), "-ac", "1", "pipe:1",
                                        loglevel="info")
    try:
        out, err = ffmpeg_run.run(command, stdin=x.tobytes(), timeout=RENDER_TIMEOUT + seconds,
                                  max_output=(int(seconds * out_rate) + out_rate) * 4 * 2, what="ffmpeg")
    except ffmpeg_run.FfmpegFailed as e:
        tail = e.stderr.strip().splitlines()[-3:]
        raise ChainError(f"ffmpeg rejected the filter chain {graph!r}: {' '.join(tail) or e}") from None
    return np.frombuffer(out, dtype="<f4").astype(np.float32), err
