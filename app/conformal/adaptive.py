"""Adaptive set thresholds: a set predictor fitted with ``adaptive`` (``aci`` or ``dtaci``) keeps, per
coverage level, an online conformal predictor over the same calibration scores, whose level moves with
the labels of the rows its version served, so that the served sets keep their long-run coverage under
distribution shift.

**ACI** (Gibbs & Candes 2021, NeurIPS, eq. 2): ``alpha_{t+1} = alpha_t + gamma (alpha - err_t)`` with
``err_t = [y_t not in C_t]``; then ``|(1/T) sum_t err_t - alpha| <= (max(alpha, 1 - alpha) + gamma) / (gamma T)``
for any sequence. **DtACI** (Gibbs & Candes 2024, JMLR 25(162), Algorithm 1): ACI experts of several
steps under exponential weights, no step to choose. The set served at level ``a`` is
``{y : s(x, y) <= Q(a)}``, ``Q(a)`` the ``ceil((n + 1)(1 - a))``-th smallest calibration score
(``calibration.conformal.adaptive``).

Labels reach the state **off the request path**: the ``alarms`` evaluation (scheduled, or ``POST
.../alarms/evaluate``) applies the feedback rows stored since the state's watermark (the newest
observation chunk applied), in the order they were stored; an update stores only if the watermark did
not move meanwhile, so no label counts twice. Serving reads the state's current level; the
calibration scores (fixed) are cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

import calibration as cal

from ..platform.db import Database
from . import adaptive_store

METHODS = ("aci", "dtaci")
OnlinePredictor = cal.AdaptiveConformal | cal.DtACI


def online_predictor(method: str, alpha: float, gamma: float, predictor: cal.SetPredictor) -> OnlinePredictor:
    """An unfitted online predictor of ``method`` at ``alpha`` with the score of ``predictor`` (ACI: step
    ``gamma``)."""
    if method == "aci":
        return cal.AdaptiveConformal(alpha, gamma, score=predictor.score, k_reg=predictor.k_reg, lam=predictor.lam)
    if method == "dtaci":
        return cal.DtACI(alpha, score=predictor.score, k_reg=predictor.k_reg, lam=predictor.lam)
    raise ValueError(f"adaptive must be one of {', '.join(METHODS)}, got {method!r}")


def loaded(state: dict) -> OnlinePredictor:
    """The online predictor stored as ``state``."""
    return (cal.AdaptiveConformal if state["method"] == "aci" else cal.DtACI).from_dict(state)


def start(session, set_predictor_id: int, method: str, gamma: float, levels: dict[float, float],
          predictor: cal.SetPredictor, probabilities: np.ndarray, labels: np.ndarray, watermark: int) -> None:
    """Add the states of a new set predictor: one per ``levels`` item (coverage: alpha), fitted on its
    held-out calibrated ``probabilities`` and ``labels``; rows stored up to chunk ``watermark`` are
    not applied (they were served before it existed)."""
    for coverage, alpha in levels.items():
        online = online_predictor(method, alpha, gamma, predictor).fit(probabilities, labels)
        adaptive_store.add(session, set_predictor_id, coverage, method, online.level, online.to_dict(), watermark)


def states(db: Database, set_predictor_ids: list[int]) -> list[dict]:
    """Every state of these set predictors as plain values (for an update and for the API)."""
    with db.read() as session:
        return [{"id": row.id, "set_predictor_id": row.set_predictor_id, "coverage": row.coverage,
                 "method": row.method, "level": row.level, "state": row.state, "n_rows": row.n_rows,
                 "covered_rows": row.covered_rows, "last_chunk_id": row.last_chunk_id, "updated_at": row.updated_at}
                for row in adaptive_store.of_predictors(session, set_predictor_ids)]


def view(state: dict) -> dict:
    """A state as the API shows it: the level served now and the coverage of its served sets so far."""
    n = state["n_rows"]
    return {"set_predictor_id": state["set_predictor_id"], "coverage": state["coverage"], "method": state["method"],
            "alpha": 1.0 - state["coverage"], "level": state["level"], "n_rows": n,
            "observed_coverage": state["covered_rows"] / n if n else None, "updated_at": state["updated_at"]}


def advance(db: Database, state: dict, online, covered: np.ndarray, last_chunk_id: int) -> bool:
    """Store ``online`` after the rows whose sets held their labels where ``covered``, through chunk
    ``last_chunk_id``, unless another update moved ``state`` first."""
    values = {"state": online.to_dict(), "level": float(online.level), "last_chunk_id": last_chunk_id,
              "n_rows": state["n_rows"] + len(covered),
              "covered_rows": state["covered_rows"] + int(np.count_nonzero(covered))}
    with db.write() as session:
        return adaptive_store.advance(session, state["id"], state["last_chunk_id"], values)


class AdaptiveSets:
    """The sets an adaptive set predictor serves now: the current level read per call, the online
    predictor (its calibration scores) cached by state id, at most ``size``."""

    def __init__(self, db: Database, size: int = 256):
        self.db = db
        self.size = max(size, 1)
        self._items: OrderedDict[int, OnlinePredictor] = OrderedDict()
        self._lock = threading.Lock()

    def sets(self, set_predictor_id: int, coverage: float, digits: int, predictor: cal.SetPredictor,
             probabilities: np.ndarray) -> np.ndarray | None:
        """Boolean mask ``(n, k)`` at the state's current level, or ``None`` when the set predictor has
        no adaptive state at ``coverage``."""
        with self.db.read() as session:
            found = adaptive_store.serving_level(session, set_predictor_id, coverage, digits)
            if found is None:
                return None
            state_id, level = found
            with self._lock:
                online = self._items.get(state_id)
                if online is not None:
                    self._items.move_to_end(state_id)
            if online is None:
                online = loaded(adaptive_store.state(session, state_id))
        with self._lock:
            self._items[state_id] = online
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return predictor.scores(probabilities) <= online.threshold_at(level)
