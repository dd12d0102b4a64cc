"""Request bodies built to attack the service: ``zip_bomb``, a deflated .npz whose header promises far
more than its bytes hold (the hostile-input table, the live hostile run and the request-budget tests
send it)."""

from __future__ import annotations

import io
import zipfile
from functools import cache

import numpy as np


@cache
def zip_bomb(shape=(40_000, 1000), dtype="<f8", data_bytes: int | None = None) -> bytes:
    """A deflated .npz whose logits member declares ``shape`` of ``dtype`` in its .npy header and
    holds ``data_bytes`` zeros (by default as many as the header promises): 40000 x 1000 float64 is
    320 MB in 310 kB. Written in chunks, never held whole; built once per process per arguments."""
    header = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    left = int(np.prod(shape)) * np.dtype(dtype).itemsize if data_bytes is None else data_bytes
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("logits.npy", "w", force_zip64=True) as member:
            member.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin-1"))
            chunk = bytes(1 << 22)
            while left > 0:
                member.write(chunk[:left])
                left -= len(chunk)
        labels = io.BytesIO()
        np.save(labels, np.zeros(3, np.int64))
        archive.writestr("labels.npy", labels.getvalue())
    return buffer.getvalue()
