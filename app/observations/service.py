"""Observations of a calibrator, on domain values: labelled batches appended (``upload``),
labels joined to logged predictions (``feedback``, tied to the version that served them), their
summary, deletion, the logging rate, and the arrays of a fit on stored data.

Every append is one transaction (atomic); the per-name caps (``max_rows``, ``max_bytes``) are
checked in it before anything is written.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import numpy as np
from sqlalchemy.exc import NoResultFound

import calibration as cal

from ..platform.db import Database
from ..platform.errors import InvalidInput, NotFound, TooLarge
from ..prediction_log import lookup as prediction_log_lookup
from ..prediction_log import reads as prediction_log_reads
from ..prediction_log.epochs import EpochFilters
from ..prediction_log.service import PredictionLog
from ..registry import reads as registry
from ..registry import writes as registry_writes
from ..registry.names import check_name
from ..wire.batches import ArrayBatch, validated
from . import store as observation_store
from .chunks import ChunkRef, total_rows
from .online_updates import OnlineUpdates
from .store import Selection
from .values import ObservationSelection, UploadSpec

FLOAT_DTYPES = ("f2", "f4", "f8")


def stored_form(values) -> np.ndarray:
    """The input as it will be stored: its own float dtype (float32 stays float32), else float64."""
    array = np.asarray(values)
    return array if array.dtype.kind == "f" and array.dtype.str[1:] in FLOAT_DTYPES else array.astype(np.float64)


class Observations:
    def __init__(self, db: Database, log: PredictionLog | None, max_rows: int, max_bytes: int,
                 max_fit_entries: int, online: OnlineUpdates):
        self.db = db
        self.log = log
        self.epoch_filters = log.epoch_filters if log is not None else EpochFilters(0)
        self.online = online
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_fit_entries = max_fit_entries

    # -- uploads ------------------------------------------------------------------------------

    def append(self, name: str, batch: ArrayBatch[UploadSpec]) -> dict:
        """Append a labelled batch (validated as a fit's) to ``name``'s observations, creating the
        name if it is new; its input kind and class count must match what ``name`` already has."""
        check_name(name)
        inputs, labels = validated(batch)
        if batch.kind is None or labels is None:  # validated() refuses a batch without an input; the route needs labels
            raise InvalidInput("an observation batch needs an input array and labels")
        fields = batch.fields
        values = stored_form(batch.values)
        with self.db.write() as session:
            calibrator_id = registry_writes.ensure_calibrator(session, name)
            self.online.lock(session, calibrator_id)
            expected = observation_store.shape_of(session, calibrator_id)
            if expected is not None and expected != (batch.kind, inputs.k):
                raise InvalidInput(f"{name!r} holds {expected[0]} of {expected[1]} classes; this batch is "
                                   f"{batch.kind} of {inputs.k} classes")
            rows = self._check_caps(session, calibrator_id, name, inputs.n, values.nbytes)
            observation_store.append(session, calibrator_id, "upload", None, batch.kind, inputs.k, values, labels,
                                     fields.observed_at)
            online_version = self.online.apply(session, calibrator_id, name)
        return {"name": name, "appended": inputs.n, "total_rows": rows + inputs.n, "online_version": online_version}

    def _check_caps(self, session, calibrator_id: int, name: str, n: int, nbytes: int) -> int:
        """Refuse (413) ``n`` more rows of ``nbytes`` bytes past the per-name caps; the rows held now.
        Every path that stores observations (uploads, labels) calls it in its transaction, after
        the calibrator's lock (``online.lock``): concurrent appends cannot pass it together."""
        rows, size = observation_store.totals(session, calibrator_id)
        if rows + n > self.max_rows or size + nbytes > self.max_bytes:
            raise TooLarge(f"{name!r} would hold {rows + n} observation rows and {size + nbytes} "
                           f"bytes, over the caps of {self.max_rows} rows and {self.max_bytes} bytes "
                           "(CALIBRATION_MAX_OBSERVATION_ROWS, _BYTES); delete old ones first")
        return rows

    def summary(self, name: str) -> dict:
        """Counts per source, per serving version and per day, and the class balance, from the
        chunks' small columns (the arrays are never read)."""
        check_name(name)
        with self.db.read() as session:
            calibrator = registry.calibrator(session, name)
            facts = observation_store.chunk_facts(session, calibrator.id)
            shape = observation_store.shape_of(session, calibrator.id)
            logged, labelled = prediction_log_reads.logged_counts(session, calibrator.id)
            held, dropped = prediction_log_reads.log_state(session, calibrator.id)
        by_source: Counter[str] = Counter()
        by_version: Counter[str] = Counter()
        by_day: Counter[str] = Counter()
        class_counts = np.zeros(shape[1] if shape else 0, dtype=np.int64)
        for source, version, created_at, n_rows, counts in facts:
            by_source[source] += n_rows
            if version is not None:
                by_version[str(version)] += n_rows
            by_day[created_at.date().isoformat()] += n_rows
            class_counts[:len(counts)] += counts
        total = int(class_counts.sum())
        return {"name": name, "total_rows": total, "input_kind": shape[0] if shape else None,
                "n_classes": shape[1] if shape else None, "by_source": dict(by_source),
                "by_version": dict(by_version), "by_day": dict(sorted(by_day.items())),
                "class_counts": class_counts.tolist(),
                "class_balance": (class_counts / total).tolist() if total else [],
                "first_at": facts[0][2] if facts else None, "last_at": facts[-1][2] if facts else None,
                "prediction_log": {"sample_rate": calibrator.log_sample_rate, "logged": logged,
                                   "labelled": labelled, "logged_rows": held, "dropped": dropped,
                                   "full": self._full(held)}}

    def delete_before(self, name: str, before: datetime) -> dict:
        check_name(name)
        with self.db.write() as session:
            calibrator = registry.calibrator(session, name)
            return {"name": name, "deleted_rows": observation_store.delete_before(session, calibrator.id, before)}

    # -- the prediction log -------------------------------------------------------------------

    def set_logging(self, name: str, sample_rate: float) -> dict:
        check_name(name)
        with self.db.write() as session:
            registry_writes.set_log_sample_rate(session, name, sample_rate)
        if sample_rate > 0 and self.log is not None:
            self.log.start_writer()
        return self.logging(name)

    def logging(self, name: str) -> dict:
        """The prediction log of ``name``: its sampling rate, the rows it holds, its cap
        (``CALIBRATION_MAX_LOGGED_ROWS``), whether it is full (calibrate still answers, nothing more
        is logged until retention or a delete frees room) and the rows it dropped for being full."""
        check_name(name)
        with self.db.read() as session:
            calibrator = registry.calibrator(session, name)
            logged, dropped = prediction_log_reads.log_state(session, calibrator.id)
        return {"name": name, "sample_rate": calibrator.log_sample_rate, "logged_rows": logged,
                "max_logged_rows": self.log.max_logged_rows if self.log is not None else None,
                "full": self._full(logged), "dropped_rows": dropped}

    def _full(self, logged: int) -> bool:
        return self.log is not None and logged >= self.log.max_logged_rows

    def label(self, name: str, ids: list[str], labels: list[int]) -> dict:
        """Turn the logged predictions ``ids`` into observations with ``labels``, each tied to the
        version that served it; all or nothing (a label out of its version's range is a 422)."""
        check_name(name)
        if len(ids) != len(labels):
            raise InvalidInput(f"{len(ids)} ids but {len(labels)} labels")
        if self.log is not None:
            self.log.flush()
        first: dict[str, int] = {}
        statuses = []
        for position, pid in enumerate(ids):
            statuses.append("duplicate" if pid in first else None)
            first.setdefault(pid, position)
        with self.db.write() as session:
            calibrator = registry.calibrator(session, name)
            found = prediction_log_lookup.find_logged(session, calibrator.id, list(first), self.epoch_filters)
            wanted: dict[int, set[int]] = {}
            for logged in found.values():
                wanted.setdefault(logged.chunk_id, set()).add(logged.row)
            chunks = prediction_log_reads.prediction_rows(session, wanted)  # those rows only, not whole chunks
            for pid, logged in found.items():
                label, n_classes = labels[first[pid]], chunks[logged.chunk_id][2]
                if not 0 <= label < max(n_classes, 2):
                    raise InvalidInput(f"label {label} of prediction {pid!r} is outside [0, {max(n_classes, 2)})")
            unlabelled = {pid: logged for pid, logged in found.items() if not logged.labelled}
            claimed = prediction_log_lookup.claim_labels(session, calibrator.id, unlabelled)
            by_version: dict[tuple, tuple[list, list]] = {}
            for pid, position in first.items():  # in the order the ids were posted
                if pid in claimed:
                    chunk, row = found[pid].chunk_id, found[pid].row
                    version, kind, n_classes, inputs = chunks[chunk]
                    entry = by_version.setdefault((version, kind, n_classes, inputs[row].dtype.str), ([], []))
                    entry[0].append(inputs[row])
                    entry[1].append(labels[position])
            self.online.lock(session, calibrator.id)
            self._check_caps(session, calibrator.id, name, len(claimed),
                             sum(len(rows) * rows[0].nbytes for rows, _ in by_version.values()))
            for (version, kind, n_classes, _), (rows, part_labels) in sorted(by_version.items()):
                observation_store.append(session, calibrator.id, "feedback", version, kind, n_classes,
                                         np.stack(rows), np.asarray(part_labels, dtype=np.int64))
            online_version = self.online.apply(session, calibrator.id, name) if claimed else None
        for pid, position in first.items():
            statuses[position] = ("labelled" if pid in claimed else "already_labelled" if pid in found
                                  else "unknown")
        return {"name": name, "labelled": len(claimed), "counts": dict(Counter(statuses)), "statuses": statuses,
                "online_version": online_version}

    # -- fits on stored data ------------------------------------------------------------------

    def fit_index(self, name: str, selection: ObservationSelection) -> list[ChunkRef]:
        """The chunks a fit on ``name``'s stored observations reads (fixed when the fit is asked
        for, so that a job fits exactly them), after checking there are some and not too many."""
        with self.db.read() as session:
            calibrator = registry.calibrator(session, name)
            index = observation_store.chunk_index(session, calibrator.id, Selection(**selection.given()))
        if not index:
            raise NotFound(f"{name!r} has no observations matching {selection.given()}")
        n, k, _ = shape_of_index(index)
        if n * k > self.max_fit_entries:
            raise TooLarge(f"{n} observations of {k} classes are {n * k} entries, over the limit of "
                           f"{self.max_fit_entries} for one fit (CALIBRATION_MAX_FIT_ENTRIES); select fewer (`last`)")
        return index

    def load(self, fields, index: list[ChunkRef], shared: bool = False) -> ArrayBatch:
        """The labelled batch of a fit on stored data: the chunks of ``index``, concatenated. The
        array is the fit's own, so the core may reorder its rows while it works (a comparison's
        folds as views instead of copies: ``calibration.allow_reordering``), unless it is
        ``shared`` (a worker's cached arrays, read by several parts)."""
        with self.db.read() as session:
            try:
                inputs, labels = observation_store.load(session, index, loaded_dtype(index))
            except NoResultFound as exc:
                raise NotFound("observations selected for this fit were deleted before it ran") from exc
        return ArrayBatch(fields, index[0].kind, inputs if shared else cal.allow_reordering(inputs), labels)


def loaded_dtype(index: list[ChunkRef]) -> type:
    """The dtype a fit reads ``index``'s chunks in: float32 where every chunk holds float32 (the
    core reads float32 a block of rows at a time, accumulating in float64, and widening is exact,
    so a fit computes the same numbers without a whole float64 copy: the fold layout of ``auto``
    is then float32 too), else float64 (float16 and float64 chunks widen to it exactly)."""
    return np.float32 if all(np.dtype(ref.dtype) == np.float32 for ref in index) else np.float64


def shape_of_index(index: list[ChunkRef]) -> tuple[int, int, str]:
    """Rows, classes and input kind of a fit index."""
    return total_rows(index), index[0].n_classes, index[0].kind
