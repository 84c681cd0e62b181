"""Read a CTranslate2 `model.bin` into numpy arrays, without CTranslate2 or torch.

The file is a flat little-endian container written by `ctranslate2.specs.ModelSpec._serialize`:

    u32 binary_version, str spec_name, u32 spec_revision,
    u32 n_variables, n_variables x (str name, u8 rank, rank x u32 dim, u8 dtype_id, u32 n_bytes, bytes),
    u32 n_aliases,   n_aliases   x (str alias, str target)

where `str` is a u16 length (counting a trailing NUL) followed by UTF-8 bytes and the NUL. Only binary
version 6 is accepted: it is the one this reader was checked against, and an older or newer layout is
better refused than misread.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SUPPORTED_BINARY_VERSION = 6

# Index = dtype id in the file (ctranslate2's DataType enum order).
_DTYPES: tuple[str, ...] = ("float32", "int8", "int16", "int32", "float16", "bfloat16")


class CT2FormatError(ValueError):
    """The file is not a CTranslate2 model this reader understands (truncated, corrupted or another version)."""


@dataclass
class CT2Model:
    """The content of one `model.bin`: spec identity plus every variable, aliases already resolved."""

    spec_name: str
    spec_revision: int
    binary_version: int
    variables: dict[str, np.ndarray] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.variables[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a variable of this {self.spec_name} model") from None

    def __contains__(self, name: object) -> bool:
        return name in self.variables

    def scalar(self, name: str) -> int | float:
        """A rank-0 variable (e.g. `encoder/num_heads`) as a Python number."""
        value = self[name]
        if value.size != 1:
            raise CT2FormatError(f"{name!r} is not a scalar (shape {value.shape})")
        return value.reshape(()).item()


class _Cursor:
    """Sequential reader over the file bytes that turns every overrun into a CT2FormatError."""

    def __init__(self, data: bytes | memoryview, path: Path):
        self.data = data
        self.pos = 0
        self.path = path

    def take(self, n: int, what: str) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise CT2FormatError(
                f"{self.path}: truncated or corrupted while reading {what} "
                f"(needs {n} bytes at offset {self.pos}, file has {len(self.data)})"
            )
        chunk = memoryview(self.data)[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))[0]

    def string(self, what: str) -> str:
        length = self.unpack("H", what)
        raw = bytes(self.take(length, what))
        if length == 0 or raw[-1] != 0:
            raise CT2FormatError(f"{self.path}: corrupted {what} at offset {self.pos - length} (no NUL terminator)")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as err:
            raise CT2FormatError(f"{self.path}: corrupted {what} (not UTF-8): {err}") from None


def _read_variable(cur: _Cursor) -> tuple[str, np.ndarray]:
    name = cur.string("variable name")
    rank = cur.unpack("B", f"rank of {name!r}")
    shape = tuple(cur.unpack("I", f"shape of {name!r}") for _ in range(rank))
    dtype_id = cur.unpack("B", f"dtype of {name!r}")
    if dtype_id >= len(_DTYPES):
        raise CT2FormatError(f"{cur.path}: variable {name!r} has unknown dtype id {dtype_id} (corrupted file?)")
    n_bytes = cur.unpack("I", f"size of {name!r}")
    dtype = _DTYPES[dtype_id]
    item = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    expected = int(np.prod(shape, dtype=np.int64)) * item
    if n_bytes != expected:
        raise CT2FormatError(
            f"{cur.path}: variable {name!r} declares {n_bytes} bytes but shape {shape} x {dtype} needs {expected}"
        )
    raw = cur.take(n_bytes, f"data of {name!r}")
    return name, _decode_array(raw, dtype, shape)


def _decode_array(raw: memoryview, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bfloat16":
        # numpy has no bfloat16: widen to float32 by putting the 16 bits in the high half.
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    # Copy so the arrays own their memory and the file buffer can be released.
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape).copy()


def read_ct2_model(path: str | Path) -> CT2Model:
    """Parse a CTranslate2 `model.bin` (binary version 6).

    Returns every stored variable under its spec name, plus each alias (e.g. a tied output projection)
    mapped to the same array object. Raises CT2FormatError on any structural inconsistency: wrong version,
    truncation, unknown dtype, size mismatch, dangling alias or trailing bytes.
    """
    path = Path(path)
    data = path.read_bytes()
    cur = _Cursor(data, path)
    version = cur.unpack("I", "binary version")
    if version != SUPPORTED_BINARY_VERSION:
        raise CT2FormatError(
            f"{path}: CTranslate2 binary version {version} is not supported (expected {SUPPORTED_BINARY_VERSION}); "
            "the file may be corrupted or from another CTranslate2 release"
        )
    spec_name = cur.string("spec name")
    model = CT2Model(spec_name=spec_name, spec_revision=cur.unpack("I", "spec revision"), binary_version=version)
    for _ in range(cur.unpack("I", "variable count")):
        name, array = _read_variable(cur)
        if name in model.variables:
            raise CT2FormatError(f"{path}: variable {name!r} appears twice")
        model.variables[name] = array
    for _ in range(cur.unpack("I", "alias count")):
        alias, target = cur.string("alias name"), cur.string("alias target")
        if target not in model.variables:
            raise CT2FormatError(f"{path}: alias {alias!r} points to missing variable {target!r}")
        model.aliases[alias] = target
        model.variables[alias] = model.variables[target]
    if cur.pos != len(data):
        raise CT2FormatError(f"{path}: {len(data) - cur.pos} unexpected trailing bytes (corrupted file?)")
    return model
