"""``ChunkRef``: a stored observation chunk as a read selects it, without its arrays; ``ChunkFacts``: one
with its source, serving version and time."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Rows ``skip`` to ``n_rows`` of observation chunk ``id``: its inputs are ``n_classes`` columns
    (one for ``kind == "scores"``) of ``dtype``. ``n_rows`` below the chunk's own reads a range of it
    (``pieces``). A job that reads stored observations keeps its refs in its request
    as JSON lists (``as_json``), so that it reads exactly the chunks chosen when it was asked for."""

    id: int
    n_rows: int
    dtype: str
    kind: str
    n_classes: int
    skip: int = 0

    @property
    def rows(self) -> int:
        """How many rows the ref selects."""
        return self.n_rows - self.skip

    def as_json(self) -> list:
        """``[id, n_rows, dtype, kind, n_classes, skip]``."""
        return [self.id, self.n_rows, self.dtype, self.kind, self.n_classes, self.skip]

    @classmethod
    def from_json(cls, entry: Sequence) -> ChunkRef:
        """The ref of an ``as_json`` list."""
        chunk_id, n_rows, dtype, kind, n_classes, skip = entry
        return cls(int(chunk_id), int(n_rows), str(dtype), str(kind), int(n_classes), int(skip))


def refs_from_json(entries: Iterable[Sequence]) -> list[ChunkRef]:
    """The refs a job's request keeps (``ChunkRef.as_json`` lists)."""
    return [ChunkRef.from_json(entry) for entry in entries]


def total_rows(index: Iterable[ChunkRef]) -> int:
    """How many rows the refs of ``index`` select."""
    return sum(ref.rows for ref in index)


def pieces(entry: ChunkRef, max_entries: int) -> list[ChunkRef]:
    """``entry`` cut into refs of at most ``max_entries`` rows x classes (at least one row)."""
    step = max(max_entries // max(entry.n_classes if entry.kind != "scores" else 1, 1), 1)
    return [replace(entry, n_rows=min(start + step, entry.n_rows), skip=start)
            for start in range(entry.skip, entry.n_rows, step)]


@dataclass(frozen=True)
class ChunkFacts:
    """One observation chunk without its arrays; ``index_entry`` is its ref (reading from row ``skip``)."""

    id: int
    source: str
    version: int | None
    created_at: datetime
    n_rows: int
    dtype: str
    kind: str
    n_classes: int

    def index_entry(self, skip: int = 0) -> ChunkRef:
        return ChunkRef(self.id, self.n_rows, self.dtype, self.kind, self.n_classes, skip)
