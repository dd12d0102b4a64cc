"""Request and response bodies: JSON decoded with orjson straight into numpy arrays, and
binary ``.npy`` / ``.npz`` bodies parsed without ever unpickling.

``.npy`` is read by hand from its header (``numpy.lib.format``): only plain numeric dtypes
(bool, integers, floats) are accepted, the header must describe exactly the bytes that follow,
and the data is viewed with ``numpy.frombuffer``. Object arrays (pickles) are refused before
any of their bytes are interpreted. ``.npz`` members are read the same way; their declared
uncompressed sizes and their headers' shapes are checked against the request budgets
(``app.wire.costs.RequestLimits``) before any member's data is decompressed.
"""

from __future__ import annotations

import io
import math
import re
import zipfile
import zlib

import numpy as np
import orjson

from ..platform.errors import InvalidInput, MalformedRequest, TooLarge
from .costs import RequestLimits

NPY_TYPE = "application/x-npy"
NPZ_TYPE = "application/x-npz"
JSON_TYPE = "application/json"
ALLOWED_KINDS = "biuf"
MAX_HEADER_BYTES = 1 << 16  # numpy writes headers of a few hundred bytes


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


def _npy_header(data: bytes | memoryview) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Shape, Fortran order, dtype and data offset of an .npy body; only the header's bytes are
    copied (to be parsed), never the data's."""
    if bytes(data[:8]) == b"\x93NUMPY\x01\x00" and len(data) >= 10:
        end = 10 + int.from_bytes(data[8:10], "little")
        match = SIMPLE_HEADER.fullmatch(bytes(data[10:end]).decode("latin-1"))
        if match:
            descr, fortran, dims = match.groups()
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
            return shape, fortran == "True", np.dtype(descr), end
    stream = io.BytesIO(bytes(data[:MAX_HEADER_BYTES + 12]))  # a header numpy parses itself
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    return shape, fortran, dtype, stream.tell()


def _check_shape(name: str, shape: tuple, dtype: np.dtype, limits: RequestLimits | None) -> None:
    """A 413 when the header's shape decodes to more than the array-byte or entry budgets."""
    if limits is None:
        return
    entries = math.prod(shape)
    if entries * dtype.itemsize > limits.array_bytes:
        raise TooLarge(f"{name}: the .npy header declares shape {shape} of {dtype}, {entries * dtype.itemsize} bytes "
                       f"decoded, over the {limits.array_bytes}-byte limit (CALIBRATION_MAX_ARRAY_BYTES)")
    if entries > limits.entries:
        raise TooLarge(f"{name}: the .npy header declares shape {shape}, {entries} entries, over the limit of "
                       f"{limits.entries} entries per request (CALIBRATION_MAX_ENTRIES)")


def _checked_header(data: bytes | memoryview, name: str, limits: RequestLimits | None):
    try:
        shape, fortran, dtype, offset = _npy_header(data)
    except (ValueError, EOFError, SyntaxError, TypeError) as exc:
        raise InvalidInput(f"{name} is not a valid .npy array: {exc}") from exc
    if dtype.hasobject or dtype.kind not in ALLOWED_KINDS or dtype.fields is not None:
        raise InvalidInput(f"{name} has dtype {dtype}; only numeric arrays are accepted (no objects, no pickles)")
    if len(shape) > 2:
        raise InvalidInput(f"{name} must have 1 or 2 dimensions, got shape {shape}")
    if any(d < 0 for d in shape):
        raise InvalidInput(f"{name}: the .npy header declares a negative dimension for shape {shape}")
    _check_shape(name, shape, dtype, limits)
    return shape, fortran, dtype, offset


def read_npy(data: bytes | memoryview, name: str = "array", limits: RequestLimits | None = None) -> np.ndarray:
    """A numeric array from ``.npy`` bytes; anything else is a 422 naming the problem, and a
    header that declares more than ``limits`` allow a 413, before the data is looked at."""
    shape, fortran, dtype, offset = _checked_header(data, name, limits)
    count = math.prod(shape)
    expected = count * dtype.itemsize
    if len(data) - offset != expected:
        raise InvalidInput(f"{name}: the .npy header promises {expected} bytes of data for shape {shape}, "
                      f"the body holds {len(data) - offset}")
    array = np.frombuffer(data, dtype=dtype, offset=offset, count=count)
    return array.reshape(shape, order="F" if fortran else "C")


def _member_header(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> bytes:
    """The first bytes of an .npz member, up to the end of its .npy header: only these are
    decompressed (a deflate stream inflates at most ~1000x, so a few kB), not the data."""
    with archive.open(member) as stream:
        head = stream.read(12)
        if head[:6] != b"\x93NUMPY" or len(head) < 10:
            return head
        size = int.from_bytes(head[8:10], "little") + 10 if head[6] == 1 else \
            int.from_bytes(head[8:12], "little") + 12
        if size > MAX_HEADER_BYTES:
            raise InvalidInput(f".npz member {member.filename!r} has a {size}-byte .npy header")
        return head + stream.read(size - len(head))


def read_npz(data: bytes, limits: RequestLimits) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` body, each parsed by ``read_npy``. Before any member is
    decompressed, the declared uncompressed sizes and every member's ``.npy`` header (read
    alone) are checked against the ``limits``: a zip bomb is a 413 having inflated a few kB."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise InvalidInput(f"the body is not a valid .npz archive: {exc}") from exc
    declared = sum(member.file_size for member in members)
    if declared > limits.array_bytes:
        raise TooLarge(f"the .npz archive expands beyond the {limits.array_bytes}-byte limit "
                       f"(CALIBRATION_MAX_ARRAY_BYTES): its members declare {declared} bytes")
    entries = 0
    for member in members:
        if not member.filename.endswith(".npy"):
            raise InvalidInput(f".npz member {member.filename!r} is not a .npy array")
        try:
            head = _member_header(archive, member)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
            raise InvalidInput(f".npz member {member.filename!r} cannot be read: {exc}") from exc
        shape, _, _, _ = _checked_header(head, member.filename[:-4], limits)
        entries += math.prod(shape)
    if entries > limits.entries:
        raise TooLarge(f"the .npz arrays hold {entries} entries, over the limit of {limits.entries} entries per "
                       "request (CALIBRATION_MAX_ENTRIES)")
    arrays = {}
    for member in members:
        name = member.filename[:-4]
        try:
            raw: bytes | memoryview | None = _stored_member(data, member)
            if raw is None:
                raw = archive.read(member)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
            raise InvalidInput(f".npz member {member.filename!r} cannot be read: {exc}") from exc
        arrays[name] = read_npy(raw, name, limits)
    return arrays


def _stored_member(data: bytes, member: zipfile.ZipInfo) -> memoryview | None:
    """An uncompressed (``np.savez``) member's bytes in place, without the copy ``ZipFile.read``
    makes (an HTTP fit then holds the body and its float64 inputs, not a third copy), after the same
    CRC-32 check; ``None`` for a compressed or encrypted member, which ``ZipFile.read`` inflates."""
    if member.compress_type != zipfile.ZIP_STORED or member.flag_bits & 0x1:
        return None
    local = memoryview(data)[member.header_offset:member.header_offset + 30]
    if len(local) < 30 or bytes(local[:4]) != b"PK\x03\x04":
        raise zipfile.BadZipFile("bad local file header")
    start = member.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
    raw = memoryview(data)[start:start + member.compress_size]
    if len(raw) != member.file_size:
        raise zipfile.BadZipFile("truncated member")
    if zlib.crc32(raw) != member.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {member.filename!r}")
    return raw


def npy_parts(array: np.ndarray, dtype: np.dtype | None = None) -> tuple[bytes, memoryview]:
    """An ``.npy`` (format 1.0) of ``array`` cast to ``dtype`` as two parts: its header and a
    byte view of the data. The data is the array's own buffer when it is already C-contiguous in
    ``dtype``, else the one cast or copy that makes it so; the caller sends both parts as they
    are, with no joined copy."""
    array = np.ascontiguousarray(array, dtype=dtype)
    header = (f"{{'descr': {np.lib.format.dtype_to_descr(array.dtype)!r}, 'fortran_order': False, "
              f"'shape': {array.shape!r}, }}")
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"  # data aligned to 64 bytes
    prefix = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin-1")
    return prefix, array.reshape(-1).view(np.uint8).data  # a byte memoryview of the buffer


def write_npy(array: np.ndarray) -> bytes:
    """``.npy`` bytes (format 1.0) in one copy of the data."""
    return b"".join(npy_parts(array))


def dump_json(value) -> bytes:
    """JSON bytes; numpy arrays are serialised natively, NaN and infinity become null."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
