"""Cross-validation fanned out: a comparison job's, or an ``auto`` fit job's, candidate x fold
fits run as part jobs that any worker takes, merged by the parent into the comparison a single job
computes (``compare_in_parts``).

Parts: the candidate x fold units are packed by longest processing time first into parts of near
equal estimated cost (``app.wire.costs.pack_units``), one per live worker (one when the parent's process
is the only one to run them: one worker, the embedded pool). A fold's own work (its reference
temperature scaling and the uncalibrated metrics) is repeated in each part that holds some of its
candidates, so the packing splits a fold only where the balance needs it; one part per worker, not
more for slack, and not one per fold or per candidate (``benchmarks/fan_out.py`` measures each
layout: docs/benchmarks.md).

The parent records the parts as queued jobs and offers them to the engine (Procrastinate: any
worker takes them). Then it works too: it claims its parts that are still queued, last first
(workers take the first first), and runs them in its own process on the arrays it already holds;
a worker reads the parent's arrays once per process (``app.jobs.tasks``). It then waits for the parts
other workers run (polling every ``POLL_SECONDS``; a part whose worker went silent is marked lost
and run by the parent itself) and merges them. Every part runs the same stratified folds with the
same seed, so the merged per-fold values equal the single job's (fit times aside). A cancelled
parent cancels its parts; a part whose parent is no longer running is cancelled when it starts.
"""

from __future__ import annotations

import math
import time
import uuid
from datetime import timedelta

from sqlalchemy.orm import Session

import calibration as cal

from ..platform.db import Database
from ..platform.errors import ServiceError, refused_as
from ..platform.rows import utcnow
from ..wire.costs import FOLD_SETUP_FITS, estimated_fit_seconds, pack_units
from . import store as job_store
from .rows import JobRow
from .runner import JobCancelled, JobProgress
from .status import JobStatus

PART = "compare-part"
POLL_SECONDS = 0.1
STEP_SECONDS = 1.0  # the parent's progress write (and cancel check) while it waits


def _finite(values: list[float]) -> list[float | None]:
    return [None if not math.isfinite(v) else v for v in values]


def _floats(values: list) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _result_json(result: cal.MethodResult) -> dict:
    return {"accuracy_preserving": result.accuracy_preserving, "converged": result.converged,
            "per_fold": {m: _finite(v) for m, v in result.per_fold.items()}, "error": result.error,
            "tail_risk": _finite(result.tail_risk), "floored_labels": result.floored_labels}


def run_units(x, labels, request: dict, progress=None) -> dict:
    """Run a part's units (``request["units"]``: ``[[fold, [candidate, ...]], ...]``) and return, per
    fold, its candidates' results and the fold's shared values, as JSON; ``progress(done, total)``
    after each fit."""
    total, done, folds = sum(len(indices) for _, indices in request["units"]), 0, []
    for fold, indices in request["units"]:
        def step(count: int, _total: int, before: int = done) -> None:
            if progress is not None:
                progress(before + count, total)
        with refused_as():
            comparison = cal.compare(x, labels, [request["candidates"][i] for i in indices], request["folds"],
                                     request["seed"], request["input"], step, only_folds=[fold])
        done += len(indices)
        folds.append({"fold": fold, "candidates": indices, "results": [_result_json(r) for r in comparison.results],
                      "uncalibrated": {m: _finite(v) for m, v in comparison.uncalibrated.items()},
                      "reference_nll": _finite(comparison.reference_nll),
                      "shape": [comparison.n_samples, comparison.n_classes]})
    return {"folds": folds}


def merged(request: dict, parts: list[dict]) -> cal.Comparison:
    """The comparison of all folds from the parts' results: each candidate's per-fold values in fold
    order; its error and accuracy flag as one job sets them (the last failing fold's error, the last
    fitted fold's flag)."""
    cells: dict[tuple[int, int], dict] = {}  # (fold, candidate) -> its result
    shared: dict[int, dict] = {}  # fold -> its first entry
    for part in parts:
        for entry in part["folds"]:
            shared.setdefault(entry["fold"], entry)
            for index, result in zip(entry["candidates"], entry["results"], strict=True):
                cells[entry["fold"], index] = result
    folds = range(request["folds"])
    results = []
    for c, spec in enumerate(request["candidates"]):
        own = [cells[fold, c] for fold in folds]
        errors = [p["error"] for p in own if p["error"]]
        fitted = [p for p in own if not p["error"]]
        per_fold = {m: [v for p in own for v in _floats(p["per_fold"][m])] for m in own[0]["per_fold"]}
        results.append(cal.MethodResult(cal.candidate(spec), (fitted or own)[-1]["accuracy_preserving"], per_fold,
                                        all(p["converged"] for p in own), errors[-1] if errors else None,
                                        [v for p in own for v in _floats(p["tail_risk"])],
                                        sum(p.get("floored_labels", 0) for p in own)))
    uncalibrated = {m: [v for fold in folds for v in _floats(shared[fold]["uncalibrated"][m])]
                    for m in shared[0]["uncalibrated"]}
    n, k = shared[0]["shape"]
    return cal.Comparison(n, k, request["folds"], request["seed"], uncalibrated, results,
                          [v for fold in folds for v in _floats(shared[fold]["reference_nll"])])


def plan(x, methods, folds: int, seed: int, kind: str, workers: int) -> tuple[dict, list[list]]:
    """The parts' shared request (candidates resolved, as in ``calibration.compare``) and their units:
    one part per worker, balanced by ``app.wire.costs``' estimates."""
    scores = cal.validate_inputs(x, kind)
    with refused_as():
        candidates = cal.prepare_comparison(scores.n, scores.k, methods, folds, kind)
    rows = scores.n - scores.n // folds  # the training rows of a fold
    seconds = [estimated_fit_seconds(c.method, c.options, rows, scores.k) for c in candidates]
    setup = FOLD_SETUP_FITS * estimated_fit_seconds("temperature", {}, rows, scores.k)
    units = pack_units(seconds, folds, setup, max(1, workers))
    return {"candidates": [c.to_dict() for c in candidates], "folds": folds, "seed": seed, "input": kind}, units


class Parent:
    """The parent job's side of a fan-out: ``db``, its id and calibrator, its ``progress``, the
    ``worker`` name its process claims parts as, and the heartbeat silence after which a part's
    worker counts as lost."""

    def __init__(self, db: Database, job_id: str, calibrator: str | None, progress: JobProgress, worker: str,
                 stale_seconds: float):
        self.db, self.job_id, self.calibrator, self.progress = db, job_id, calibrator, progress
        self.worker, self.stale = worker, timedelta(seconds=stale_seconds)
        self.done = 0  # units of the parts finished so far, as last seen

    def report(self, done: int, total: int, parts: int) -> None:
        progress = self.progress
        progress.step(f"cross-validation in {parts} parts: {done} of {total} fits",
                      progress.start + (progress.end - progress.start) * done / total)

    def take_over(self, request: dict, x, labels, total: int) -> dict:
        """Run a part whose worker went silent (already marked failed, "Worker lost") in this
        process and return its result: the parent holds the arrays, and every part's units are
        deterministic, so the merge is what the lost worker would have given."""
        result = run_units(x, labels, request, lambda done, _units: self.progress.folds(self.done + done, total))
        self.done += sum(len(indices) for _, indices in request["units"])
        return result

    def run_here(self, part_id: str, request: dict, x, labels, total: int) -> None:
        """Run a part in this process if it is still queued (its progress also the parent's)."""
        with self.db.write() as session:
            if not job_store.claim(session, part_id, self.worker):
                return
        own = JobProgress(self.db, part_id)

        def step(done: int, units: int) -> None:
            own.folds(done, units)
            self.progress.folds(self.done + done, total)
        try:
            result = run_units(x, labels, request, step)
        except JobCancelled:
            _finish(self.db, part_id, JobStatus.CANCELLED)
            raise
        except ServiceError as error:
            _finish(self.db, part_id, JobStatus.FAILED, error=error.as_problem())
            raise PartFailed(error.as_problem()) from error
        _finish(self.db, part_id, JobStatus.SUCCEEDED, result=result)
        self.done += sum(len(indices) for _, indices in request["units"])


def _finish(db: Database, job_id: str, status: JobStatus, **values) -> None:
    with db.write() as session:
        job_store.finish(session, job_id, status, **values)


def compare_in_parts(parent: Parent, shared: dict, units: list[list], x, labels, offer) -> cal.Comparison:
    """Fan the cross-validation of ``shared`` (``plan``) out as one part job per entry of ``units``
    (``offer(part_id)`` gives one to the engine), run the queued ones here, wait for the others, and
    return the merged comparison (``JobCancelled`` when the parent is cancelled, ``PartFailed``)."""
    requests = [{"parent": parent.job_id, **shared, "units": part} for part in units]
    ids = [uuid.uuid4().hex for _ in requests]
    with parent.db.write() as session:
        for part_id, request in zip(ids, requests, strict=True):
            job_store.create_job(session, part_id, PART, parent.calibrator, request, None)
    for part_id in ids:
        offer(part_id)
    sizes = {part_id: sum(len(i) for _, i in r["units"]) for part_id, r in zip(ids, requests, strict=True)}
    by_id = dict(zip(ids, requests, strict=True))
    total = sum(sizes.values())
    taken: dict[str, dict] = {}  # the results of parts whose worker was lost, run here instead
    try:
        for part_id, request in reversed(list(zip(ids, requests, strict=True))):
            parent.run_here(part_id, request, x, labels, total)
        reported = 0.0
        while True:
            with parent.db.read() as session:
                rows = [_part(session, part_id) for part_id in ids if part_id not in taken]
            for part_id in _lost(parent, rows):
                taken[part_id] = parent.take_over(by_id[part_id], x, labels, total)
            done = [row for row in rows if row.status == JobStatus.SUCCEEDED]
            if len(done) + len(taken) == len(ids):
                results = {row.id: row.result for row in done if row.result is not None} | taken
                return merged(shared, [results[part_id] for part_id in ids])
            if time.monotonic() - reported >= STEP_SECONDS:
                parent.report(sum(sizes[row.id] for row in done) + sum(sizes[i] for i in taken), total, len(ids))
                reported = time.monotonic()
            time.sleep(POLL_SECONDS)
    except (JobCancelled, PartFailed):
        with parent.db.write() as session:
            for part_id in ids:
                job_store.request_cancel(session, part_id)
        raise


def _part(session: Session, part_id: str) -> JobRow:
    row = job_store.get_job(session, part_id)
    if row is None:  # purged: finished longer than the jobs' retention ago
        raise PartFailed({"status": 500, "title": "Part lost", "detail": f"part {part_id} of the comparison is gone"})
    return row


def _lost(parent: Parent, rows: list[JobRow]) -> list[str]:
    """The parts whose worker went silent, marked failed ("Worker lost") by this call so that the
    parent runs them itself; ``PartFailed`` for a part that failed or was cancelled otherwise."""
    lost = []
    for row in rows:
        if row.status == JobStatus.RUNNING and row.updated_at < utcnow() - parent.stale:
            problem = {"status": 503, "title": "Worker lost",
                       "detail": f"the worker running part {row.id} stopped; the parent job ran the part itself"}
            with parent.db.write() as session:
                if job_store.fail_if_silent(session, row.id, utcnow() - parent.stale, problem):
                    lost.append(row.id)
        elif row.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            raise PartFailed(row.error or {"status": 500, "title": "Part cancelled", "detail": "a part was cancelled"})
    return lost


def fit_auto_in_parts(calibrator, comparison_of) -> None:
    """Make this ``auto`` calibrator take its comparison from ``comparison_of(x, labels, candidates,
    folds, seed, kind)`` (the parts) instead of computing it itself; selection and the refit on all
    the data stay auto's own, so the stored version is the one a single job stores (tested byte for
    byte)."""
    calibrator.comparison_source = comparison_of


class PartFailed(ServiceError):
    """A part of a fanned-out comparison failed: the comparison fails with its problem."""

    def __init__(self, problem: dict):
        super().__init__(problem.get("detail", "a part of the comparison failed"))
        self.problem = problem

    def as_problem(self) -> dict:
        return self.problem
