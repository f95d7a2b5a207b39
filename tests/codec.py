"""A data-only wire format for values crossing the trust boundary.

Every value that an implementation under test receives or returns goes through
:func:`encode` and :func:`decode`, in the students' own ``pytest`` run as in the
grader's sandbox, so both see the same rules. The format is a JSON header plus
raw byte buffers: decoding it never runs code (no pickle, no ``torch.load``), and
every decoded tensor is a fresh, plain ``torch.Tensor`` built by the decoder.

What may cross: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
lists, tuples, dicts (keys: str/int/float/bool/None or tuples of them),
``torch.dtype``, ``torch.device``, ``torch.Size`` (as a tuple), tensors
(strided, any dtype, storage sharing and strides preserved, so views stay
views), NumPy arrays and scalars, and records (dataclass instances and
NamedTuples, decoded as :class:`Record`). Anything else is a :class:`WireError`.

How messages travel between processes, and the replies they carry, is
:mod:`tests.wire`'s (which re-exports these names).
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["LENGTH", "MAX_MESSAGE_BYTES", "Record", "WireError", "decode", "encode"]

MAX_DEPTH = 64
MAX_ITEMS = 2_000_000
MAX_MESSAGE_BYTES = 4 << 30
#: Decoded tensors may not stand for more memory than this in all (elements
#: times item size, summed over the message) ...
MAX_LOGICAL_BYTES = 4 << 30
#: ... nor for more than this many times the bytes that crossed, beyond a small
#: allowance: a 1-byte storage viewed with zero strides as a huge tensor would
#: otherwise make whoever compares it allocate the full size.
LOGICAL_PER_BYTE = 16
LOGICAL_ALLOWANCE = 64 << 20
#: A length prefix, one unsigned 64-bit little-endian integer: of a message's
#: JSON header (inside :func:`encode`'s bytes) and of a frame on a pipe.
LENGTH = struct.Struct("<Q")

_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16,
        torch.float8_e4m3fn, torch.float8_e5m2,
        torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
        torch.complex64, torch.complex128,
    )
}
_NP_KINDS = set("biufc")


class WireError(TypeError):
    """A value that may not cross the boundary, or a malformed message."""


class Record(Mapping[str, Any]):
    """A decoded dataclass or NamedTuple: read-only fields by attribute or key.

    ``Record`` compares equal to another record with the same fields, and
    ``_name`` holds the original class name (for messages only; it is never
    used to find or build a class).
    """

    __slots__ = ("_fields", "_name")

    def __init__(self, name: str, fields: dict[str, Any]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_fields", dict(fields))

    def __getattr__(self, key: str) -> Any:
        try:
            return self._fields[key]
        except KeyError:
            raise AttributeError(
                f"{self._name} has no field {key!r} (fields: {', '.join(self._fields)})"
            ) from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Record is read-only")

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and self._fields == other._fields

    __hash__ = None  # type: ignore[assignment]

    def _asdict(self) -> dict[str, Any]:
        return dict(self._fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._fields.items())
        return f"{self._name}({inner})"


# --------------------------------------------------------------------------- encode


class _Encoder:
    def __init__(self) -> None:
        self.buffers: list[bytes] = []
        self.storages: dict[tuple[str, int], int] = {}
        self.items = 0

    def buffer(self, data: bytes) -> int:
        self.buffers.append(data)
        return len(self.buffers) - 1

    def enc(self, obj: Any, depth: int) -> Any:
        self.items += 1
        if depth > MAX_DEPTH or self.items > MAX_ITEMS:
            raise WireError("value is nested too deeply or has too many items")
        t = type(obj)
        if obj is None or t is bool or t is str:
            return obj
        if t is int:
            return obj if abs(obj) < 2**53 else {"$": "bigint", "v": str(obj)}
        if t is float:
            return obj if math.isfinite(obj) else {"$": "float", "v": repr(obj)}
        if t is list:
            return [self.enc(x, depth + 1) for x in obj]
        if t is tuple or t is torch.Size:
            return {"$": "tuple", "v": [self.enc(x, depth + 1) for x in obj]}
        if t is dict:
            return {
                "$": "dict",
                "v": [[self.enc(k, depth + 1), self.enc(v, depth + 1)] for k, v in obj.items()],
            }
        if t is bytes:
            return {"$": "bytes", "b": self.buffer(obj)}
        if t is torch.dtype:
            name = str(obj).removeprefix("torch.")
            if name not in _DTYPES:
                raise WireError(f"dtype {obj} cannot cross the boundary")
            return {"$": "dtype", "v": name}
        if t is torch.device:
            return {"$": "device", "v": str(obj)}
        if t is torch.Tensor or t is torch.nn.Parameter:
            return self.tensor(obj)
        if isinstance(obj, torch.Tensor):
            raise WireError(
                f"got a tensor subclass {t.__qualname__}; return a plain torch.Tensor"
            )
        if t is np.ndarray or t is np.memmap:
            return self.ndarray(np.asarray(obj))
        if isinstance(obj, np.generic) and obj.dtype.kind in _NP_KINDS:
            return {"$": "npscalar", "dtype": obj.dtype.str, "v": self.enc(obj.item(), depth + 1)}
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            return self.record(t.__name__, fields, depth)
        if isinstance(obj, tuple) and hasattr(t, "_fields"):
            return self.record(t.__name__, dict(zip(t._fields, obj, strict=True)), depth)
        if t is Record:
            return self.record(obj._name, obj._asdict(), depth)
        raise WireError(
            f"a value of type {t.__module__}.{t.__qualname__} is not data "
            "(allowed: numbers, strings, lists, tuples, dicts, dtypes, tensors, "
            "NumPy arrays, dataclasses and NamedTuples of those)"
        )

    def record(self, name: str, fields: dict[str, Any], depth: int) -> Any:
        return {"$": "record", "name": str(name), "v": {
            str(k): self.enc(v, depth + 1) for k, v in fields.items()
        }}

    def tensor(self, t: torch.Tensor) -> Any:
        if t.layout is not torch.strided or t.is_quantized or t.is_nested:
            raise WireError(f"tensor layout {t.layout} cannot cross the boundary")
        if t.device.type == "meta":
            raise WireError("meta tensors have no data")
        name = str(t.dtype).removeprefix("torch.")
        if name not in _DTYPES:
            raise WireError(f"dtype {t.dtype} cannot cross the boundary")
        storage = t.untyped_storage()
        key = (str(t.device), storage.data_ptr())
        if key not in self.storages:
            raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
            self.storages[key] = self.buffer(raw.detach().cpu().numpy().tobytes())
        return {
            "$": "tensor",
            "dtype": name,
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "offset": t.storage_offset(),
            "storage": self.storages[key],
            "device": str(t.device),
            "requires_grad": bool(t.requires_grad),
        }

    def ndarray(self, a: np.ndarray) -> Any:
        if a.dtype.kind not in _NP_KINDS:
            raise WireError(f"NumPy dtype {a.dtype} cannot cross the boundary")
        a = np.ascontiguousarray(a)
        return {"$": "ndarray", "dtype": a.dtype.str, "shape": list(a.shape),
                "b": self.buffer(a.tobytes())}


def encode(obj: Any) -> bytes:
    """Serialise ``obj`` (see the module docstring for what may cross)."""
    enc = _Encoder()
    header = enc.enc(obj, 0)
    sizes = [len(b) for b in enc.buffers]
    head = json.dumps({"v": header, "sizes": sizes}, allow_nan=False).encode()
    total = LENGTH.size + len(head) + sum(sizes)
    if total > MAX_MESSAGE_BYTES:
        raise WireError(f"message of {total} bytes exceeds the {MAX_MESSAGE_BYTES} byte limit")
    return b"".join([LENGTH.pack(len(head)), head, *enc.buffers])


# --------------------------------------------------------------------------- decode


def _int(x: Any, what: str, lo: int = 0) -> int:
    if type(x) is not int or x < lo:
        raise WireError(f"malformed message: bad {what} {x!r}")
    return x


class _Decoder:
    def __init__(self, buffers: list[memoryview]) -> None:
        self.buffers = buffers
        self.storages: dict[tuple[int, str], torch.UntypedStorage] = {}
        self.items = 0
        self.logical = 0  # bytes the decoded tensors stand for, summed
        crossed = sum(len(b) for b in buffers)
        self.max_logical = min(MAX_LOGICAL_BYTES, LOGICAL_PER_BYTE * crossed + LOGICAL_ALLOWANCE)

    def buf(self, i: Any) -> memoryview:
        i = _int(i, "buffer index")
        if i >= len(self.buffers):
            raise WireError("malformed message: buffer index out of range")
        return self.buffers[i]

    def dec(self, x: Any, depth: int) -> Any:
        self.items += 1
        if depth > MAX_DEPTH or self.items > MAX_ITEMS:
            raise WireError("malformed message: too deep or too many items")
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) is list:
            return [self.dec(v, depth + 1) for v in x]
        if type(x) is not dict or "$" not in x:
            raise WireError("malformed message: unknown node")
        tag = x["$"]
        if tag == "tuple":
            return tuple(self.dec(v, depth + 1) for v in self.lst(x["v"]))
        if tag == "dict":
            out = {}
            for pair in self.lst(x["v"]):
                if type(pair) is not list or len(pair) != 2:
                    raise WireError("malformed message: bad dict entry")
                key = self.dec(pair[0], depth + 1)
                if not _hashable_key(key):
                    raise WireError(f"malformed message: bad dict key {key!r}")
                out[key] = self.dec(pair[1], depth + 1)
            return out
        if tag == "bigint":
            return int(str(x["v"]))
        if tag == "float":
            if x["v"] not in ("nan", "inf", "-inf"):
                raise WireError("malformed message: bad float")
            return float(x["v"])
        if tag == "bytes":
            return bytes(self.buf(x["b"]))
        if tag == "dtype":
            return self.dtype(x["v"])
        if tag == "device":
            return torch.device(str(x["v"]))
        if tag == "tensor":
            return self.tensor(x)
        if tag == "ndarray":
            dt = self.npdtype(x["dtype"])
            shape = tuple(_int(s, "shape") for s in self.lst(x["shape"]))
            data = self.buf(x["b"])
            if math.prod(shape) * dt.itemsize != len(data):
                raise WireError("malformed message: ndarray size mismatch")
            return np.frombuffer(data, dtype=dt).reshape(shape).copy()
        if tag == "npscalar":
            dt = self.npdtype(x["dtype"])
            v = self.dec(x["v"], depth + 1)
            if type(v) not in (bool, int, float, complex):
                raise WireError("malformed message: bad NumPy scalar")
            return dt.type(v)
        if tag == "record":
            fields = x["v"]
            if type(fields) is not dict:
                raise WireError("malformed message: bad record")
            return Record(str(x["name"]), {str(k): self.dec(v, depth + 1) for k, v in fields.items()})
        raise WireError(f"malformed message: unknown tag {tag!r}")

    @staticmethod
    def lst(v: Any) -> list[Any]:
        if type(v) is not list:
            raise WireError("malformed message: expected a list")
        return v

    @staticmethod
    def dtype(name: Any) -> torch.dtype:
        if type(name) is not str or name not in _DTYPES:
            raise WireError(f"malformed message: unknown dtype {name!r}")
        return _DTYPES[name]

    @staticmethod
    def npdtype(s: Any) -> np.dtype:
        try:
            dt = np.dtype(str(s))
        except TypeError as e:
            raise WireError(f"malformed message: bad NumPy dtype {s!r}") from e
        if dt.kind not in _NP_KINDS or dt.hasobject:
            raise WireError(f"malformed message: NumPy dtype {s!r} not allowed")
        return dt

    def tensor(self, x: dict[str, Any]) -> torch.Tensor:
        dtype = self.dtype(x["dtype"])
        shape = [_int(s, "shape") for s in self.lst(x["shape"])]
        stride = [_int(s, "stride") for s in self.lst(x["stride"])]
        offset = _int(x["offset"], "offset")
        if len(shape) != len(stride):
            raise WireError("malformed message: shape and stride lengths differ")
        device = torch.device(str(x["device"]))
        sid = _int(x["storage"], "storage")
        key = (sid, str(device))
        if key not in self.storages:
            data = self.buf(sid)
            cpu = torch.frombuffer(bytearray(data), dtype=torch.uint8) if len(data) else (
                torch.empty(0, dtype=torch.uint8))
            self.storages[key] = cpu.to(device).untyped_storage()
        storage = self.storages[key]
        itemsize = torch.empty(0, dtype=dtype).element_size()
        numel = math.prod(shape)
        if numel:
            last = offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
            if (last + 1) * itemsize > storage.nbytes():
                raise WireError("malformed message: tensor reaches past its storage")
        self.logical += numel * itemsize
        if self.logical > self.max_logical:
            raise WireError(f"malformed message: its tensors stand for {self.logical} bytes, more than "
                            f"{self.max_logical} (at most {LOGICAL_PER_BYTE} times the bytes sent, beyond "
                            f"{LOGICAL_ALLOWANCE >> 20} MiB, and {MAX_LOGICAL_BYTES >> 30} GiB in all)")
        t = torch.empty(0, dtype=dtype, device=device).set_(storage, offset, shape, stride)
        if x.get("requires_grad") is True and (dtype.is_floating_point or dtype.is_complex):
            t.requires_grad_(True)
        return t


def _hashable_key(k: Any) -> bool:
    if k is None or type(k) in (str, int, float, bool):
        return True
    return type(k) is tuple and all(_hashable_key(v) for v in k)


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Rebuild a value from :func:`encode`'s bytes; raise :class:`WireError` if malformed."""
    view = memoryview(data)
    if len(view) < LENGTH.size:
        raise WireError("malformed message: too short")
    (hlen,) = LENGTH.unpack(view[: LENGTH.size])
    end = LENGTH.size + hlen
    if end > len(view):
        raise WireError("malformed message: header past the end")
    try:
        head = json.loads(bytes(view[LENGTH.size : end]))
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError(f"malformed message: {e}") from None
    if type(head) is not dict or "v" not in head or type(head.get("sizes")) is not list:
        raise WireError("malformed message: bad header")
    buffers, pos = [], end
    for size in head["sizes"]:
        size = _int(size, "buffer size")
        if pos + size > len(view):
            raise WireError("malformed message: buffer past the end")
        buffers.append(view[pos : pos + size])
        pos += size
    if pos != len(view):
        raise WireError("malformed message: trailing bytes")
    return _Decoder(buffers).dec(head["v"], 0)
