"""Read PyTorch ``.pt`` files (the zip format of ``torch.save``) without PyTorch.

    from engine_native.convert.torch_pickle import load_pt
    conds = load_pt("conds.pt")   # {"t3": {...}, "gen": {...}} with numpy arrays for tensors

The pickle inside (``<archive>/data.pkl``) is read by a restricted unpickler: it
resolves only the globals needed to rebuild tensors and plain containers (the
``torch._utils`` tensor/parameter rebuild helpers, the typed storage classes,
``collections.OrderedDict``) and raises ``UnsafePickleError`` for anything else,
before anything is called.  Tensor data comes from ``<archive>/data/<key>``
(little-endian unless the archive's ``byteorder`` record says ``big``).  Tensors
become numpy arrays (contiguous copies with the tensor's shape and dtype);
bfloat16 tensors become float32 (exact).

The legacy format (``torch.save(..., _use_new_zipfile_serialization=False)``, the only
one before torch 1.6; Resemblyzer's ``pretrained.pt`` is one) is read too: four pickles
in a row (magic number, protocol version, system info, the object), then the list of
storage keys, then each storage as an int64 element count and its raw bytes. The object
pickle is read twice: once to find where it ends and which storages it names, then again
with the storages' data in hand. The older tar-based format is refused.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict

import numpy as np

__all__ = ["TorchPickleError", "UnsafePickleError", "load_pt"]


class TorchPickleError(ValueError):
    """The file is not a readable zip-format ``torch.save`` archive."""


class UnsafePickleError(TorchPickleError):
    """The pickle references a global the restricted loader does not allow."""


# storage class name -> (numpy dtype string without byte order, itemsize); "bf16" is special
_STORAGE_DTYPES = {
    "DoubleStorage": "f8",
    "FloatStorage": "f4",
    "HalfStorage": "f2",
    "BFloat16Storage": "bf16",
    "LongStorage": "i8",
    "IntStorage": "i4",
    "ShortStorage": "i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
    "ComplexFloatStorage": "c8",
    "ComplexDoubleStorage": "c16",
}


class _StorageType:
    """Stand-in for ``torch.<X>Storage`` classes inside the pickle."""

    __slots__ = ("name", "code")

    def __init__(self, name: str):
        self.name = name
        self.code = _STORAGE_DTYPES[name]

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    if not isinstance(storage, np.ndarray) or storage.ndim != 1:
        raise TorchPickleError(f"tensor rebuild got a {type(storage).__name__}, not a storage")
    size = tuple(int(s) for s in size)
    stride = tuple(int(s) for s in stride)
    offset = int(storage_offset)
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise TorchPickleError(f"bad tensor geometry size={size} stride={stride} offset={offset}")
    numel = int(np.prod(size, dtype=np.int64)) if size else 1
    if numel == 0:
        return np.zeros(size, dtype=storage.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= storage.shape[0]:
        raise TorchPickleError(f"tensor (size={size} stride={stride} offset={offset}) "
                               f"runs past its storage of {storage.shape[0]} elements")
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=size,
                                           strides=tuple(s * item for s in stride), writeable=False)
    return np.array(view, copy=True, order="C")


def _decode_storage(raw: bytes, stype: _StorageType, numel: int, byteorder: str, where: str) -> np.ndarray:
    """`numel` elements of `stype` from the start of `raw` (a copy-free view where possible)."""
    code = stype.code
    itemsize = 2 if code == "bf16" else np.dtype(code).itemsize
    if numel < 0 or len(raw) < numel * itemsize:
        raise TorchPickleError(f"{where} holds {len(raw)} bytes, expected {numel} x {itemsize}")
    raw = raw[: numel * itemsize]
    bo = ">" if byteorder == "big" else "<"
    if code == "bf16":
        bits = np.frombuffer(raw, dtype=bo + "u2").astype(np.uint32) << 16
        return bits.view(np.float32)
    if code in ("?", "i1", "u1"):
        return np.frombuffer(raw, dtype=code)
    return np.frombuffer(raw, dtype=bo + code).astype(code, copy=False)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, *state):
    return data


# (module, name) -> object the pickle may use
_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("collections", "OrderedDict"): OrderedDict,
}
_ALLOWED.update({("torch", name): _StorageType(name) for name in _STORAGE_DTYPES})


# The pure-Python unpickler: the C one allocates a length field's whole size before reading
# (BINBYTES8/BYTEARRAY8 of 2 GB from a 500-byte file takes 2 GB), this one reads what the
# data holds. A torch.save pickle is small (the tensors' bytes are separate records).
class _Restricted(pickle._Unpickler):
    _path = ""

    def find_class(self, module, name):
        obj = _ALLOWED.get((module, name))
        if obj is None:
            raise UnsafePickleError(f"{self._path}: refusing to load global '{module}.{name}' "
                                    f"(only tensors and plain containers are allowed)")
        return obj


class _Unpickler(_Restricted):
    def __init__(self, data: bytes, zf: zipfile.ZipFile, prefix: str, byteorder: str, path: str):
        super().__init__(io.BytesIO(data))
        self._zf = zf
        self._prefix = prefix
        self._byteorder = byteorder
        self._path = path
        self._storages: dict[str, np.ndarray] = {}

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise TorchPickleError(f"{self._path}: unsupported persistent id {pid!r}")
        _, stype, key, _location, numel = pid
        key = str(key)
        cached = self._storages.get(key)
        if cached is not None:
            return cached
        member = f"{self._prefix}data/{key}"
        try:
            raw = self._zf.read(member)
        except KeyError:
            raise TorchPickleError(f"{self._path}: storage record '{member}' is missing") from None
        arr = _decode_storage(raw, stype, int(numel), self._byteorder, f"{self._path}: storage '{member}'")
        self._storages[key] = arr
        return arr


LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def _skip(*_args, **_kwargs):
    return None


class _LegacyUnpickler(_Restricted):
    """The object pickle of a legacy file. Without `storages` (the first pass) it only
    records which storages the object names (key -> type) and rebuilds nothing."""

    def __init__(self, f, path: str, storages: dict[str, np.ndarray] | None):
        super().__init__(f)
        self._path = path
        self._storages = storages
        self.named: dict[str, _StorageType] = {}

    def find_class(self, module, name):
        obj = super().find_class(module, name)
        return _skip if self._storages is None and module == "torch._utils" else obj

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise TorchPickleError(f"{self._path}: unsupported persistent id {pid!r}")
        _, stype, key, _location, _numel, view = pid
        key = str(key)
        self.named[key] = stype
        if self._storages is None:
            return None
        if key not in self._storages:
            raise TorchPickleError(f"{self._path}: storage {key!r} is named but not stored")
        root = self._storages[key]
        if view is None:
            return root
        _view_key, offset, size = view
        if not 0 <= int(offset) <= int(offset) + int(size) <= root.shape[0]:
            raise TorchPickleError(f"{self._path}: storage view {view!r} runs past its storage")
        return root[int(offset):int(offset) + int(size)]


def _load_legacy(data: bytes, path: str) -> object:
    f = io.BytesIO(data)

    def plain():
        u = _Restricted(f)
        u._path = path
        return u.load()

    if plain() != LEGACY_MAGIC:
        raise TorchPickleError(f"{path}: not a torch.save file (wrong magic number)")
    plain()                                                  # protocol version
    info = plain()
    byteorder = "little" if not isinstance(info, dict) or info.get("little_endian", True) else "big"
    start = f.tell()
    first = _LegacyUnpickler(f, path, None)
    first.load()
    keys = plain()
    if not isinstance(keys, list):
        raise TorchPickleError(f"{path}: the storage key list is missing")
    storages: dict[str, np.ndarray] = {}
    for key in map(str, keys):
        stype = first.named.get(key)
        if stype is None:
            raise TorchPickleError(f"{path}: storage {key!r} is stored but never named")
        head = f.read(8)
        if len(head) != 8:
            raise TorchPickleError(f"{path}: truncated before storage {key!r}")
        numel = struct.unpack("<q" if byteorder == "little" else ">q", head)[0]
        itemsize = 2 if stype.code == "bf16" else np.dtype(stype.code).itemsize
        raw = f.read(max(numel, 0) * itemsize)
        storages[key] = _decode_storage(raw, stype, numel, byteorder, f"{path}: storage {key!r}")
    f.seek(start)
    return _LegacyUnpickler(f, path, storages).load()


def _find_data_pkl(zf: zipfile.ZipFile, path: str) -> str:
    names = [n for n in zf.namelist() if n.endswith("data.pkl")]
    top = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
    cands = top or [n for n in names if n == "data.pkl"]
    if len(cands) != 1:
        if not cands:
            raise TorchPickleError(f"{path}: zip archive has no data.pkl record; not a torch.save file")
        raise TorchPickleError(f"{path}: zip archive has several data.pkl records: {', '.join(cands)}")
    return cands[0]


def load_pt(path: str | os.PathLike) -> object:
    """Load a zip-format ``torch.save`` file; tensors come back as numpy arrays."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise TorchPickleError(f"{path}: is a directory, not a torch.save file")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            data = f.read()
        if len(data) >= 262 and data[257:262] == b"ustar":
            raise TorchPickleError(f"{path}: the oldest (tar) torch.save format is not supported; "
                                   f"re-save it with a current torch.save")
        if data[:1] != b"\x80":
            raise TorchPickleError(f"{path}: not a torch.save archive (truncated or not a .pt file)")
        try:
            return _load_legacy(data, path)
        except TorchPickleError as e:
            if str(e).startswith(path):
                raise
            raise type(e)(f"{path}: {e}") from None
        except MemoryError:
            raise TorchPickleError(f"{path}: unreadable legacy torch.save file (a length in it asks for "
                                   f"more memory than this machine has)") from None
        except (EOFError, pickle.UnpicklingError, struct.error, KeyError, IndexError, TypeError, AttributeError,
                ValueError, RuntimeError) as e:
            raise TorchPickleError(f"{path}: unreadable legacy torch.save file ({type(e).__name__}: {e})") from None
    try:
        with zipfile.ZipFile(path) as zf:
            pkl_name = _find_data_pkl(zf, path)
            prefix = pkl_name[: -len("data.pkl")]
            byteorder = "little"
            if f"{prefix}byteorder" in zf.namelist():
                byteorder = zf.read(f"{prefix}byteorder").decode("ascii", "replace").strip()
                if byteorder not in ("little", "big"):
                    raise TorchPickleError(f"{path}: unknown byteorder record {byteorder!r}")
            data = zf.read(pkl_name)
            return _Unpickler(data, zf, prefix, byteorder, path).load()
    except TorchPickleError as e:
        if str(e).startswith(path):
            raise
        raise type(e)(f"{path}: {e}") from None
    except MemoryError:  # a length field (BYTEARRAY8, a storage's numel, ...) past any real file's
        raise TorchPickleError(f"{path}: unreadable torch.save archive (a length in it asks for more "
                               f"memory than this machine has)") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, pickle.UnpicklingError, struct.error,
            OSError, KeyError, IndexError, TypeError, AttributeError, ValueError,
            NotImplementedError, RuntimeError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise TorchPickleError(f"{path}: unreadable torch.save archive ({type(e).__name__}: {e})") from None
