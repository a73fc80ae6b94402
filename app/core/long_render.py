"""Long renders that survive a crash: finished pieces kept on disk, resumed by the same command.

Design: rendering a script into OUT (say -f BOOK.txt -o BOOK.mp3, or the app's "Export
script") keeps a sidecar folder `OUT.parts/` beside the output. Every finished piece (a
sentence, or the part of one between two timed pauses) is written there at once, as a
float32 WAV named by the SHA-256 of everything its samples depend on: the text actually
spoken (after the lexicon), the voice's conditioning tensors, the piece's seed, the
synthesis and streaming options, best-of-N, the model file (name and size) and whether the
engine watermarks its audio. Each file
is written atomically (engine_native.files), so a crash or Ctrl-C leaves only whole
pieces. Running the same command again serves the pieces already there, renders the rest,
and assembles the output (pauses are exact zeros and cost nothing); float32 WAV keeps the
samples bit for bit, so a resumed render equals an uninterrupted one. The folder is
removed once the output is written (unless asked to keep it). Editing the script only
re-renders the pieces whose text (or seed: a piece's seed is seed + its index) changed. A
render asked for no seed keeps the random one it drew in the folder too (`seed`), so running
it again finds its pieces.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

PARTS_SUFFIX = ".parts"
SEED_FILE = "seed"  # the seed of a render without one, kept beside its pieces


def parts_dir_for(output: str | os.PathLike) -> Path:
    return Path(str(output) + PARTS_SUFFIX)


def _voice_digest(voice) -> str:
    if voice is None:
        return "builtin"
    h = hashlib.sha256()
    for name in ("speaker_emb", "cond_prompt_speech_tokens", "embedding", "prompt_token", "prompt_feat"):
        h.update(np.ascontiguousarray(getattr(voice, name)).tobytes())
    return h.hexdigest()[:16]


def model_identity(model_path: str | os.PathLike | None) -> str:
    """What a piece's key records of the model: its file name and size (a cluster's workers
    report theirs, so a render through the cluster keys its pieces as a local one)."""
    try:
        st = os.stat(model_path) if model_path else None
        return f"{Path(model_path).name}:{st.st_size}" if st else ""
    except OSError:
        return str(model_path)


class PartsCache:
    """Finished pieces of one render, on disk (see the module)."""

    def __init__(self, folder: str | os.PathLike, *, model_path: str | os.PathLike | None = None,
                 model_id: str | None = None, stream_options: dict | None = None, rate: int = 24000,
                 watermark: bool = False):
        self.folder = Path(folder)
        self.rate = rate
        self.stream_options = dict(stream_options or {})
        self.model_id = model_identity(model_path) if model_id is None else model_id
        if watermark:  # what made the pieces: marked ones never stand in for unmarked, nor the reverse
            self.model_id += ":watermark"
        self.hits = 0
        self.written = 0
        self._voices: dict[int, str] = {}
        self._seed: int | None = None

    def seed(self, requested: int | None) -> int:
        """The render's seed: `requested`, else the one an interrupted render of this output
        drew (kept beside its pieces), else a new random one, kept with the pieces so that
        rendering again without a seed resumes instead of starting over."""
        if requested is not None and requested >= 0:
            return int(requested)
        try:
            return int((self.folder / SEED_FILE).read_text().strip())
        except (OSError, ValueError):
            from engine_native.options import random_seed

            self._seed = random_seed()  # written with the first piece
            return self._seed

    def key(self, text: str, voice, seed: int, options: dict, best_of: int) -> str:
        vid = self._voices.get(id(voice))
        if vid is None:
            vid = self._voices[id(voice)] = _voice_digest(voice)
        blob = json.dumps({"text": text, "voice": vid, "seed": int(seed), "options": options,
                           "stream": self.stream_options, "best_of": int(best_of), "model": self.model_id},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.wav"

    def get(self, key: str) -> np.ndarray | None:
        p = self._path(key)
        if not p.is_file():
            return None
        import soundfile as sf

        try:
            data, rate = sf.read(str(p), dtype="float32", always_2d=False)
        except Exception:  # a damaged part is rendered again
            return None
        if rate != self.rate:
            return None
        self.hits += 1
        return np.asarray(data, np.float32).reshape(-1)

    def put(self, key: str, samples: np.ndarray) -> None:
        import soundfile as sf

        from engine_native.files import atomic_write

        self.folder.mkdir(parents=True, exist_ok=True)
        if self._seed is not None and not (self.folder / SEED_FILE).is_file():  # a drawn seed
            atomic_write(self.folder / SEED_FILE, lambda tmp: Path(tmp).write_text(f"{self._seed}\n"))
        x = np.asarray(samples, np.float32).reshape(-1)
        atomic_write(self._path(key), lambda tmp: sf.write(str(tmp), x, self.rate, format="WAV", subtype="FLOAT"))
        self.written += 1

    def count(self) -> int:
        return len(list(self.folder.glob("*.wav"))) if self.folder.is_dir() else 0

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def render_script_file(engine, text: str, path: str, *, voices: dict, seed: int | None, options: dict,
                       lexicon=None, best_of: int = 1, speakers=None, model_path: str = "", cancel=None,
                       progress=None) -> dict:
    """Render a script into `path` through a PartsCache (an interrupted render resumes: see the
    module). `voices`: speaker name (None: the narrator) -> Voice; `options`: synthesis and
    stream options; `progress(fraction, eta_s, done, total)` after each finished piece;
    `cancel` (anything with `is_set()`) stops between chunks and raises Cancelled."""
    from app.core.provenance import Provenance, voice_names
    from app.core.take import export_audio
    from engine_native.errors import Cancelled
    from engine_native.script import Progress, parse_script, render

    items = parse_script(text, speakers=speakers or None)
    opts = dict(options)
    stream = {k: opts.pop(k) for k in ("first_chunk_tokens", "chunk_tokens") if k in opts}
    opts.pop("seed", None)
    cache = PartsCache(parts_dir_for(path), model_path=model_path, stream_options=stream, rate=engine.sample_rate,
                       watermark=engine.watermark)
    seed = cache.seed(seed)
    done = Progress(items)
    audio = []
    for part in render(engine, items, voices=voices, seed=seed, lexicon=lexicon, best_of=best_of, options=opts,
                       stream_options=stream, cache=cache, cancel=cancel):
        audio.append(part.samples)
        done.update(part)
        if part.final and progress is not None:
            progress(done.fraction, done.eta_s, done.done, done.total)
    if cancel is not None and cancel.is_set():
        raise Cancelled("export cancelled")
    samples = np.concatenate(audio) if audio else np.zeros(0, np.float32)
    export_audio(samples, engine.sample_rate, path, Provenance.of(engine, voice_names(voices)))
    cache.remove()
    return {"path": path, "seconds": samples.size / engine.sample_rate, "resumed": cache.hits, "seed": seed}


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def chapter_files(output: str, n: int) -> list[str]:
    """BOOK.mp3 -> BOOK-01.mp3, BOOK-02.mp3, ... (two digits at least)."""
    stem, ext = os.path.splitext(output)
    width = max(2, len(str(n)))
    return [f"{stem}-{i + 1:0{width}d}{ext}" for i in range(n)]


def ffmetadata(chapters: list[tuple[str, int, int]], rate: int, tags: dict[str, str] | None = None) -> str:
    """An ffmpeg FFMETADATA1 file with chapter marks: (title, start sample, end sample), and
    the file's own tags (title, artist, ...) when given."""
    def esc(s: str) -> str:
        return "".join("\\" + c if c in "=;#\\\n" else c for c in s)

    lines = [";FFMETADATA1"] + [f"{esc(k)}={esc(str(v))}" for k, v in (tags or {}).items() if v not in (None, "")]
    for title, a, b in chapters:
        lines += ["[CHAPTER]", "TIMEBASE=1/1000", f"START={a * 1000 // rate}", f"END={b * 1000 // rate}",
                  f"title={esc(title)}"]
    return "\n".join(lines) + "\n"


def add_chapter_marks(path: str, chapters: list[tuple[str, int, int]], rate: int) -> None:
    """Chapter marks into an MP3 (ID3v2 CHAP frames, via ffmpeg; the audio and the file's own
    tags are copied, not re-encoded), atomically."""
    import tempfile

    from engine_native.files import atomic_write
    from voice_lab import ffmpeg_run

    if ffmpeg_run.ffmpeg_path() is None:
        raise OSError("chapter marks need ffmpeg")
    meta_fd, meta_path = tempfile.mkstemp(suffix=".ffmetadata")
    audio_fd = os.open(path, ffmpeg_run.OPEN_FLAGS)
    try:
        os.write(meta_fd, ffmetadata(chapters, rate).encode("utf-8"))

        def write(tmp) -> None:
            command = ffmpeg_run.ffmpeg_command(
                "-y", *ffmpeg_run.file_input(audio_fd, "mp3", path),
                *ffmpeg_run.file_input(meta_fd, "ffmetadata", meta_path),
                "-map_metadata", "0", "-map_chapters", "1", "-c", "copy", "-id3v2_version", "3", "-f", "mp3", str(tmp))
            try:
                ffmpeg_run.run(command, files=(audio_fd, meta_fd), max_output=0,
                               timeout=60 + os.fstat(audio_fd).st_size / 1e6, what="ffmpeg")
            except ffmpeg_run.FfmpegFailed as e:
                raise OSError(f"ffmpeg could not write chapter marks: {ffmpeg_run.last_line(e.stderr)}") from None

        atomic_write(path, write)
    finally:
        os.close(audio_fd)
        os.close(meta_fd)
        os.unlink(meta_path)
