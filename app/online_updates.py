"""Online calibrators (``online_platt``, ``online_temperature``) follow the labels as they arrive:
when labelled rows are appended to a name whose latest version is an online method, that version is
updated on them, in the order they came, and the result is stored as the next version, in the same transaction that
stores the rows.

**A new version per update batch, not an update in place**: versions stay immutable, so a served
prediction's ``X-Calibrator-Version`` names parameters that can be read back and re-run, labels
join to exactly the version that answered, evaluations, gates and rollback treat an online version
like any other, and the history is the version list itself. The cost is one version row (a few
hundred bytes) per labels or observations request that carries rows.

**Nothing applied twice or lost**: the update reads the latest version after locking the
calibrator's row (``SELECT ... FOR NO KEY UPDATE`` on Postgres, which the rows' own inserts, holding
``FOR KEY SHARE`` through their foreign key, do not block; SQLite's write transactions are already
serialised by ``BEGIN IMMEDIATE``), so two label requests racing update one after the other.
Rows whose shape is not the online version's input (another input kind or class count) are kept
as observations but update nothing.

Each version's report holds the batch's *prequential* scores: NLL and Brier of the forecasts made
before each row's label was used, i.e. what serving that row would have answered.
"""

from __future__ import annotations

import logging

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

import calibration as cal

from . import integrity, store
from .cache import load_calibrator
from .models import CalibratorRow, VersionRow

logger = logging.getLogger("calibration.online")


class OnlineUpdates:
    """Updates the latest version of a name when it is an online calibrator (see the module)."""

    def __init__(self, integrity_key: bytes | None):
        self.integrity_key = integrity_key

    def apply(self, session: Session, calibrator_id: int, name: str, kind: str, values: np.ndarray,
              labels: np.ndarray, source: str) -> int | None:
        """Update ``name``'s latest version on the rows, in order, if it is online; the number of
        the version stored, or ``None`` when nothing was updated."""
        session.execute(select(CalibratorRow.id).where(CalibratorRow.id == calibrator_id)
                        .with_for_update(key_share=True))
        latest = session.execute(
            select(VersionRow.id, VersionRow.method).where(VersionRow.calibrator_id == calibrator_id)
            .order_by(VersionRow.version.desc()).limit(1)).first()
        if latest is None or not getattr(cal.METHODS.get(latest.method), "updates_online", False):
            return None
        parent = session.get(VersionRow, latest.id)
        resolved = store.ResolvedVersion(name, parent.version, parent.checksum, parent.id)
        calibrator = load_calibrator(resolved, parent.params_json, parent.class_names, parent.tensor_names,
                                     self.integrity_key)
        if kind != parent.input_kind:
            logger.info("%s: %s rows do not update version %d (fitted on %s)", name, kind, parent.version,
                        parent.input_kind)
            return None
        try:
            inputs = cal.validate_inputs(values, parent.input_kind)
            if inputs.k != parent.n_classes:
                return None
            probs = calibrator.update_batch(inputs, labels)
        except ValueError as exc:  # rows the fit would refuse (non-finite, too large): stored, not learnt from
            logger.info("%s: rows do not update version %d: %s", name, parent.version, exc)
            return None
        params = calibrator.to_dict()
        params["diagnostics"] = {**params["diagnostics"], "iterations": len(labels),
                                 "message": f"online update of version {parent.version} on {len(labels)} {source} rows"}
        params_json = store.canonical_json(params)
        row = store.create_version(session, name, {
            "method": parent.method, "input_kind": parent.input_kind, "n_classes": parent.n_classes,
            "n_samples": calibrator.n_samples_, "class_names": parent.class_names, "params_json": params_json,
            "checksum": integrity.digest(params_json, parent.class_names, parent.tensor_names, self.integrity_key),
            "summary": cal.json_safe(calibrator.summary()), "diagnostics": params["diagnostics"],
            "report": cal.json_safe({"online_update": {
                "parent_version": parent.version, "rows": len(labels), "source": source,
                "prequential": {"nll": cal.nll(probs, labels), "brier": cal.brier(probs, labels),
                                "accuracy": cal.accuracy(probs, labels)}}}),
            "description": parent.description, "tags": parent.tags, "tensor_names": parent.tensor_names})
        return row.version
