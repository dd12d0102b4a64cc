"""Request and response bodies: JSON decoded with orjson straight into numpy arrays, and
binary ``.npy`` / ``.npz`` bodies parsed without ever unpickling.

``.npy`` is read by hand from its header (``numpy.lib.format``): only plain numeric dtypes
(bool, integers, floats) are accepted, the header must describe exactly the bytes that follow,
and the data is viewed with ``numpy.frombuffer``. Object arrays (pickles) are refused before
any of their bytes are interpreted. ``.npz`` members are read the same way, with their
uncompressed sizes capped.
"""

from __future__ import annotations

import io
import math
import re
import zipfile

import numpy as np
import orjson

from .errors import InvalidInput, MalformedRequest, TooLarge

NPY_TYPE = "application/x-npy"
NPZ_TYPE = "application/x-npz"
JSON_TYPE = "application/json"
ALLOWED_KINDS = "biuf"


def parse_json(body: bytes) -> dict:
    if not body:
        raise MalformedRequest("the request body is empty; send a JSON object")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"malformed JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise MalformedRequest("the request body must be a JSON object")
    return value


# the header np.save writes; anything else is parsed by numpy.lib.format (ast.literal_eval,
# ~40 µs: most of the cost of reading a 64 x 1000 batch)
SIMPLE_HEADER = re.compile(r"\{'descr': '([<>|=]?[a-z]\d{1,2})', 'fortran_order': (True|False), "
                           r"'shape': \(((?:\d{1,18}, )*(?:\d{1,18},?)?)\), \} *\n")


def _npy_header(data: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Shape, Fortran order, dtype and data offset of an .npy body."""
    if data[:6] == b"\x93NUMPY" and data[6:8] == b"\x01\x00" and len(data) >= 10:
        end = 10 + int.from_bytes(data[8:10], "little")
        match = SIMPLE_HEADER.fullmatch(data[10:end].decode("latin-1"))
        if match:
            descr, fortran, dims = match.groups()
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
            return shape, fortran == "True", np.dtype(descr), end
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    return shape, fortran, dtype, stream.tell()


def read_npy(data: bytes, name: str = "array") -> np.ndarray:
    """A numeric array from ``.npy`` bytes; anything else is a 422 naming the problem."""
    try:
        shape, fortran, dtype, offset = _npy_header(data)
    except (ValueError, EOFError, SyntaxError, TypeError) as exc:
        raise InvalidInput(f"{name} is not a valid .npy array: {exc}") from exc
    if dtype.hasobject or dtype.kind not in ALLOWED_KINDS or dtype.fields is not None:
        raise InvalidInput(f"{name} has dtype {dtype}; only numeric arrays are accepted (no objects, no pickles)")
    if len(shape) > 2:
        raise InvalidInput(f"{name} must have 1 or 2 dimensions, got shape {shape}")
    count = math.prod(shape)
    expected = count * dtype.itemsize
    if len(data) - offset != expected:
        raise InvalidInput(f"{name}: the .npy header promises {expected} bytes of data for shape {shape}, "
                      f"the body holds {len(data) - offset}")
    array = np.frombuffer(data, dtype=dtype, offset=offset, count=count)
    return array.reshape(shape, order="F" if fortran else "C")


def read_npz(data: bytes, limit: int) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` body, each parsed by ``read_npy``; total size capped."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise InvalidInput(f"the body is not a valid .npz archive: {exc}") from exc
    if sum(member.file_size for member in members) > limit:
        raise TooLarge(f"the .npz archive expands beyond the {limit}-byte limit")
    arrays = {}
    for member in members:
        if not member.filename.endswith(".npy"):
            raise InvalidInput(f".npz member {member.filename!r} is not a .npy array")
        name = member.filename[:-4]
        try:
            raw = archive.read(member)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise InvalidInput(f".npz member {member.filename!r} cannot be read: {exc}") from exc
        arrays[name] = read_npy(raw, name)
    return arrays


def write_npy(array: np.ndarray) -> bytes:
    """``.npy`` bytes (format 1.0) in one copy of the data."""
    array = np.ascontiguousarray(array)
    header = (f"{{'descr': {np.lib.format.dtype_to_descr(array.dtype)!r}, 'fortran_order': False, "
              f"'shape': {array.shape!r}, }}")
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"  # data aligned to 64 bytes
    prefix = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin-1")
    return b"".join((prefix, array.reshape(-1).view(np.uint8)))


def dump_json(value) -> bytes:
    """JSON bytes; numpy arrays are serialised natively, NaN and infinity become null."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
