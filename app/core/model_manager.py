"""The models the app has and gets, Qt-free: the published models (a catalogue), the installed
ones (an index beside the files, MODELS_DIR/models.json), getting one (listed on the Hub,
free space checked, downloaded with pause and resume, checksums verified, converted and
quantised into MODELS_DIR/chatterbox-VARIANT-QUANT.gguf) and removing one. The command line
(`models list|get|rm`) and the app's model manager both use it; every call that touches
the disk or the network blocks (the app runs them off the GUI thread).

    manager = ModelManager(models_dir)
    model = manager.get("turbo", "q4_0", progress=print, stop=event)   # stop.set(): paused
    manager.pending()      # downloads paused (or cut off): get() again resumes them
    manager.installed()    # [InstalledModel(file, variant, quant, size, languages, source)]

A download lives in MODELS_DIR/.downloads/OWNER--NAME/ until it is converted: its state
(download.json: the commit, each file's size and checksum, the precision asked for) and
the files, each growing in NAME.part until it is whole and verified. Resuming, after a
pause or a restart, asks for the same commit and the bytes still missing.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from app.core import hub
from app.core.voice_library import VARIANT_NAMES
from engine_native.errors import Cancelled

QUANTS = ("q4_0", "q8_0", "f16", "f32")
INDEX = "models.json"
DOWNLOADS = ".downloads"
STATE = "download.json"
# The converted file's size as a share of the snapshot's (measured on Turbo and Nano, rounded up).
MODEL_SHARE = {"f32": 1.0, "f16": 0.7, "q8_0": 0.6, "q5_0": 0.55, "q4_0": 0.55}
SPACE_MARGIN = 64 << 20


class ManagerError(Exception):
    """What went wrong, in one line that says what to do."""


@dataclass(frozen=True)
class CatalogueEntry:
    key: str
    repo: str
    variant: str
    languages: str
    about: str
    required: tuple[str, ...] = ()   # the files to fetch; () = what the converter reads for the variant
    optional: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"Chatterbox {VARIANT_NAMES.get(self.variant, self.variant)}"

    def files(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(required, fetched when the repository has them)."""
        if self.required:
            return self.required, self.optional
        from engine_native.convert import snapshot_files

        return snapshot_files(self.variant)


CATALOGUE: dict[str, CatalogueEntry] = {e.key: e for e in (
    CatalogueEntry("turbo", "ResembleAI/chatterbox-turbo", "turbo", "English",
                   "The best English voice; expression tags such as [laugh]."),
    CatalogueEntry("mtl", "ResembleAI/chatterbox", "mtl", "23 languages",
                   "Arabic to Chinese; emotion exaggeration and guidance."),
    CatalogueEntry("nano", "ResembleAI/chatterbox-nano", "nano", "English",
                   "Small and quick: for slower computers."),
)}


def model_file(models_dir: str, variant: str, quant: str) -> str:
    return os.path.join(models_dir, f"chatterbox-{variant}-{quant}.gguf")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def size_text(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} bytes"


def duration_text(s: float) -> str:
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


@dataclass
class InstalledModel:
    file: str
    variant: str
    quant: str
    size: int
    languages: list[str] = field(default_factory=list)
    source: dict = field(default_factory=dict)    # {"repo", "revision"} | {"folder"} | {}
    installed_at: str = ""

    @property
    def name(self) -> str:
        return f"Chatterbox {VARIANT_NAMES.get(self.variant, self.variant or '?')}"

    def source_text(self) -> str:
        if self.source.get("repo"):
            return f"{self.source['repo']} @ {str(self.source.get('revision', '?'))[:10]}"
        if self.source.get("folder"):
            return f"converted from {self.source['folder']}"
        return "placed here by hand"

    def languages_text(self) -> str:
        if len(self.languages) > 3:
            return f"{len(self.languages)} languages"
        return ", ".join(self.languages) or "?"


@dataclass
class Progress:
    """Where a get() is: stage "listing", "downloading", "verifying", "converting", "writing",
    "done"; bytes for the two byte stages, a fraction for all but "listing"."""
    stage: str
    fraction: float | None = None
    done: int = 0
    total: int = 0
    speed: float = 0.0            # bytes per second (downloading)
    eta: float | None = None      # seconds left (downloading)
    file: str = ""

    def text(self) -> str:
        if self.stage == "downloading":
            parts = [f"Downloading {self.file}", f"{size_text(self.done)} of {size_text(self.total)}"]
            if self.speed > 0:
                parts.append(f"{size_text(self.speed)}/s")
            if self.eta is not None:
                parts.append(f"{duration_text(self.eta)} left")
            return " · ".join(parts)
        if self.stage == "verifying":
            return f"Checking {self.file} ({size_text(self.done)} of {size_text(self.total)})"
        if self.stage == "converting":
            return f"Converting and quantising: {100 * (self.fraction or 0):.0f} %"
        return {"listing": "Asking the Hub for the file list…", "reading": "Reading the downloaded weights…",
                "writing": "Writing the model file…", "done": "Done"}.get(self.stage, self.stage)


@dataclass
class PendingDownload:
    key: str
    variant: str
    repo: str
    revision: str
    quant: str
    have: int
    total: int
    folder: str

    @property
    def name(self) -> str:
        return f"Chatterbox {VARIANT_NAMES.get(self.variant, self.repo)}"


class _Rate:
    """Bytes per second over the last few seconds, and the time left."""

    def __init__(self, window_s: float = 4.0):
        self.window, self.samples = window_s, []

    def add(self, done: int) -> None:
        now = time.monotonic()
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.pop(0)

    def speed(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


class ModelManager:
    def __init__(self, models_dir: str, catalogue: dict[str, CatalogueEntry] | None = None):
        self.models_dir = models_dir
        self.catalogue = CATALOGUE if catalogue is None else catalogue
        self._lock = threading.Lock()

    # --- what is installed ---------------------------------------------------------------------------

    @property
    def index_path(self) -> str:
        return os.path.join(self.models_dir, INDEX)

    def _read_index(self) -> dict:
        try:
            with open(self.index_path, encoding="utf-8") as f:
                data = json.load(f)
            return data if isinstance(data, dict) and isinstance(data.get("models"), dict) else {"models": {}}
        except (OSError, ValueError):
            return {"models": {}}

    def _write_index(self, data: dict) -> None:
        from engine_native.files import atomic_write

        os.makedirs(self.models_dir, exist_ok=True)
        text = json.dumps(data, indent=1, sort_keys=True)
        atomic_write(self.index_path, lambda tmp: tmp.write_text(text, encoding="utf-8"))

    def installed(self) -> list[InstalledModel]:
        """Every model file in the folder: the index's record of it, or its header's for one
        placed there by hand (or whose record was lost)."""
        with self._lock:
            records = self._read_index()["models"]
        out = []
        try:
            names = sorted(n for n in os.listdir(self.models_dir) if n.endswith(".gguf") and not n.startswith("."))
        except OSError:
            names = []
        for name in names:
            path = os.path.join(self.models_dir, name)
            rec = records.get(name)
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            if rec and rec.get("size") == size:
                out.append(InstalledModel(path, rec.get("variant", ""), rec.get("quant", ""), size,
                                          list(rec.get("languages", [])), dict(rec.get("source", {})),
                                          rec.get("installed_at", "")))
                continue
            described = describe_model(path)
            if described is not None:
                out.append(described)
        return out

    def record(self, path: str, source: dict) -> InstalledModel:
        """Adds (or replaces) a model file's record in the index."""
        model = describe_model(path)
        if model is None:
            raise ManagerError(f"{path} is not a Chatterbox model")
        model.source, model.installed_at = source, _now()
        with self._lock:
            data = self._read_index()
            rec = asdict(model)
            del rec["file"]
            data["models"][os.path.basename(path)] = rec
            self._write_index(data)
        return model

    def remove(self, path: str) -> None:
        """Deletes an installed model file and its record."""
        path = os.path.abspath(path)
        if os.path.dirname(path) != os.path.abspath(self.models_dir) or not path.endswith(".gguf"):
            raise ManagerError(f"{path} is not one of the models in {self.models_dir}")
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise ManagerError(f"cannot delete {path}: {e.strerror}") from None
        with self._lock:
            data = self._read_index()
            if data["models"].pop(os.path.basename(path), None) is not None:
                self._write_index(data)

    def find(self, what: str) -> InstalledModel | None:
        """An installed model by file name, path, or catalogue key ("turbo": the first Turbo)."""
        models = self.installed()
        for m in models:
            if what in (m.file, os.path.basename(m.file), os.path.basename(m.file).removesuffix(".gguf")):
                return m
        variant = self.catalogue[what].variant if what in self.catalogue else what
        return next((m for m in models if m.variant == variant), None)

    # --- downloads in progress ---------------------------------------------------------------------------

    def _download_folder(self, repo: str) -> str:
        return os.path.join(self.models_dir, DOWNLOADS, repo.replace("/", "--"))

    def pending(self) -> list[PendingDownload]:
        """Downloads paused or cut off, with what they hold: get() with the same key resumes one."""
        root = os.path.join(self.models_dir, DOWNLOADS)
        out = []
        try:
            folders = sorted(os.listdir(root))
        except OSError:
            return out
        for name in folders:
            state = _read_state(os.path.join(root, name))
            if state is None:
                continue
            files = [hub.RemoteFile.from_json(f) for f in state["files"]]
            have = sum(_have(os.path.join(root, name), f) for f in files)
            out.append(PendingDownload(state["key"], state.get("variant", ""), state["repo"], state["revision"],
                                       state["quant"], have,
                                       sum(f.size for f in files), os.path.join(root, name)))
        return out

    def discard(self, key: str) -> None:
        """Throws a paused download away."""
        shutil.rmtree(self._download_folder(self.catalogue[key].repo), ignore_errors=True)

    # --- getting a model ----------------------------------------------------------------------------------

    def get(self, key: str, quant: str = "q4_0", *, progress: Callable[[Progress], None] | None = None,
            stop: threading.Event | None = None, keep_download: bool = False, force: bool = False) -> InstalledModel:
        """Download a catalogue model (resuming a paused download of it), verify it, convert it
        at `quant` and record it. Cancelled when `stop` is set (the download is kept: get()
        again resumes it); ManagerError (or hub.HubError) with a message otherwise."""
        entry = self._entry(key)
        if quant not in QUANTS:
            raise ManagerError(f"unknown precision {quant!r}; choose {', '.join(QUANTS)}")
        report = progress or (lambda _p: None)
        out = model_file(self.models_dir, entry.variant, quant)
        if os.path.exists(out) and not force:
            found = next((m for m in self.installed() if m.file == out), None)
            if found is not None:
                report(Progress("done", 1.0))
                return found
        folder, listing = self.download(key, quant, progress=report, stop=stop)
        return self._convert(folder, out, quant, {"repo": entry.repo, "revision": listing.revision}, report, stop,
                             keep_folder=keep_download)

    def download(self, key: str, quant: str = "q4_0", *, progress: Callable[[Progress], None] | None = None,
                 stop: threading.Event | None = None) -> tuple[str, hub.RemoteRepo]:
        """The catalogue model's files, whole and verified, in its download folder (resuming what
        is there): (the folder, the listing). The first half of get()."""
        entry = self._entry(key)
        report = progress or (lambda _p: None)
        folder = self._download_folder(entry.repo)
        os.makedirs(folder, exist_ok=True)
        listing = self._listing(entry, quant, folder, report)
        self._fetch(entry, listing, folder, quant, report, stop)
        return folder, listing

    def _entry(self, key: str) -> CatalogueEntry:
        if key not in self.catalogue:
            raise ManagerError(f"unknown model {key!r}; choose {', '.join(self.catalogue)}")
        return self.catalogue[key]

    def convert_folder(self, folder: str, quant: str = "q4_0", *, progress: Callable[[Progress], None] | None = None,
                       stop: threading.Event | None = None) -> InstalledModel:
        """A Hugging Face snapshot folder the user has, converted into the models folder."""
        from engine_native.convert import ConvertError, detect_variant

        try:
            variant = detect_variant(folder)
        except ConvertError as e:
            raise ManagerError(str(e)) from None
        out = model_file(self.models_dir, variant, quant)
        return self._convert(folder, out, quant, {"folder": os.path.abspath(folder)}, progress or (lambda _p: None),
                             stop, keep_folder=True)

    def _listing(self, entry: CatalogueEntry, quant: str, folder: str, report) -> hub.RemoteRepo:
        """The files to fetch: those of the paused download in `folder` (the same commit), else
        the Hub's list now (or, offline, the Hugging Face cache's)."""
        state = _read_state(folder)
        if state is not None and state["repo"] == entry.repo:
            if state["quant"] != quant:
                state["quant"] = quant
                _write_state(folder, state)
            return hub.RemoteRepo(entry.repo, state["revision"], tuple(hub.RemoteFile.from_json(f) for f in state["files"]))
        required, optional = entry.files()
        if hub.offline():
            return self._offline_listing(entry, folder, quant, required, optional)
        report(Progress("listing"))
        listing = hub.list_files(entry.repo)
        by_name = {f.name: f for f in listing.files}
        missing = [n for n in required if n not in by_name]
        if missing:
            raise ManagerError(f"{entry.repo} at {listing.revision[:10]} lacks {', '.join(missing)}: "
                               "not a Chatterbox snapshot this version can convert")
        files = tuple(sorted((by_name[n] for n in (*required, *optional) if n in by_name), key=lambda f: f.size))
        listing = hub.RemoteRepo(entry.repo, listing.revision, files)
        _write_state(folder, {"key": entry.key, "variant": entry.variant, "repo": entry.repo,
                              "revision": listing.revision, "quant": quant,
                              "endpoint": hub.endpoint(), "started_at": _now(),
                              "files": [f.as_json() for f in files]})
        return listing

    def _offline_listing(self, entry, folder, quant, required, optional) -> hub.RemoteRepo:
        found = hub.cached_snapshot(entry.repo, list(required))
        if found is None:
            raise ManagerError(f"offline (HF_HUB_OFFLINE is set) and {entry.repo} is neither being downloaded "
                               f"here nor in the Hugging Face cache ({hub.cache_dir()})")
        commit, paths = found
        for name in optional:
            p = hub.cached_file(entry.repo, commit, name)
            if p:
                paths[name] = p
        # Offline there is no list of checksums: the cache's files are taken as hf_hub_download left them.
        files = tuple(hub.RemoteFile(n, os.path.getsize(p)) for n, p in paths.items())
        _write_state(folder, {"key": entry.key, "variant": entry.variant, "repo": entry.repo, "revision": commit,
                              "quant": quant,
                              "endpoint": None, "started_at": _now(), "files": [f.as_json() for f in files]})
        return hub.RemoteRepo(entry.repo, commit, files)

    def _fetch(self, entry, listing: hub.RemoteRepo, folder: str, quant: str, report, stop) -> None:
        """Every file of `listing` whole and verified in `folder`: from the Hugging Face cache
        where it is there already, else downloaded (resuming a partial file)."""
        todo = [f for f in listing.files if not os.path.exists(os.path.join(folder, f.name))]
        from_cache = {}
        for f in todo:
            cached = hub.cached_file(entry.repo, listing.revision, f.name)
            if cached and os.path.getsize(cached) == f.size:
                from_cache[f.name] = cached
        to_download = [f for f in todo if f.name not in from_cache]
        total = sum(f.size for f in to_download)
        done = sum(hub.partial_size(_partial(folder, f)) for f in to_download)
        self.check_space(entry, listing, quant, total - done)
        rate, state = _Rate(), {"done": done, "last": 0.0, "file": None}

        def on_bytes(f, n):
            state["done"] += n
            now = time.monotonic()
            if now - state["last"] >= 0.2 or state["done"] >= total or f.name != state["file"]:
                state["last"], state["file"] = now, f.name
                rate.add(state["done"])
                speed = rate.speed()
                eta = (total - state["done"]) / speed if speed > 0 else None
                report(Progress("downloading", state["done"] / total if total else 1.0, state["done"], total,
                                speed, eta, f.name))

        for f in todo:
            if stop is not None and stop.is_set():
                raise Cancelled("download paused")
            final = os.path.join(folder, f.name)
            if f.name in from_cache:
                try:
                    hub.verify(from_cache[f.name], f, entry.repo, stop, delete=False,
                               on_bytes=_counter(report, "verifying", f))
                    _link(from_cache[f.name], final)
                    continue
                except hub.CorruptedDownload:  # the cache's copy is damaged: download it anew
                    pass
            partial = _partial(folder, f)
            hub.download(listing, f, partial, lambda n, f=f: on_bytes(f, n), stop)
            hub.verify(partial, f, entry.repo, stop, on_bytes=_counter(report, "verifying", f))
            os.replace(partial, final)

    def check_space(self, entry, listing: hub.RemoteRepo, quant: str, to_download: int) -> None:
        """ManagerError unless the models folder's disk holds what is left to download plus the
        converted model."""
        weights = sum(f.size for f in listing.files)
        model = int(weights * MODEL_SHARE.get(quant, 1.0))
        need = to_download + model + SPACE_MARGIN
        free = shutil.disk_usage(self.models_dir).free
        if free < need:
            raise ManagerError(f"not enough free space in {self.models_dir}: {entry.name} needs "
                               f"{size_text(need)} ({size_text(to_download)} still to download, about "
                               f"{size_text(model)} for the {quant} model file); {size_text(free)} is free")

    def _convert(self, folder: str, out: str, quant: str, source: dict, report, stop, keep_folder: bool):
        from engine_native.convert import ConvertError, convert

        def on_progress(stage: str, fraction: float) -> None:
            if stop is not None and stop.is_set():
                raise Cancelled("conversion stopped")
            report(Progress(stage, fraction))

        os.makedirs(self.models_dir, exist_ok=True)
        try:
            convert(folder, out, quant=quant, log=None, progress=on_progress)
        except ConvertError as e:
            raise ManagerError(str(e)) from None
        model = self.record(out, source)
        if not keep_folder:
            shutil.rmtree(folder, ignore_errors=True)
            try:
                os.rmdir(os.path.dirname(folder))  # the downloads folder, when that was its last
            except OSError:
                pass
        report(Progress("done", 1.0))
        return model


def describe_model(path: str) -> InstalledModel | None:
    """A model file's variant, precision, size and languages from its header; None when it is
    not a readable Chatterbox model."""
    from engine_native.gguf_header import GGUFFileError, read_header

    try:
        h = read_header(path)
    except (GGUFFileError, OSError):
        return None
    if h.architecture != "chatterbox":
        return None
    variant = str(h.kv.get("chatterbox.variant", ""))
    languages = h.kv.get("chatterbox.tokenizer.languages") or (["en"] if variant in ("turbo", "nano") else [])
    return InstalledModel(path, variant, str(h.kv.get("chatterbox.quant", "")), h.file_size, list(languages))


def _partial(folder: str, f: hub.RemoteFile) -> str:
    return os.path.join(folder, f.name + hub.PARTIAL)


def _have(folder: str, f: hub.RemoteFile) -> int:
    if os.path.exists(os.path.join(folder, f.name)):
        return f.size
    return hub.partial_size(_partial(folder, f))


def _counter(report, stage: str, f: hub.RemoteFile):
    seen = {"n": 0, "last": 0.0}

    def on_bytes(n: int) -> None:
        seen["n"] += n
        now = time.monotonic()
        if now - seen["last"] >= 0.2:
            seen["last"] = now
            report(Progress(stage, seen["n"] / f.size if f.size else 1.0, seen["n"], f.size, file=f.name))
    return on_bytes


def _link(src: str, dst: str) -> None:
    """A file of the Hugging Face cache into a download folder, without copying where possible."""
    try:
        os.symlink(os.path.realpath(src), dst)
    except OSError:
        shutil.copyfile(src, dst)


def _read_state(folder: str) -> dict | None:
    try:
        with open(os.path.join(folder, STATE), encoding="utf-8") as f:
            state = json.load(f)
        if all(k in state for k in ("key", "repo", "revision", "quant", "files")):
            return state
    except (OSError, ValueError):
        pass
    return None


def _write_state(folder: str, state: dict) -> None:
    from engine_native.files import atomic_write

    text = json.dumps(state, indent=1)
    atomic_write(os.path.join(folder, STATE), lambda tmp: tmp.write_text(text, encoding="utf-8"))
