"""A GGUF file's header, read without mapping its data: metadata, tensor descriptions, and
whether the file holds every byte its tensors declare.

    header = read_header("chatterbox-turbo-q4_0.gguf")    # GGUFFileError on a damaged file
    header.kv["general.architecture"], header.kv.get("chatterbox.variant")
    header.check_complete()                                # GGUFFileError when truncated

gguf's GGUFReader maps the whole file and shapes every tensor with numpy, so a truncated
file fails there with numpy's words ("cannot reshape array of size ..."); ggml's reader logs
a line of its own. Reading the header first gives one message that names the file and the
problem, before either sees the file. Header reading is cheap (a model's header is a few MB
of tokenizer strings; no tensor data is read).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# GGUFValueType: scalar codes -> struct format
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# No writer nests arrays (gguf's own writes none); a crafted header nesting them a byte apart
# would otherwise recurse until Python's stack gives out.
MAX_ARRAY_DEPTH = 4
_U64 = struct.Struct("<Q")
AGAIN = "download or convert it again"


class GGUFFileError(ValueError):
    """A file that is not a complete GGUF file: one line naming the file and the problem."""


class NotGGUFError(GGUFFileError):
    """The file does not start with GGUF's magic: some other kind of file."""


def is_gguf(path: str | os.PathLike) -> bool:
    """Whether the file starts with GGUF's magic (False for one that cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]     # ggml's order (fastest-varying first)
    type: int                  # GGMLQuantizationType
    offset: int                # from the start of the data section
    nbytes: int


@dataclass
class GGUFHeader:
    path: str
    version: int
    kv: dict = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_offset: int = 0
    file_size: int = 0

    @property
    def architecture(self) -> str | None:
        arch = self.kv.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def data_bytes(self) -> int:
        """Where the last tensor's data ends, counted from the start of the file."""
        return max((self.data_offset + t.offset + t.nbytes for t in self.tensors), default=self.data_offset)

    def check_complete(self) -> None:
        """GGUFFileError when a tensor's data runs past the end of the file (a truncated copy)."""
        for t in self.tensors:
            end = self.data_offset + t.offset + t.nbytes
            if end > self.file_size:
                raise GGUFFileError(
                    f"{self.path}: truncated: tensor {t.name} runs past the end of the file (the file has "
                    f"{_size(self.file_size)}; its tensors need {_size(self.data_bytes)}); {AGAIN}")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n:,} bytes"


class _Cursor:
    """Reads the header's little-endian fields from a memory map of the file (only the pages
    read are touched); running out of file is a GGUFFileError."""

    def __init__(self, buf, path: str, size: int):
        self.buf, self.path, self.size, self.pos = buf, path, size, 4

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GGUFFileError(f"{self.path}: truncated: the file ends inside its header (it has "
                                f"{_size(self.size)}); {AGAIN}")

    def unpack(self, fmt: str):
        n = struct.calcsize(fmt)
        self._need(n)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        self._need(n)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return s

    def strings(self, n: int) -> list[str]:
        """n strings in a row (a tokenizer's vocabulary: 50,000 and more), in one tight loop."""
        buf, pos, size, length = self.buf, self.pos, self.size, _U64.unpack_from
        out = []
        for _ in range(n):
            if pos + 8 > size:
                break
            (k,) = length(buf, pos)
            out.append(buf[pos + 8:pos + 8 + k])
            pos += 8 + k
        self.pos = pos
        self._need(0 if len(out) == n else size + 1)
        return [b.decode("utf-8", "replace") for b in out]

    def value(self, vtype: int, depth: int = 0):
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.unpack("<I"), self.unpack("<Q")
            if etype in _SCALARS:
                width = struct.calcsize(_SCALARS[etype])
                self._need(n * width)
                values = list(struct.unpack_from(f"<{n}{_SCALARS[etype][1]}", self.buf, self.pos)) if n else []
                self.pos += n * width
                return values
            if etype == _STRING:
                return self.strings(n)
            if etype == _ARRAY:
                if depth >= MAX_ARRAY_DEPTH:
                    raise GGUFFileError(f"{self.path}: corrupt GGUF header (arrays nested over "
                                        f"{MAX_ARRAY_DEPTH} deep); {AGAIN}")
                return [self.value(_ARRAY, depth + 1) for _ in range(n)]
        raise GGUFFileError(f"{self.path}: corrupt GGUF header (unknown value type {vtype}); {AGAIN}")


def read_header(path: str | os.PathLike) -> GGUFHeader:
    """The header of a GGUF file. GGUFFileError when it is not a GGUF file or its header is
    cut short or damaged; OSError when it cannot be read at all."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if f.read(4) != MAGIC:
            raise NotGGUFError(f"{path}: not a GGUF file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(_Cursor(buf, path, size))


def _parse(c: _Cursor) -> GGUFHeader:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    path, size = c.path, c.size
    version = c.unpack("<I")
    if version not in (2, 3):
        raise GGUFFileError(f"{path}: GGUF version {version} is not supported (2 and 3 are)")
    n_tensors, n_kv = c.unpack("<Q"), c.unpack("<Q")
    if n_tensors > size or n_kv > size:  # each needs bytes of its own: a damaged count
        raise GGUFFileError(f"{path}: corrupt GGUF header ({n_tensors} tensors, {n_kv} keys); {AGAIN}")
    header = GGUFHeader(path=path, version=version, file_size=size)
    for _ in range(n_kv):
        key = c.string()
        header.kv[key] = c.value(c.unpack("<I"))
    for _ in range(n_tensors):
        name = c.string()
        n_dims = c.unpack("<I")
        if n_dims > 8:
            raise GGUFFileError(f"{path}: corrupt GGUF header (tensor {name} has {n_dims} dimensions); {AGAIN}")
        shape = tuple(c.unpack("<Q") for _ in range(n_dims))
        qtype, offset = c.unpack("<I"), c.unpack("<Q")
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
        except (ValueError, KeyError):
            raise GGUFFileError(f"{path}: tensor {name} has an unknown type {qtype}; {AGAIN}") from None
        n = 1
        for d in shape:
            n *= d
        header.tensors.append(TensorInfo(name, shape, qtype, offset, n // block * type_size))
    alignment = header.kv.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        alignment = DEFAULT_ALIGNMENT
    header.data_offset = -(-c.pos // alignment) * alignment
    return header


def read_complete_header(path: str | os.PathLike) -> GGUFHeader:
    """read_header, then check_complete: the header of a file that holds all its data."""
    header = read_header(path)
    header.check_complete()
    return header


# Plain (not quantised) tensor types -> numpy dtypes, for reading small files' tensors.
_PLAIN_DTYPES = {0: "<f4", 1: "<f2", 24: "<i1", 25: "<i2", 26: "<i4", 27: "<i8", 28: "<f8"}


def read_tensors(header: GGUFHeader) -> dict:
    """Every tensor of a complete header's file as a numpy array in numpy's order (the reverse
    of ggml's), for small files of plain types (voices). GGUFFileError for a quantised tensor
    or data that runs past the file."""
    import numpy as np

    header.check_complete()
    out = {}
    with open(header.path, "rb") as f:
        for t in header.tensors:
            if 0 in t.shape:  # no data, yet its other dimensions may be anything
                raise GGUFFileError(f"{header.path}: tensor {t.name} has no elements (shape {t.shape}); {AGAIN}")
            dtype = _PLAIN_DTYPES.get(t.type)
            if dtype is None:
                raise GGUFFileError(f"{header.path}: tensor {t.name} has type {t.type}, which this file "
                                    f"kind never holds; {AGAIN}")
            f.seek(header.data_offset + t.offset)
            data = np.frombuffer(f.read(t.nbytes), dtype=dtype)
            out[t.name] = data.reshape(tuple(reversed(t.shape)) or (1,))
    return out

