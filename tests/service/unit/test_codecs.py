"""The .npy and .npz readers against numpy's own: every header np.save writes, and headers it does
not; stored .npz members read in place are CRC-checked as zipfile checks them."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from app.platform.errors import InvalidInput
from app.wire.codecs import read_npy, read_npz, write_npy
from app.wire.costs import RequestLimits

LIMITS = RequestLimits(1 << 24, 1 << 24, 1 << 24, 1 << 24)

DTYPES = st.sampled_from(["<f2", "<f4", "<f8", ">f8", "<i1", "<i4", ">i8", "|u1", "<u8", "|b1"])


def saved(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@given(DTYPES.flatmap(lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0,
                                                                        max_side=5))), st.booleans())
def test_read_npy_reads_what_numpy_reads(array, fortran):
    data = saved(np.asfortranarray(array) if fortran else array)
    expected = np.load(io.BytesIO(data), allow_pickle=False)
    got = read_npy(data)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_headers_np_save_does_not_write_go_through_numpy_s_parser():
    data = saved(np.arange(6.0).reshape(2, 3))
    length = int.from_bytes(data[8:10], "little")
    header = data[10:10 + length].decode("latin-1")
    for variant in (header.replace("'descr': '<f8', 'fortran_order': False", "'fortran_order': False, 'descr': '<f8'"),
                    header.replace("(2, 3)", "(2,3)"), header.replace(": ", ":")):
        body = data[:10] + variant.ljust(length - 1).encode("latin-1")[: length - 1] + b"\n" + data[10 + length:]
        np.testing.assert_array_equal(read_npy(body), np.arange(6.0).reshape(2, 3))


@given(DTYPES.flatmap(lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                                        max_side=5))), st.booleans())
def test_write_npy_writes_the_bytes_numpy_writes(array, fortran):
    array = np.asfortranarray(array) if fortran else array
    expected = io.BytesIO()
    np.lib.format.write_array(expected, np.ascontiguousarray(array), allow_pickle=False)
    assert write_npy(array) == expected.getvalue()


@given(st.lists(DTYPES.flatmap(lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0,
                                                                                 max_side=5))),
                min_size=1, max_size=3), st.booleans())
def test_read_npz_reads_what_numpy_reads_stored_in_place_or_compressed(arrays, compressed):
    buffer = io.BytesIO()
    named = {f"a{i}": array for i, array in enumerate(arrays)}
    (np.savez_compressed if compressed else np.savez)(buffer, **named)
    body = buffer.getvalue()
    got = read_npz(body, LIMITS)
    with np.load(io.BytesIO(body), allow_pickle=False) as expected:
        assert got.keys() == set(expected.files)
        for name in expected.files:
            assert got[name].dtype == expected[name].dtype and got[name].shape == expected[name].shape
            np.testing.assert_array_equal(got[name], expected[name])
            assert (_owner(got[name]) is body) is not compressed  # stored members are read in place


def _owner(array: np.ndarray):
    """The object whose memory an array from ``np.frombuffer`` views."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array


@pytest.mark.parametrize("rows", [4, 40000])  # read whole with the header by zipfile / in place by us
def test_a_stored_npz_member_read_in_place_is_checked_like_zipfile_checks_it(rows):
    buffer = io.BytesIO()
    np.savez(buffer, logits=np.arange(3.0 * rows).reshape(rows, 3), labels=np.arange(rows) % 3)
    body = bytearray(buffer.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(body))) as archive:
        member = archive.getinfo("logits.npy")
    start = body.index(b"\x93NUMPY", member.header_offset)
    body[start + member.file_size - 1] ^= 0xFF  # the last byte of its data
    with pytest.raises(InvalidInput, match=r"Bad CRC-32 for file 'logits\.npy'"):
        read_npz(bytes(body), LIMITS)
    # a local header whose extra field differs from the central directory's (zip writers may add one)
    extra = io.BytesIO()
    with zipfile.ZipFile(extra, "w", zipfile.ZIP_STORED) as archive:
        info = zipfile.ZipInfo("scores.npy")
        info.extra = b"\xfe\xca\x04\x00abcd"
        archive.writestr(info, saved(np.array([0.5, -1.0])))
    np.testing.assert_array_equal(read_npz(extra.getvalue(), LIMITS)["scores"], [0.5, -1.0])
