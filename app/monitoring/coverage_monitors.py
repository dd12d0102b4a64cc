"""Coverage alarms and adaptive thresholds, brought up to date by the alarms evaluation (scheduled
``alarms`` jobs and ``POST .../alarms/evaluate``) on the labelled rows each version served.

**Coverage alarm** (signal ``coverage@<level>``, one per version and coverage level of its serving set
predictor): ``calibration.CoverageAlarm``, a test by betting of ``E[e_t | past] <= alpha + tolerance``
on the miscoverage indicators ``e_t = [y_t not in C(x_t)]`` of the split-conformal sets, in the order the
labels came; by Ville's inequality it alarms with probability at most ``delta`` (the evaluation's
``alpha``) over the whole stream while the sets keep their level. It is stored as a drift monitor
(``app.monitoring.rows``), so that it is shown, exported and delivered to the webhook as they are; a
new serving set predictor, or other options, start it again from the first row.

**Adaptive thresholds** (``app.conformal.adaptive``): each state of a serving set predictor fitted with
``adaptive`` is updated on the rows stored since its watermark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

import calibration as cal

from ..conformal import adaptive
from ..conformal.service import alpha_of
from ..observations import reads as observations
from . import coverage

PREFIX = "coverage@"
Batches = Callable[..., Iterator[tuple[np.ndarray, np.ndarray]]]


def signal_of(level: float) -> str:
    return f"{PREFIX}{level:g}"


def is_coverage(signal: str) -> bool:
    return signal.startswith(PREFIX)


def view(row) -> dict:
    """A coverage alarm's level, set predictor and running miscoverage estimate (none for drift monitors)."""
    if not is_coverage(row.signal):
        return {}
    requested = row.state["requested"]
    return {"coverage": requested["coverage"], "set_predictor_id": requested["set_predictor_id"],
            "miscoverage_bound": row.state["alpha"] + row.state["tolerance"],
            "recent_miscoverage": row.state["mean"]}


def _chunks(service, calibrator_id: int, version: int, after: int) -> list:
    with service.db.read() as session:
        return observations.observation_chunks(session, calibrator_id, "feedback", version, after)


def update_adaptive(service, name: str, calibrator_id: int, version: int, serving: dict, batches: Batches) -> int:
    """Apply the rows ``version`` served since each adaptive state's watermark to the states of its
    serving set predictors (``serving``: ``coverage.serving_predictors``); the states stored."""
    wanted = {(pid, level) for level, (pid, _) in serving.items()}
    stored = 0
    for state in adaptive.states(service.db, sorted({pid for pid, _ in wanted})):
        if not any(pid == state["set_predictor_id"] and round(level, 12) == round(state["coverage"], 12)
                   for pid, level in wanted):
            continue
        chunks = _chunks(service, calibrator_id, version, state["last_chunk_id"])
        if not chunks:
            continue
        online = adaptive.loaded(state["state"])
        covered = []
        for probs, labels in batches(service, name, version, chunks):
            covered.append(online.update(probs, labels).covered)
        stored += adaptive.advance(service.db, state, online, np.concatenate(covered) if covered else
                                   np.zeros(0, dtype=bool), chunks[-1].id)
    return stored


def alarm_outcomes(service, name: str, calibrator_id: int, version: int, serving: dict, known: dict,
                   options: dict, batches: Batches) -> Iterator[tuple[str, tuple, bool]]:
    """``(signal, outcome, same)`` per coverage level of ``version``'s serving set predictors: the alarm
    fed the rows since its last evaluation (from the first row when it is new or its options or set
    predictor changed; ``same`` then False), as ``alarms._save`` takes it."""
    for level, (predictor_id, predictor) in serving.items():
        signal = signal_of(level)
        state, after = known.get((version, signal), (None, 0))
        requested = {"alpha": options["alpha"], "tolerance": options["tolerance"],
                     "half_life": options["half_life"], "set_predictor_id": predictor_id, "coverage": level}
        same = state is not None and state.get("requested") == requested
        chunks = _chunks(service, calibrator_id, version, after if same else 0)
        if not same and not chunks:
            continue
        alarm = cal.CoverageAlarm.from_dict(state) if same else cal.CoverageAlarm(
            alpha=alpha_of(level), tolerance=options["tolerance"], delta=options["alpha"],
            half_life=options["half_life"])
        for probs, labels in batches(service, name, version, chunks):
            covered, _ = coverage.set_outcomes(predictor, probs, labels, alpha_of(level))
            alarm.update((~covered).astype(np.float64))
        yield signal, (alarm, chunks[-1].id if chunks else after, None, 0, {"requested": requested}), same
