"""A stand-in for the Hugging Face Hub on 127.0.0.1: serves folders as model repositories at the
Hub's URLs, so huggingface_hub (HF_ENDPOINT pointed here) lists and downloads from it exactly as
from the Hub. What it answers (as huggingface_hub asks, see its file_download.py and hf_api.py):

  GET  /api/models/OWNER/NAME[/revision/REV][?blobs=true]   model_info: sha, siblings (size,
                                                            blobId, lfs {sha256, size, pointerSize})
  GET  /api/models/OWNER/NAME/tree/REV[/PATH][?recursive=]  list_repo_tree (snapshot_download)
  HEAD /OWNER/NAME/resolve/REV/FILE                         X-Repo-Commit, ETag / X-Linked-Etag
                                                            (the sha256 for LFS files, the git blob
                                                            id for the others), X-Linked-Size
  GET  /OWNER/NAME/resolve/REV/FILE                         the bytes, with Range (206)

Faults a test asks for: `drop_once[file] = n` (the first GET of the file sends its headers and n
bytes, then closes the connection), `hold[file] = n` (GETs send n bytes, then wait until
`release` is set), `corrupt.add(file)` (one byte flipped, the true checksums advertised).
`rate_limit` (bytes per second, each response) makes it a slower network. `requests` records
(method, path, Range) for every request.

    with HubServer({"ResembleAI/chatterbox-nano": folder}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

LFS_MIN = 10 << 20      # larger files are stored with LFS, as the Hub does (and every .safetensors / .pt)
LFS_SUFFIXES = (".safetensors", ".pt", ".bin", ".gguf")
CHUNK = 1 << 20


class RepoFile:
    def __init__(self, root: Path, rel: str, sha256: str | None = None):
        """`sha256`: known already (a snapshot's SHA256SUMS), so a big file is not read to publish it."""
        self.path, self.name = root / rel, rel
        self.size = self.path.stat().st_size
        self.lfs = self.size >= LFS_MIN or rel.endswith(LFS_SUFFIXES)
        if self.lfs and sha256:
            self.sha256 = sha256
        else:
            h = hashlib.sha256()
            with open(self.path, "rb") as f:
                while block := f.read(8 * CHUNK):
                    h.update(block)
            self.sha256 = h.hexdigest()
        # git's blob id: of the content, or for an LFS file of its pointer (as the Hub lists it)
        content = self.pointer() if self.lfs else self.path.read_bytes()
        self.blob_id = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()

    def pointer(self) -> bytes:
        return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
                f"size {self.size}\n").encode()

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id

    def sibling(self) -> dict:
        d = {"rfilename": self.name, "size": self.size, "blobId": self.blob_id}
        if self.lfs:
            d["lfs"] = {"sha256": self.sha256, "size": self.size, "pointerSize": len(self.pointer())}
        return d

    def tree_entry(self) -> dict:
        d = {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.name}
        if self.lfs:
            d["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": len(self.pointer())}
        return d


class Repo:
    def __init__(self, repo_id: str, folder: Path, files: list[str] | None = None):
        self.id, self.folder = repo_id, Path(folder)
        names = files if files is not None else sorted(
            str(p.relative_to(self.folder)) for p in self.folder.rglob("*") if p.is_file())
        known = {}
        sums = self.folder / "SHA256SUMS"  # tests/reference's snapshots list their files' sha256
        if sums.is_file():
            for line in sums.read_text(encoding="utf-8").splitlines():
                digest, _, name = line.partition("  ")
                known[name.strip()] = digest.strip()
        self.files = {n: RepoFile(self.folder, n, known.get(n)) for n in names}
        h = hashlib.sha1(repo_id.encode())
        for f in self.files.values():
            h.update(f.name.encode() + f.etag.encode())
        self.commit = h.hexdigest()

    def info(self) -> dict:
        return {"_id": self.commit[:24], "id": self.id, "modelId": self.id, "sha": self.commit, "private": False,
                "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                "lastModified": "2026-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": [f.sibling() for f in self.files.values()]}


class HubServer:
    def __init__(self, repos: dict[str, str | os.PathLike | tuple], host: str = "127.0.0.1"):
        """repos: repo id -> a folder (every file in it) or (folder, [file names])."""
        self.repos = {}
        for repo_id, spec in repos.items():
            folder, files = (spec if isinstance(spec, tuple) else (spec, None))
            self.repos[repo_id] = Repo(repo_id, Path(folder), files)
        self.drop_once: dict[str, int] = {}
        self.hold: dict[str, int] = {}
        self.release = threading.Event()
        self.corrupt: set[str] = set()
        self.rate_limit: float | None = None
        self.requests: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-stand-in", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    def gets(self, name: str) -> list[str | None]:
        """The Range header of every GET of a file (None: the whole file)."""
        return [rng for m, p, rng in self.requests if m == "GET" and p.endswith("/" + name)]

    def find(self, path: str):
        """(repo, revision, rest) for a path under a repo id, else None."""
        for repo_id, repo in self.repos.items():
            if path.startswith(repo_id + "/"):
                return repo, path[len(repo_id) + 1:]
        return None


def _handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _json(self, obj, status: int = 200) -> None:
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, message: str, code: str = "") -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if code:
                self.send_header("X-Error-Code", code)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self._route()

        def do_GET(self) -> None:
            self._route()

        def _route(self) -> None:
            url = urlparse(self.path)
            path = unquote(url.path).lstrip("/")
            with hub._lock:
                hub.requests.append((self.command, path, self.headers.get("Range")))
            if path.startswith("api/models/"):
                return self._api(path[len("api/models/"):], parse_qs(url.query))
            found = hub.find(path)
            if found is None or not found[1].startswith("resolve/"):
                return self._error(404, "Repository not found", "RepoNotFound")
            repo, rest = found
            revision, _, name = rest[len("resolve/"):].partition("/")
            if revision not in ("main", repo.commit):
                return self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            f = repo.files.get(name)
            if f is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._file(repo, f)

        def _api(self, rest: str, query: dict) -> None:
            for repo_id, repo in hub.repos.items():
                if rest == repo_id or rest.startswith(repo_id + "/"):
                    tail = rest[len(repo_id):].lstrip("/")
                    if tail == "" or tail.startswith("revision/"):
                        rev = tail[len("revision/"):] if tail else "main"
                        if rev not in ("main", repo.commit):
                            return self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
                        return self._json(repo.info())
                    if tail.startswith("tree/"):
                        rev, _, sub = tail[len("tree/"):].partition("/")
                        entries = [f.tree_entry() for f in repo.files.values()
                                   if not sub or f.name.startswith(sub.rstrip("/") + "/")]
                        return self._json(entries)
            return self._error(404, "Repository not found", "RepoNotFound")

        def _file(self, repo: Repo, f: RepoFile) -> None:
            start, status = 0, 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a = rng[len("bytes="):].split("-")[0]
                start = int(a) if a else 0
                if start >= f.size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{f.size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            self.send_response(status)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{f.etag}"')
            if f.lfs:
                self.send_header("X-Linked-Etag", f'"{f.sha256}"')
                self.send_header("X-Linked-Size", str(f.size))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(f.size - start))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{f.size - 1}/{f.size}")
            self.end_headers()
            if self.command == "HEAD":
                return
            with hub._lock:
                drop_at = hub.drop_once.pop(f.name, None)
            pos = start
            try:
                with open(f.path, "rb") as src:
                    src.seek(start)
                    while pos < f.size:
                        if drop_at is not None and pos >= drop_at:  # cut the connection mid-file
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        held = hub.hold.get(f.name)
                        if held is not None and pos >= held and not hub.release.is_set():
                            if not hub.release.wait(60):
                                return
                            continue
                        limit = f.size
                        if drop_at is not None:
                            limit = min(limit, drop_at)
                        if held is not None and not hub.release.is_set():
                            limit = min(limit, max(held, pos + 1))
                        block = src.read(min(CHUNK, limit - pos))
                        if not block:
                            break
                        if f.name in hub.corrupt and pos <= f.size // 2 < pos + len(block):
                            i = f.size // 2 - pos
                            block = block[:i] + bytes([block[i] ^ 0xFF]) + block[i + 1:]
                        self.wfile.write(block)
                        pos += len(block)
                        if hub.rate_limit:
                            time.sleep(len(block) / hub.rate_limit)
            except (BrokenPipeError, ConnectionResetError, OSError):
                self.close_connection = True

    return Handler


# The random Nano snapshot's small files (the voice encoder, the built-in voice, the tokenizer:
# 7 MB), published as a repository of their own: downloads in seconds, not a whole snapshot.
SMALL_FILES = ("ve.safetensors", "conds.pt", "vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json")
SMALL_REPO = "test/chatterbox-small-files"


@contextlib.contextmanager
def small_files_hub(tmp_path, monkeypatch):
    """The stand-in serving SMALL_REPO, HF_ENDPOINT pointed at it and a fresh HF_HOME; yields
    (the server, a model-manager catalogue {"tiny": its entry})."""
    from app.core.model_manager import CatalogueEntry
    from tests.reference.cache import snapshot_dir

    with HubServer({SMALL_REPO: (snapshot_dir("nano"), list(SMALL_FILES))}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server, {"tiny": CatalogueEntry("tiny", SMALL_REPO, "nano", "English", "The small files of a snapshot.",
                                              required=SMALL_FILES)}
