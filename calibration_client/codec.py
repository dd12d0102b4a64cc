"""``.npy`` and ``.npz`` bodies, written and read with numpy and never unpickled. numpy is imported
by the functions that handle arrays, so that a caller that sends none (a command line's listing)
does not load it."""

from __future__ import annotations

import functools
import io
import math
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

NPY = "application/x-npy"
NPZ = "application/x-npz"
INPUT_KINDS = ("logits", "probabilities", "scores")


def as_array(value: Any, what: str) -> np.ndarray:
    """``value`` as a numpy array (lists, numpy arrays, CPU tensors); object arrays are refused,
    since they cannot be sent without pickling."""
    import numpy as np

    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise ValueError(f"{what} must be numeric, not an array of Python objects")
    return array


NPY_MAGIC = b"\x93NUMPY"


def encode_npy(array: np.ndarray) -> bytes:
    """The ``.npy`` bytes ``np.save`` writes of ``array`` in C order: its header, then the array's
    memory, joined in one copy. Object arrays are refused (``ValueError``): only a pickle carries them."""
    import numpy as np

    array = np.ascontiguousarray(array)
    if array.dtype.hasobject:
        raise ValueError("object arrays cannot be sent: only a pickle carries them")
    try:
        if array.dtype.fields is None and array.dtype.subdtype is None:
            head = _npy_header(array.dtype.str, array.shape)
        else:  # a structured dtype: its descr is a list, not a cache key
            head = _write_npy_header(array.dtype, array.shape)
    except ValueError:  # a header format 1.0 cannot hold or latin-1 cannot write: np.save's 2.0 or 3.0
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        return buffer.getvalue()
    return b"".join((head, array.reshape(-1).view(np.uint8)))


@functools.lru_cache(maxsize=64)
def _npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    """The format 1.0 header of a C-ordered ``dtype`` array of ``shape``, as ``np.save`` writes it."""
    import numpy as np

    return _write_npy_header(np.dtype(dtype), shape)


def _write_npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The format 1.0 header ``np.save`` writes; ``ValueError`` where 1.0 cannot hold it."""
    import numpy as np

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def decode_npy(data: bytes | memoryview | bytearray, own: bool = False) -> np.ndarray:
    """One ``.npy`` array, as ``np.load(..., allow_pickle=False)`` reads it, in memory of its own
    (writable): a copy of ``data``'s, or with ``own=True`` (``data`` a writable buffer that nobody
    else holds, e.g. ``transport.read_owned``'s) a view of that buffer, no copy. The header is
    checked as numpy checks it (magic string, format version, a dict of exactly ``descr`` (a
    dtype), ``fortran_order`` (a bool) and ``shape`` (non-negative ints)) and parsed once per
    distinct header; the array is the ``prod(shape) * itemsize`` bytes after it
    (bytes past them are not read). An object dtype (a pickle) is refused, never loaded; so are a
    body cut short and a malformed header: ``ValueError``."""
    import numpy as np

    head, version = _npy_head(data)
    if version == (3, 0):  # utf-8 field names: numpy's own reader (format 3.0 has no public header reader)
        try:
            return np.load(io.BytesIO(data), allow_pickle=False)
        except EOFError as exc:
            raise ValueError(f"the .npy body is cut short: {exc}") from exc
    dtype, shape, fortran_order = _npy_fields(head)
    count = math.prod(shape)
    size = count * dtype.itemsize
    if len(data) - len(head) < size:
        raise ValueError(f"the .npy body is cut short: {len(data) - len(head)} bytes of array data for {size}")
    if size:
        flat = np.frombuffer(data, dtype=dtype, count=count, offset=len(head))
        if not (own and flat.flags.writeable):
            flat = flat.copy()
    else:
        flat = np.empty(count, dtype=dtype)
    return flat.reshape(shape[::-1]).transpose() if fortran_order else flat.reshape(shape)


def _npy_head(data: bytes | memoryview) -> tuple[bytes, tuple[int, int]]:
    """The header's bytes (magic string to padding) and the format version."""
    if len(data) < 10 or bytes(data[:6]) != NPY_MAGIC:
        raise ValueError("not an .npy body (no magic string)")
    version = (data[6], data[7])
    if version == (1, 0):
        start, length = 10, int.from_bytes(data[8:10], "little")
    elif version in ((2, 0), (3, 0)):
        start, length = 12, int.from_bytes(data[8:12], "little")
    else:
        raise ValueError(f".npy format version {version[0]}.{version[1]} is not one numpy writes")
    if len(data) < start + length:
        raise ValueError(f"the .npy header is cut short: {len(data)} bytes for a header of {start + length}")
    return bytes(data[:start + length]), version


@functools.lru_cache(maxsize=64)
def _npy_fields(head: bytes) -> tuple[np.dtype, tuple[int, ...], bool]:
    """dtype, shape and Fortran order of a format 1.0 or 2.0 header (numpy's public readers check
    it); object dtypes and negative lengths are refused."""
    import numpy as np

    read = np.lib.format.read_array_header_1_0 if head[6] == 1 else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read(io.BytesIO(head[8:]))
    if dtype.hasobject:
        raise ValueError("the .npy body holds an object array (a pickle): it is never loaded")
    if any(n < 0 for n in shape):
        raise ValueError(f"the .npy shape {shape} has a negative length")
    return dtype, shape, fortran_order


def encode_npz(arrays: dict[str, np.ndarray]) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise ValueError(f"{name} must be numeric, not an array of Python objects")
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def load_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file (by member name) or of an ``.npy`` file (as ``{"": array}``),
    read without unpickling."""
    import numpy as np

    with open(path, "rb") as file:
        data = file.read()
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    return {"": decode_npy(data)}


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    import numpy as np

    np.save(path, np.asarray(array), allow_pickle=False)
