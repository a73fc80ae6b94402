"""Files from the Hugging Face Hub, through huggingface_hub: a repository's file list (sizes and
checksums), resumable downloads that survive a restart, checksum verification, and the files a
user already has in the Hugging Face cache. Qt-free; every call blocks (run it off the GUI thread).

    listing = list_files("ResembleAI/chatterbox-turbo")            # RemoteRepo: commit, files
    download(listing, f, "t3.safetensors.part", on_bytes, stop)     # resumes a partial file
    verify(path, f)                                                 # HubError when corrupted

huggingface_hub's own downloads write to a temporary file it deletes when a download fails
or stops, so a 1 GB file would start again after a pause or a restart. Here a file grows in
`NAME.part` beside its final name and each request asks for the bytes still missing (HTTP
Range), through huggingface_hub's session and headers (the user's token, its user agent),
from the same URLs hf_hub_download uses. The environment is read at each call: HF_ENDPOINT
(a mirror), HF_HUB_OFFLINE (no network: only the cache), HF_HOME / HF_HUB_CACHE (where the
cache is) and HF_TOKEN (a private or gated repository).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from engine_native.errors import Cancelled

CHUNK = 1 << 20
TIMEOUT_S = 30.0
RETRIES = 5                  # attempts in a row that bring no byte before a download gives up
PARTIAL = ".part"


class HubError(Exception):
    """The Hub or the network refused: one line that says what, and what to do."""


class CorruptedDownload(HubError):
    """A file whose checksum is not the one the Hub lists for it (it has been deleted)."""


@dataclass(frozen=True)
class RemoteFile:
    name: str
    size: int
    sha256: str | None = None      # LFS files: the Hub's ETag is this
    blob_id: str | None = None     # the git blob id (sha1 of "blob SIZE\0" + content): every file has one

    def as_json(self) -> dict:
        return {"name": self.name, "size": self.size, "sha256": self.sha256, "blob_id": self.blob_id}

    @classmethod
    def from_json(cls, d: dict) -> RemoteFile:
        return cls(d["name"], int(d["size"]), d.get("sha256"), d.get("blob_id"))


@dataclass(frozen=True)
class RemoteRepo:
    repo: str
    revision: str                  # the commit the files were listed at (downloads ask for exactly it)
    files: tuple[RemoteFile, ...]


def endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def offline() -> bool:
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if value is not None:
        return value.strip().upper() in ("1", "ON", "YES", "TRUE")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def cache_dir() -> str:
    """The Hugging Face cache (where hf_hub_download puts files): HF_HUB_CACHE, else HF_HOME/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _describe(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def list_files(repo: str, revision: str = "main") -> RemoteRepo:
    """The repository's files at `revision` (resolved to its commit), with sizes and checksums."""
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hf_errors

    if offline():
        raise HubError(f"offline (HF_HUB_OFFLINE is set): cannot list {repo} on the Hub")
    try:
        info = HfApi(endpoint=endpoint()).model_info(repo, revision=revision, files_metadata=True)
    except hf_errors.GatedRepoError:
        raise HubError(f"{repo} is gated: accept its terms on the Hub, then log in (hf auth login)") from None
    except hf_errors.RepositoryNotFoundError:
        raise HubError(f"{repo} was not found on {endpoint()} (a private repository needs a login: "
                       "hf auth login)") from None
    except hf_errors.RevisionNotFoundError:
        raise HubError(f"{repo} has no revision {revision!r}") from None
    except hf_errors.HfHubHTTPError as e:
        raise HubError(f"the Hub refused to list {repo}: {_describe(e)}") from None
    except Exception as e:  # noqa: BLE001 - connection errors come in many classes; all mean the same here
        raise HubError(f"cannot reach {endpoint()} ({_describe(e)}); check the network") from None
    if not info.sha:
        raise HubError(f"{endpoint()} did not say which commit {repo} is at; is HF_ENDPOINT a Hugging Face Hub?")
    files = tuple(RemoteFile(s.rfilename, int(s.lfs.size if s.lfs else (s.size or 0)),
                             s.lfs.sha256 if s.lfs else None, s.blob_id) for s in info.siblings or ())
    return RemoteRepo(repo, info.sha, files)


def file_url(repo: str, revision: str, name: str) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo, name, revision=revision, endpoint=endpoint())


def cached_file(repo: str, revision: str, name: str) -> str | None:
    """The file in the Hugging Face cache at that commit (hf_hub_download put it there), or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, name, cache_dir=cache_dir(), revision=revision)
    except Exception:  # noqa: BLE001 - a damaged cache is as good as none
        return None
    return found if isinstance(found, str) and os.path.isfile(found) else None


def cached_snapshot(repo: str, names: list[str]) -> tuple[str, dict[str, str]] | None:
    """Offline: the newest cached commit of `repo` (its refs/main) holding every one of `names`:
    (commit, {name: path}); None when the cache lacks any of them."""
    folder = os.path.join(cache_dir(), "models--" + repo.replace("/", "--"))
    try:
        with open(os.path.join(folder, "refs", "main"), encoding="utf-8") as f:
            commit = f.read().strip()
    except OSError:
        return None
    paths = {n: cached_file(repo, commit, n) for n in names}
    if any(p is None for p in paths.values()):
        return None
    return commit, paths


def partial_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def download(listing: RemoteRepo, f: RemoteFile, partial: str, on_bytes: Callable[[int], None],
             stop: threading.Event | None = None) -> None:
    """Fill `partial` with the file's bytes, continuing after what it holds (a paused or broken
    download: Range requests). Network failures are retried from where they stopped while
    bytes keep coming; `stop` set ends it at the next chunk with Cancelled, the partial file
    kept. `on_bytes(n)` hears every chunk written (n < 0: bytes thrown away)."""
    from huggingface_hub import errors as hf_errors
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = file_url(listing.repo, listing.revision, f.name)
    headers = build_hf_headers()
    headers["Accept-Encoding"] = "identity"  # the bytes as stored: sizes and Range offsets are the file's
    session = get_session()
    failures, last_error = 0, None
    while True:
        have = partial_size(partial)
        if have > f.size:  # not this file's bytes (another revision's partial): start over
            os.unlink(partial)
            on_bytes(-have)
            have = 0
        if have == f.size:
            return
        if stop is not None and stop.is_set():
            raise Cancelled(f"download of {f.name} paused")
        got = 0
        try:
            request = dict(headers, Range=f"bytes={have}-") if have else headers
            with session.stream("GET", url, headers=request, follow_redirects=True, timeout=TIMEOUT_S) as r:
                if r.status_code >= 400:
                    r.read()
                    hf_raise_for_status(r)
                with open(partial, "ab" if have and r.status_code == 206 else "wb") as out:
                    if have and r.status_code != 206:  # the server sent the whole file again
                        on_bytes(-have)
                    for chunk in r.iter_bytes():  # as they arrive: a pause is seen within one network read
                        if stop is not None and stop.is_set():
                            raise Cancelled(f"download of {f.name} paused")
                        out.write(chunk)
                        got += len(chunk)
                        on_bytes(len(chunk))
        except Cancelled:
            raise
        except hf_errors.HfHubHTTPError as e:
            status = getattr(getattr(e, "response", None), "status_code", 0)
            if status not in (408, 429, 500, 502, 503, 504):
                raise HubError(f"the Hub refused {f.name} of {listing.repo}: {_describe(e)}") from None
            last_error = e
        except OSError as e:  # writing the partial file (the disk), not the network
            from engine_native.files import describe_error

            raise HubError(f"cannot write {partial}: {describe_error(e)}") from None
        except Exception as e:  # noqa: BLE001 - the connection dropped, timed out, was refused...
            last_error = e
        failures = 0 if got else failures + 1
        if partial_size(partial) >= f.size:
            return
        if failures >= RETRIES:
            raise HubError(f"the download of {f.name} stopped ({_describe(last_error)}); the "
                           f"{partial_size(partial) / 2**20:.0f} MiB received are kept: resume to continue") from None
        time.sleep(min(0.25 * 2 ** failures, 8.0))


def file_digest(path: str, algorithm: str, size: int | None = None,
                stop: threading.Event | None = None, on_bytes: Callable[[int], None] | None = None) -> str:
    h = hashlib.new(algorithm)
    if algorithm == "sha1":  # a git blob id hashes a header first
        h.update(b"blob %d\0" % (size if size is not None else os.path.getsize(path)))
    with open(path, "rb") as f:
        while block := f.read(8 * CHUNK):
            if stop is not None and stop.is_set():
                raise Cancelled("verification stopped")
            h.update(block)
            if on_bytes:
                on_bytes(len(block))
    return h.hexdigest()


def verify(path: str, f: RemoteFile, repo: str, stop: threading.Event | None = None, *, delete: bool = True,
           on_bytes: Callable[[int], None] | None = None) -> None:
    """CorruptedDownload unless the file is the one the Hub lists: its size, then its sha256
    (LFS files) or git blob id (the others). A corrupted file is deleted (`delete`: one of
    ours, not the Hugging Face cache's)."""
    size = os.path.getsize(path)
    if f.sha256:
        algorithm, expected = "sha256", f.sha256
    elif f.blob_id:
        algorithm, expected = "sha1", f.blob_id
    else:
        algorithm, expected = None, None
    got = None
    if size == f.size and algorithm:
        got = file_digest(path, algorithm, size, stop, on_bytes)
    if size != f.size or (expected and got != expected):
        what = (f"{size:,} bytes instead of {f.size:,}" if size != f.size
                else f"its {algorithm} is {got[:12]}…, the Hub lists {expected[:12]}…")
        if not delete:
            raise CorruptedDownload(f"{path} is not {f.name} of {repo} ({what})")
        os.unlink(path)
        raise CorruptedDownload(f"{f.name} from {repo} arrived corrupted ({what}); it has been deleted: "
                                "download it again")
