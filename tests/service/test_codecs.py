"""The .npy reader against numpy's own: every header np.save writes, and headers it does not."""

from __future__ import annotations

import io

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from app.codecs import read_npy, write_npy

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
