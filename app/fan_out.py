"""A comparison job fanned out: one part job per fold (every candidate fitted on the other folds and
scored on it), taken by any worker, merged by the parent (``run_compare_in_parts``).

Why folds: the parts are then of equal size (every fold holds the same rows of each class), and
only the reading of the arrays is repeated per part; the fold's reference temperature scaling
and the uncalibrated metrics are computed once, as in one job. Parts of one candidate on one fold
were measured slower than the single job on 2 cores (``benchmarks/fan_out.py``: 35 parts each
reading and validating 50000 x 100 floats, refitting the fold's reference, for one fit each).

The parent records a queued ``compare-part`` job per fold and offers them to the engine
(Procrastinate: any worker takes them). Then it works too: it claims its own parts that are still
queued and runs them, so it never waits on work nobody has started (no deadlock with one
worker); then it waits for the parts other workers are running, beating its heartbeat, and merges
their results into the comparison a single job would have computed (the same per-fold values:
every part runs the same stratified folds with the same seed; only the fit times differ).

A part runs ``calibration.compare`` on every candidate and one held-out fold (``only_folds``) and
stores the results with that fold's values of the uncalibrated model and of the reference; the
merge concatenates each candidate's folds in order; a cancelled parent cancels its
parts, and a part whose parent is no longer running is cancelled when it starts.
"""

from __future__ import annotations

import math
import time
import uuid

import calibration as cal

from . import job_store
from .db import Database
from .errors import ServiceError
from .jobs import JobCancelled, JobProgress

PART = "compare-part"
POLL_SECONDS = 0.5


def _finite(values: list[float]) -> list[float | None]:
    return [None if not math.isfinite(v) else v for v in values]


def _floats(values: list) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _result_json(result: cal.MethodResult) -> dict:
    return {"candidate": result.candidate.to_dict(), "accuracy_preserving": result.accuracy_preserving,
            "per_fold": {m: _finite(v) for m, v in result.per_fold.items()}, "converged": result.converged,
            "error": result.error, "tail_risk": _finite(result.tail_risk)}


def part_result(comparison: cal.Comparison) -> dict:
    """What a part stores: every candidate's result on its fold and the fold's shared values, as JSON."""
    return {"results": [_result_json(result) for result in comparison.results],
            "uncalibrated": {m: _finite(v) for m, v in comparison.uncalibrated.items()},
            "reference_nll": _finite(comparison.reference_nll),
            "shape": [comparison.n_samples, comparison.n_classes, comparison.folds, comparison.seed]}


def merged(parts: list[dict]) -> cal.Comparison:
    """The comparison of all folds, from the parts' results in fold order: each candidate's per-fold
    values concatenated; its error and accuracy flag as one job sets them (the last failing fold's
    error, the last fitted fold's flag)."""
    results = []
    for c, first in enumerate(parts[0]["results"]):
        own = [part["results"][c] for part in parts]
        errors = [p["error"] for p in own if p["error"]]
        fitted = [p for p in own if not p["error"]]
        per_fold = {m: [v for p in own for v in _floats(p["per_fold"][m])] for m in first["per_fold"]}
        results.append(cal.MethodResult(cal.candidate(first["candidate"]), (fitted or own)[-1]["accuracy_preserving"],
                                        per_fold, all(p["converged"] for p in own), errors[-1] if errors else None,
                                        [v for p in own for v in _floats(p["tail_risk"])]))
    n, k, folds, seed = parts[0]["shape"]
    uncalibrated = {m: [v for p in parts for v in _floats(p["uncalibrated"][m])] for m in parts[0]["uncalibrated"]}
    return cal.Comparison(n, k, folds, seed, uncalibrated, results,
                          [v for p in parts for v in _floats(p["reference_nll"])])


def create_parts(db: Database, parent_id: str, calibrator: str | None, folds: int) -> list[str]:
    ids = [uuid.uuid4().hex for _ in range(folds)]
    with db.write() as session:
        for fold, part_id in enumerate(ids):
            job_store.create_job(session, part_id, PART, calibrator, {"parent": parent_id, "fold": fold}, None)
    return ids


def run_compare_in_parts(db: Database, job_id: str, folds: int, calibrator: str | None, offer, run_part,
                         progress: JobProgress) -> cal.Comparison:
    """Fan the comparison job ``job_id`` out over its ``folds`` (``offer(part_id)`` gives a part to
    the engine; ``run_part(part_id)`` runs one here if it is still queued), wait for them, and
    return the merged comparison (``JobCancelled`` when the parent is cancelled)."""
    part_ids = create_parts(db, job_id, calibrator, folds)
    for part_id in part_ids:
        offer(part_id)
    try:
        for part_id in part_ids:
            progress.step(f"comparison in {len(part_ids)} parts: running part {part_ids.index(part_id) + 1} here", 0.0)
            run_part(part_id)
        while True:
            with db.read() as session:
                rows = [job_store.get_job(session, part_id) for part_id in part_ids]
            done = [row for row in rows if row.status in job_store.FINISHED]
            failed = next((row for row in done if row.status != "succeeded"), None)
            if failed is not None:
                error = failed.error or {"status": 500, "title": "Part cancelled", "detail": "a part was cancelled"}
                raise PartFailed(error)
            if len(done) == len(rows):
                return merged([row.result for row in rows])
            progress.step(f"comparison in {len(rows)} parts: {len(done)} done", 100.0 * len(done) / len(rows))
            time.sleep(POLL_SECONDS)
    except (JobCancelled, PartFailed):
        with db.write() as session:
            for part_id in part_ids:
                job_store.request_cancel(session, part_id)
        raise


class PartFailed(ServiceError):
    """A part of a fanned-out comparison failed: the comparison fails with its problem."""

    def __init__(self, problem: dict):
        super().__init__(problem.get("detail", "a part of the comparison failed"))
        self.problem = problem

    def as_problem(self) -> dict:
        return self.problem
