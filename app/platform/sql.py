"""What every store shares, on SQLite and Postgres alike: the dialect's ``INSERT`` (for
``ON CONFLICT``), the size of an ``IN (...)`` list, a byte range of a blob cut in the database, and
arrays as raw little-endian bytes (never one row per float, never a pickle: ``np.frombuffer``
reads them back)."""

from __future__ import annotations

import numpy as np
from sqlalchemy import LargeBinary, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

IN_LIST = 500  # ids per IN (...) list: well under SQLite's 32766 bound parameters


def dialect_insert(session: Session):
    """The ``insert`` of the session's dialect (Postgres or SQLite), which has ``on_conflict_do_*``."""
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def raw(array: np.ndarray) -> tuple[bytes, str]:
    """An array's bytes, little-endian and C-ordered, with its dtype string."""
    data, dtype = raw_view(array)
    return data.tobytes(), dtype


def raw_view(array: np.ndarray) -> tuple[memoryview, str]:
    """``raw`` without copying the bytes out: a byte view of the array itself where it already is
    little-endian and C-ordered (for a Core insert, whose driver copies them when it binds them)."""
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return little.data.cast("B"), little.dtype.str  # ndarray.data: a memoryview of the array


def from_raw(data: bytes, dtype: str, n_rows: int, n_classes: int, kind: str) -> np.ndarray:
    """The array ``raw`` wrote: ``n_rows`` scores (``kind`` scores) or ``n_rows`` x ``n_classes``."""
    shape = (n_rows,) if kind == "scores" else (n_rows, n_classes)
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)


def byte_range(column, start: int, length: int):
    """``length`` bytes of ``column`` from byte ``start`` on, cut in the database (``substr`` of a
    blob or bytea, 1-based on both): a read of some rows of a chunk never brings its other rows
    into this process."""
    return func.substr(column, start + 1, length, type_=LargeBinary)
