"""Online calibrators (``online_platt``, ``online_temperature``) follow the labels as they arrive:
once at least ``min_rows`` labelled rows (``CALIBRATION_ONLINE_UPDATE_ROWS``) have been stored for a
name since its latest version, and that version is an online method, it is updated on them in the
order they were stored and the result is stored as the next version, in the transaction that
stores the last of them. Each version records the newest observation chunk it has seen
(``report.online_update.through_chunk``; a fitted version the newest when it was stored), so no
row is applied twice or skipped.

**A new version per update batch, not an update in place**: versions stay immutable, so a served
prediction's ``X-Calibrator-Version`` names parameters that can be read back and re-run, labels
join to exactly the version that answered, evaluations, gates and rollback treat an online version
like any other, and the history is the version list itself. ``min_rows`` bounds how many versions
a stream of small label batches makes (default 100 rows a version).

**Ordering**: every write of observations takes the calibrator's row lock before it inserts
(``app.registry.writes.lock_calibrator``), so chunks commit in id order and an update never passes
over a chunk still being written. Within a labels request, rows are stored by serving version,
each in the order the ids were posted.

Each update version's report holds the batch's *prequential* scores: NLL, Brier and accuracy of
the forecasts made before each row's label was used, i.e. what serving that row would have
answered.
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

import numpy as np
from sqlalchemy.orm import Session

import calibration as cal

from ..registry import integrity
from ..registry import reads as registry
from ..registry import writes as registry_writes
from ..registry.cache import load_calibrator
from ..registry.names import ResolvedVersion
from ..registry.writes import NewVersion, write_version
from . import online_store
from . import store as observation_store

logger = logging.getLogger("calibration.online")


@runtime_checkable
class OnlineCalibrator(Protocol):
    """What a method with ``updates_online`` adds to ``calibration.Calibrator``: it folds labelled
    rows into its parameters in order and returns the probabilities it forecast before each label."""

    def update_batch(self, scores: cal.InputBatch, labels: np.ndarray) -> np.ndarray: ...


class OnlineUpdates:
    """Updates the latest version of a name when it is an online calibrator (see the module)."""

    def __init__(self, integrity_key: bytes | None, min_rows: int = 100):
        self.integrity_key = integrity_key
        self.min_rows = min_rows

    lock = staticmethod(registry_writes.lock_calibrator)

    @staticmethod
    def watermark(session: Session, calibrator_id: int) -> dict:
        """What a fitted online version records: the newest chunk it leaves to the updates."""
        return {"through_chunk": online_store.last_chunk_id(session, calibrator_id)}

    def apply(self, session: Session, calibrator_id: int, name: str) -> int | None:
        """Update ``name``'s latest version on the rows stored since it, if it is online and they
        are enough; the number of the version stored, or ``None``. Call with the lock held."""
        latest = registry.latest_version(session, calibrator_id)
        if latest is None:
            return None
        latest_id, method = latest
        if not getattr(cal.METHODS.get(method), "updates_online", False):
            return None
        parent = registry.version_row(session, latest_id)
        through = (parent.report or {}).get("online_update", {}).get("through_chunk")
        if through is None:
            return None
        pending = online_store.chunks_after(session, calibrator_id, through)
        usable = [entry for entry in pending if entry.kind == parent.input_kind and entry.n_classes == parent.n_classes]
        n = observation_store.index_rows(usable)
        if n < max(self.min_rows, 1):
            return None
        values, labels = observation_store.load(session, usable)
        calibrator = load_calibrator(ResolvedVersion(name, parent.version, parent.checksum, parent.id),
                                     integrity.record_of(name, parent), self.integrity_key)
        if not isinstance(calibrator, OnlineCalibrator):  # every updates_online method defines update_batch
            return None
        try:
            probs = calibrator.update_batch(cal.validate_inputs(values, parent.input_kind), labels)
        except ValueError as exc:  # stored rows are validated on the way in: not expected
            logger.warning("%s: %d rows do not update version %d: %s", name, n, parent.version, exc)
            return None
        params = calibrator.to_dict()
        params["diagnostics"] = {**params["diagnostics"], "iterations": n,
                                 "message": f"online update of version {parent.version} on {n} rows"}
        report = {"online_update": {
            "parent_version": parent.version, "rows": n, "chunks": len(usable), "through_chunk": pending[-1].id,
            "prequential": {"nll": cal.nll(probs, labels), "brier": cal.brier(probs, labels),
                            "accuracy": cal.accuracy(probs, labels)}}}
        row = write_version(session, name, NewVersion(
            calibrator, params, parent.input_kind, parent.n_classes, calibrator.n_samples_, report,
            parent.class_names, parent.description, parent.tags, parent.tensor_names), self.integrity_key)
        return row.version
