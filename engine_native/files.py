"""Writing a user's file whole or not at all: the one atomic writer of the project.

    atomic_write("take.flac", lambda tmp: sf.write(tmp, audio, 24000))

The content goes to a hidden temporary file beside the target (same folder, so the final
rename is atomic), is flushed to disk, gets the mode a new file gets under the user's
umask, and only then replaces the target. Any failure (a read-only folder, a full disk,
an encoder that fails, Ctrl-C) removes the temporary file and leaves the target as it was.
Temporary files left by a process that was killed (SIGKILL, power loss) are removed by the
next write into the same folder.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from engine_native.errors import Cancelled

_TEMP = re.compile(r"^\.(?P<name>.+)\.partial-(?P<pid>\d+)-[0-9a-f]{8}(?P<ext>\.[\w]+)?$")


class WriteFailed(OSError):
    """The file could not be written; `str()` names the path and the cause in one line."""


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(folder: str | os.PathLike) -> int:
    """Removes temporary files of writes whose process no longer exists; returns how many."""
    n = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for e in entries:
        m = _TEMP.match(e.name)
        if m and not _pid_alive(int(m.group("pid"))):
            try:
                os.unlink(e.path)
                n += 1
            except OSError:
                pass
    return n


def temp_path_for(path: Path) -> Path:
    """A hidden temporary name beside `path` that keeps its extension (encoders pick the
    format from it) and names the writing process (so stale ones can be recognised)."""
    return path.with_name(f".{path.name}.partial-{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")


def describe_error(e: BaseException) -> str:
    if isinstance(e, OSError):
        if e.errno == errno.ENOSPC:
            return "the disk is full"
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return "permission denied (read-only folder or file)"
        return e.strerror or str(e)
    return str(e) or type(e).__name__


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Calls `write(tmp)` to fill a temporary file, then renames it over `path`.

    Raises WriteFailed naming `path` and the cause (an OSError, or an encoder's own error
    such as libsndfile's); the target is then untouched and no temporary file remains.
    KeyboardInterrupt, SystemExit and engine_native.errors.Cancelled pass through after the same
    clean-up."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise WriteFailed(errno.ENOENT, f"cannot write {path}: the folder {folder} does not exist")
    remove_stale_temps(folder)
    tmp = temp_path_for(path)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except Cancelled:  # stopped on purpose (a paused conversion): the target untouched, no error of ours
        raise
    except Exception as e:  # noqa: BLE001 - every failure becomes one clear error naming the file
        code = e.errno if isinstance(e, OSError) and e.errno else errno.EIO
        raise WriteFailed(code, f"cannot write {path}: {describe_error(e)}") from None
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        except OSError:
            pass
    return path
