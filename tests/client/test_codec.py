"""The client's ``.npy`` codec: ``decode_npy`` reads what ``np.load`` reads (every dtype, shape,
byte order, Fortran order and format version) as a writable array of its own, and refuses what it
must not load (object arrays, which only a pickle can carry) or cannot (a cut or malformed body)
with ``ValueError``; ``encode_npy`` writes the bytes ``np.save`` writes of the C-ordered array."""

from __future__ import annotations

import io
import struct
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from calibration_client.codec import decode_npy, encode_npy

DTYPES = ["<f4", ">f4", "<f8", ">f8", "<f2", "|b1", "|u1", "|i1", "<i2", ">i4", "<i8", "<u8", "<c8", ">c16",
          "<U3", "|S2", "<M8[s]", "<m8[ms]", [("a", "<f4"), ("b", ">i2")]]
SHAPES = [(), (0,), (5,), (3, 4), (0, 7), (2, 3, 4), (1, 1, 1, 2)]


def npy(array: np.ndarray, version: tuple[int, int] | None = None, fortran: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asfortranarray(array) if fortran else array, version=version,
                              allow_pickle=False)
    return buffer.getvalue()


def same(decoded: np.ndarray, expected: np.ndarray, where: str = "") -> None:
    assert decoded.dtype == expected.dtype and decoded.shape == expected.shape, where
    assert decoded.tobytes() == expected.tobytes(), where  # bit for bit (NaNs, signed zeros, padding-free dtypes)
    assert decoded.flags.writeable, where


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_equals_np_load_for_dtypes_shapes_and_orders(dtype):
    """Every shape of ``SHAPES``, format version and order, for ``dtype`` (one test item a dtype)."""
    dtype = np.dtype(dtype)
    for shape in SHAPES:
        raw = (np.arange(int(np.prod(shape)) * dtype.itemsize) % 251).astype(np.uint8)  # every byte set
        array = raw.view(dtype).reshape(shape)
        for version in (None, (1, 0), (2, 0), (3, 0)):
            for fortran in (False, True):
                where = f"shape {shape}, version {version}, fortran {fortran}"
                data = npy(array, version, fortran)
                decoded = decode_npy(data)
                expected = np.load(io.BytesIO(data), allow_pickle=False)
                same(decoded, expected, where)
                assert decoded.flags.f_contiguous == expected.flags.f_contiguous, where
                decoded[...] = decoded  # writable, and not the bytes' memory: the answer belongs to the caller


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(hnp.scalar_dtypes() | hnp.byte_string_dtypes() | hnp.unicode_string_dtypes(),
                  hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)),
       st.booleans(), st.sampled_from([None, (1, 0), (2, 0), (3, 0)]))
def test_decode_equals_np_load_for_any_array(array, fortran, version):
    data = npy(array, version, fortran)
    same(decode_npy(data), np.load(io.BytesIO(data), allow_pickle=False))


def test_the_answer_does_not_share_the_bodys_memory():
    data = npy(np.arange(6.0).reshape(2, 3))
    decoded = decode_npy(data)
    decoded[0, 0] = 42.0
    assert decode_npy(data)[0, 0] == 0.0


def header(fields: str, version: tuple[int, int] = (1, 0)) -> bytes:
    """A hand-built ``.npy`` header of ``fields`` (the dict's text), padded as the format says."""
    size = struct.calcsize("<H" if version == (1, 0) else "<I")
    text = fields.encode("latin1")
    length = len(text) + 1
    padding = -(10 + size - 2 + length) % 64
    text = text + b" " * padding + b"\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack("<H" if version == (1, 0) else "<I", len(text)) + text


def test_a_hand_built_header_and_buffer_decode_as_np_load_does():
    values = np.arange(12, dtype=">i4")
    for fortran, expected in ((False, values.reshape(3, 4)), (True, values.reshape(4, 3).T)):
        for version in ((1, 0), (2, 0)):
            data = header(f"{{'descr': '>i4', 'fortran_order': {fortran}, 'shape': (3, 4), }}", version) \
                + values.tobytes()
            same(decode_npy(data), np.load(io.BytesIO(data), allow_pickle=False))
            np.testing.assert_array_equal(decode_npy(data), expected)
    # bytes past the array are not read, as np.load does not read them
    data = header("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }") + np.array([1.5, 2.5]).tobytes()
    np.testing.assert_array_equal(decode_npy(data + b"more"), [1.5, 2.5])


@pytest.mark.parametrize("descr", ["'|O'", "[('a', '<f4'), ('b', '|O')]", "('|O', (2,))"])
def test_object_arrays_are_refused_never_unpickled(descr):
    data = header(f"{{'descr': {descr}, 'fortran_order': False, 'shape': (1,), }}") + b"\x80\x04N." * 8
    with pytest.raises(ValueError, match="object"):
        decode_npy(data)
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="object"):
        decode_npy(pickled.getvalue())


def test_a_cut_body_is_refused_at_every_length():
    data = npy(np.arange(10, dtype=np.float32).reshape(2, 5))
    for end in range(len(data)):
        with pytest.raises(ValueError):
            decode_npy(data[:end])
    with pytest.raises(ValueError):
        decode_npy(memoryview(data)[:-1])


@pytest.mark.parametrize("data", [
    b"",
    b"PK\x03\x04 not an npy",
    b"\x93NUMPY\x04\x00" + b"\x00" * 120,  # a format version numpy does not write
    header("{'descr': '<f4', 'fortran_order': False}") + b"\x00" * 4,  # no shape
    header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
    header("{'descr': '<f4', 'fortran_order': 'no', 'shape': (1,), }") + b"\x00" * 4,
    header("{'descr': 'not a dtype', 'fortran_order': False, 'shape': (1,), }") + b"\x00" * 4,
    header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1, }") + b"\x00" * 4,
    header("__import__('os').system('false')") + b"\x00" * 4,
    b"\x93NUMPY\x01\x00" + struct.pack("<H", 60000) + b"{}",  # a header longer than the body
], ids=["empty", "not-npy", "version", "no-shape", "negative-shape", "fortran-not-bool", "descr", "extra-key",
        "code", "header-past-end"])
def test_malformed_bodies_are_refused(data):
    with pytest.raises(ValueError):
        decode_npy(data)


def old_encode_npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(hnp.scalar_dtypes() | hnp.byte_string_dtypes() | hnp.unicode_string_dtypes(),
                  hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)),
       st.sampled_from(["C", "F", "strided"]))
def test_encode_writes_the_bytes_np_save_writes(array, layout):
    if layout == "F":
        array = np.asfortranarray(array)
    elif layout == "strided" and array.ndim:
        array = array[::2]
    assert encode_npy(array) == old_encode_npy(array)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_encode_and_decode_round_trip(dtype):
    array = np.zeros((3, 2), dtype)
    assert encode_npy(array) == old_encode_npy(array)
    same(decode_npy(encode_npy(array)), array)
    with pytest.raises(ValueError, match="object"):
        encode_npy(np.array([None, 1], dtype=object))


def test_headers_format_1_0_cannot_hold_are_written_and_read_as_numpy_does():
    """A header longer than 1.0's 2-byte length (format 2.0; numpy refuses to read a header that long
    without trusting the file, and so does the client) or with names latin-1 cannot write (3.0)."""
    many = np.zeros(2, [(f"field{i}", "<f4") for i in range(5000)])
    named = np.arange(4.0).view([("\u03c0\u20ac", "<f8")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # np.save warns that 3.0 needs numpy >= 1.17
        long, utf8 = old_encode_npy(many), old_encode_npy(named)
        assert (encode_npy(many), encode_npy(named)) == (long, utf8)
    assert (long[6], utf8[6]) == (2, 3)
    for data in (long, long[:1000]):
        with pytest.raises(ValueError, match="large"):
            np.load(io.BytesIO(long), allow_pickle=False)
        with pytest.raises(ValueError):
            decode_npy(data)
    same(decode_npy(utf8), np.load(io.BytesIO(utf8), allow_pickle=False))
    with pytest.raises(ValueError):
        decode_npy(utf8[:-1])


def test_an_owned_body_is_read_once_into_its_own_buffer_and_a_bad_length_or_an_encoding_is_handled():
    """``read_owned`` fills a buffer of the answer's Content-Length from its raw chunks, and
    ``decode_npy(..., own=True)`` views it; a compressed answer (a proxy's gzip) goes through httpx's
    decoding instead, and an answer longer than its Content-Length is a transport error."""
    import gzip

    import httpx

    from calibration_client import _transport as transport

    array = np.arange(12, dtype="<f4").reshape(3, 4)
    body = npy(array)

    def answer(headers: dict, content: bytes):
        def handler(request):
            return httpx.Response(200, headers=headers, stream=httpx.ByteStream(content))
        with httpx.Client(transport=httpx.MockTransport(handler)) as client:
            response = client.send(client.build_request("GET", "http://service/"), stream=True)
            return transport.read_owned(response), response

    plain, response = answer({"Content-Length": str(len(body))}, body)
    assert isinstance(plain, memoryview) and not plain.readonly and bytes(plain) == body and response.is_closed
    decoded = decode_npy(plain, own=True)
    memory = np.frombuffer(plain, dtype=np.uint8)
    assert np.array_equal(decoded, array) and decoded.flags.writeable and np.shares_memory(decoded, memory)
    assert not np.shares_memory(decode_npy(plain), memory)  # without own=True: a copy, as ever

    packed = gzip.compress(body)
    unpacked, _ = answer({"Content-Length": str(len(packed)), "Content-Encoding": "gzip"}, packed)
    assert bytes(unpacked) == body and np.array_equal(decode_npy(unpacked, own=True), array)

    with pytest.raises(httpx.RemoteProtocolError, match="longer than its Content-Length"):
        answer({"Content-Length": str(len(body) - 1)}, body)
