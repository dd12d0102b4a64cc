"""Anytime-valid drift alarms, on domain values: each version that served labelled
predictions has a drift monitor, the e-process of ``calibration.monitoring.DriftTest`` on the
residuals of those rows (its calibrated probabilities, in the order the labels came); each version
whose predictions were logged has a label-free one, on its logged predictions against a reference
(the labelled observations through it, fixed when the monitor starts). The label-free monitor is
``calibration.label_free``'s: the reference spends half of ``alpha`` on confidence bounds of its
means and the e-process runs at the other half with its tolerances widened by those bounds, so
``alpha`` holds whatever the reference's size.
``evaluate`` feeds it the rows that arrived since its last evaluation and records the alarm when
the e-value first reaches ``1/alpha`` (Ville: under the null the probability that this ever
happens is at most ``alpha``, however often it is evaluated). It is a plain function of the
service, for a request or a scheduled job.

``QualityCollector`` exports the monitors as Prometheus gauges when ``/metrics`` is scraped.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

import calibration as cal

from ..observations import reads as observations
from ..platform.db import Database
from ..platform.errors import InvalidInput, NotFound, refused_as
from ..platform.rows import utcnow
from ..prediction_log import reads as prediction_log
from ..registry import reads as registry
from ..registry.names import Reference, check_name
from ..registry.serving import Serving
from . import coverage_monitors, webhooks
from . import store as alarm_store
from .coverage_monitors import FEED_ENTRIES
from .rows import DriftMonitorRow

ECE_ROWS = 10_000  # the gauge's ECE: of the newest rows a version served
REFERENCE_ROWS = 50_000  # labelled rows the label-free monitor compares the logged predictions with (fewer
# where they are more entries than CALIBRATION_MAX_READ_ENTRIES, as for ECE_ROWS)


def reference_view(row: DriftMonitorRow, drift: float | None) -> dict | None:
    """What a label-free monitor's reference can see: its rows, the false-alarm probability its
    bounds spend, the confidence radius, the smallest drift of the expected confidence (and of a
    class's mean probability) that can alarm, and with ``drift`` the reference rows needed for it."""
    reference = (row.state or {}).get("reference")
    if row.signal != "label_free" or not reference or "confidence_radius" not in reference:
        return None
    view = {key: reference[key] for key in ("rows", "alpha", "confidence", "confidence_radius", "confidence_sd")}
    view["max_class_radius"] = max(reference["class_radius"])
    view["detectable_confidence_drift"] = row.tolerance + reference["confidence_radius"]
    view["detectable_class_drift"] = row.state["requested"]["class_tolerance"] + view["max_class_radius"]
    if drift is not None:
        view["drift"] = drift
        view["rows_needed"] = cal.label_free_rows_needed(drift, row.tolerance, row.alpha,
                                                           sd=min(max(reference["confidence_sd"], 1e-3), 0.5))
    return view


def monitor_view(row: DriftMonitorRow, drift: float | None = None) -> dict:
    state = row.state or {}
    # the e-process's false-alarm probability (label-free: less the reference's; coverage: its delta)
    level = float(state.get("delta", state.get("alpha", row.alpha)))
    return {"version": row.version, "signal": row.signal, "alpha": row.alpha, "tolerance": row.tolerance,
            "n_rows": row.n_rows,
            "e_value": math.exp(min(row.log_e_value, 700.0)), "log_e_value": row.log_e_value,
            "max_log_e_value": row.max_log_e_value, "threshold_log_e_value": math.log(1 / level),
            "alarm": row.alarm_rows is not None, "alarm_rows": row.alarm_rows, "alarmed_at": row.alarmed_at,
            "ece": row.ece, "ece_rows": row.ece_rows, "evaluated_at": row.evaluated_at,
            "reference": reference_view(row, drift), **coverage_monitors.view(row)}


def alarms(db: Database, name: str, drift: float | None = None) -> dict:
    """The alarms raised for ``name`` and the state of every version's monitor (with ``drift``, each
    label-free monitor says how many reference rows a drift of the expected confidence that large needs)."""
    check_name(name)
    if drift is not None and not 0 < drift < 1:
        raise InvalidInput(f"drift must lie in (0, 1), got {drift!r}")
    with db.read() as session:
        calibrator = registry.calibrator(session, name)
        views = [monitor_view(row, drift) for row in alarm_store.monitors(session, calibrator.id)]
    return {"name": name, "alarms": [v for v in views if v["alarm"]], "monitors": views}


def _recent_ece(service: Serving, name: str, calibrator_id: int, version: int,
                stored: tuple[float | None, int, str | None]) -> tuple[float | None, int, str]:
    """``(ECE, rows, window)`` of the newest ``ECE_ROWS`` labelled rows ``version`` served (``window``:
    a digest of their index); the ``stored`` ECE and rows stand, unread, when its window is the same
    and the version still serves; else only the rows the window this process kept lacks are read
    (``coverage_monitors.recent_ece``)."""
    with service.db.read() as session:
        index = observations.newest_within(session, calibrator_id, ECE_ROWS, service.max_read_entries,
                                           source="feedback", version=version)
        window = hashlib.sha256(json.dumps([ref.as_json() for ref in index]).encode()).hexdigest()
        if not index:
            return None, 0, window
        kept = stored[2]
        if kept == window:
            if _serves(service, name, version):
                return stored[0], stored[1], window
            kept = None  # read again in full (its rows left out now)
        value, rows = coverage_monitors.recent_ece(service, name, calibrator_id, version, session, index, kept, window)
    return value, rows, window


def _serves(service: Serving, name: str, version: int) -> bool:
    try:
        service.serving(Reference.pinned(name, version))
    except NotFound:
        return False
    return True


def evaluate(service: Serving, name: str, alpha: float = 0.01, tolerance: float = 0.02, half_life: float = 1000.0,
             class_tolerance: float = 0.02, webhook_url: str | None = None) -> dict:
    """Bring every version's monitors up to date: on the labelled rows it served and, without
    labels, on its logged predictions against the labelled observations (uploads if any) as the
    reference, fixed when the monitor starts. A monitor whose options differ from these starts
    again from the first row. Each new alarm is queued for ``webhook_url`` (``app.monitoring.webhooks``) in
    the transaction that records it. Returns what ``alarms`` returns, with ``new_alarms``."""
    check_name(name)
    options: dict[str, Any] = {"alpha": alpha, "tolerance": tolerance, "half_life": half_life, "max_bet": 0.5,
                               "class_tolerance": class_tolerance}
    with refused_as():
        cal.DriftTest(**options)
    if service.prediction_log is not None:  # what was served until now, not only what was flushed
        service.prediction_log.flush()
    with service.db.read() as session:
        calibrator = registry.calibrator(session, name)
        labelled = observations.served_versions(session, calibrator.id)
        logged = prediction_log.logged_versions(session, calibrator.id)
        rows = alarm_store.monitors(session, calibrator.id)
        known = {(row.version, row.signal): (row.state, row.last_chunk_id) for row in rows}
        eces = {row.version: (row.ece, row.ece_rows, (row.state or {}).get("ece_window"))
                for row in rows if row.signal == "labelled"}
    new_alarms, sets = [], []
    for version in labelled:  # drift monitor, adaptive thresholds and coverage alarms: one pass over the new rows
        try:
            outcome, same, version_sets = _labelled(service, name, calibrator.id, version, options, known,
                                                    eces.get(version, (None, 0, None)))
        except NotFound:  # the version was deleted: its monitors stay as they were
            continue
        sets += [(version, *item) for item in version_sets]
        if outcome is not None and _record(service, (name, calibrator.id), version, "labelled", outcome, known, same,
                                           webhook_url):
            new_alarms.append({"version": version, "signal": "labelled"})
    for version in logged:
        state, after = known.get((version, "label_free"), (None, 0))
        same = state is not None and all((state.get("requested") or {}).get(k) == v for k, v in options.items())
        try:
            outcome = _label_free(service, name, calibrator.id, version, options, state if same else None,
                                  after if same else 0)
        except NotFound:  # the version was deleted: its monitor stays as it was
            continue
        if outcome is not None and _record(service, (name, calibrator.id), version, "label_free", outcome, known,
                                           same, webhook_url):
            new_alarms.append({"version": version, "signal": "label_free"})
    for version, signal, outcome, same in sets:  # the coverage alarms, fed in the first pass
        if _record(service, (name, calibrator.id), version, signal, outcome, known, same, webhook_url):
            new_alarms.append({"version": version, "signal": signal})
    return {**alarms(service.db, name), "new_alarms": new_alarms}


def _record(service: Serving, calibrator: tuple[str, int], version: int, signal: str, outcome: tuple, known: dict,
            same: bool, webhook_url: str | None) -> bool:
    """Save one monitor's outcome (``_save``); whether it raised a new alarm."""
    test, last, ece, ece_rows, extra = outcome
    state = known.get((version, signal), (None, 0))[0]
    before = int(state["alarm_at"]) if same else -1
    seen = known[(version, signal)][1] if (version, signal) in known else None  # the row as read
    return _save(service.db, calibrator, version, signal, test, last, seen, ece, ece_rows, extra,
                 [webhook_url] if webhook_url else []) and before < 0 <= int(test.alarm_at)


def _labelled(service: Serving, name: str, calibrator_id: int, version: int, options: dict, known: dict,
              ece: tuple) -> tuple[tuple | None, bool, list]:
    """``(drift monitor outcome, same, coverage alarm outcomes)`` of ``version``: its drift monitor (none
    when it has no rows), its adaptive set thresholds (stored here) and its coverage alarms
    (``coverage_monitors``), fed the new labelled rows in one pass (``coverage_monitors.Feed``); ``same``: the drift
    monitor continued its stored state (its options are these). ``ece``: the stored ECE, its rows and
    window (``_recent_ece``)."""
    state, after = known.get((version, "labelled"), (None, 0))
    same = state is not None and all(state.get(k) == v for k, v in options.items())
    if not same:
        state, after = None, 0
    rows = coverage_monitors.Feed(service, name, calibrator_id, version)
    chunks = rows.chunks(after)
    test = None
    if state is not None or chunks:  # else its rows were deleted meanwhile
        test = cal.DriftTest.from_dict(state) if state is not None else cal.DriftTest(
            **options, n_classes=2 if chunks[0].kind == "scores" else chunks[0].n_classes)
        rows.add(after, _drift_consumer(test))
    serving = coverage_monitors.coverage.serving_predictors(service, name, version)
    pending = coverage_monitors.adaptive_updates(service, version, serving, rows) if serving else []
    sets = coverage_monitors.alarm_outcomes(version, serving, known, options, rows) if serving else []
    rows.run()
    coverage_monitors.store_adaptive(service, pending)
    if test is None:
        return None, same, sets
    value, ece_rows, window = _recent_ece(service, name, calibrator_id, version, ece)
    return (test, chunks[-1].id if chunks else after, value, ece_rows, {"ece_window": window}), same, sets


def _drift_consumer(test: cal.DriftTest) -> coverage_monitors.Consumer:
    """The consumer that feeds ``test`` the residuals of a batch."""
    def consume(probs: np.ndarray, labels: np.ndarray) -> None:
        test.update(cal.top_label_residuals(probs, labels), cal.class_residuals(probs, labels))
    return consume


def _reference(service: Serving, name: str, calibrator_id: int, version: int) -> np.ndarray | None:
    """The label-free monitor's reference: the calibrated probabilities of the newest labelled
    observations (uploads if there are any) through ``version``."""
    with service.db.read() as session:
        budget = service.max_read_entries
        index = observations.newest_within(session, calibrator_id, REFERENCE_ROWS, budget, source="upload") or \
            observations.newest_within(session, calibrator_id, REFERENCE_ROWS, budget)
        if not index:
            return None
        probs, _ = coverage_monitors.residuals(service, name, version, session, index)
    return probs if len(probs) else None


def _label_free(service: Serving, name: str, calibrator_id: int, version: int, options: dict, state, after: int):
    if state is None:
        probs = _reference(service, name, calibrator_id, version)
        if probs is None:  # nothing labelled to compare with
            return None
    with service.db.read() as session:
        facts = prediction_log.logged_chunk_facts(session, calibrator_id, version, after)
    if state is None and not facts:
        return None
    loaded = service.serving(Reference.pinned(name, version))
    if state is not None:
        test = cal.DriftTest.from_dict(state)
        reference = cal.LabelFreeReference.from_dict(state["reference"])
    else:
        test, reference = cal.label_free_test(probs, **options)
    batch, entries = [], 0
    limit = min(FEED_ENTRIES, service.max_read_entries)
    step = [max(limit // width, 1) for _, _, width in facts]
    parts = [(chunk_id, start, min(start + rows_at_once, n_rows), width)
             for (chunk_id, n_rows, width), rows_at_once in zip(facts, step, strict=True)
             for start in range(0, n_rows, rows_at_once)]
    for position, (chunk_id, start, stop, width) in enumerate(parts):
        batch.append((chunk_id, start, stop))
        entries += (stop - start) * width
        if entries >= limit or position == len(parts) - 1:
            with service.db.read() as session:
                kind, inputs = prediction_log.logged_arrays(session, batch)
            if len(inputs):
                probs = cal.to_host(service.predict(loaded, cal.validate_inputs(inputs, kind)))
                test.update(*cal.label_free_residuals(probs, reference))
            batch, entries = [], 0
    return test, facts[-1][0] if facts else after, None, 0, {"reference": reference.to_dict(), "requested": options}


def _save(db: Database, calibrator: tuple[str, int], version: int, signal: str, test, last: int,
          expected_last: int | None, ece: float | None, ece_rows: int, extra: dict, webhook_urls: list[str]) -> bool:
    """Store the monitor unless another evaluation moved it since it was read (``expected_last``, its
    last chunk then, or ``None`` for a monitor that had no row): then theirs stands, and a new alarm
    is raised (and queued for ``webhook_urls``) once, not once per concurrent evaluation."""
    name, calibrator_id = calibrator
    state = {**test.to_dict(), **extra}
    asked = extra.get("requested", state)  # the label-free e-process runs at a split alpha, widened tolerances
    values = {"alpha": asked["alpha"], "tolerance": asked["tolerance"], "n_rows": state["n"], "last_chunk_id": last,
              "log_e_value": state["log_wealth"], "max_log_e_value": state["max_log_wealth"], "state": state,
              "ece": ece, "ece_rows": ece_rows, "evaluated_at": utcnow()}
    try:
        with db.write() as session:
            row = alarm_store.monitor(session, calibrator_id, version, signal)
            if row is not None and row.last_chunk_id != expected_last:  # None: it had no row, now it has one
                return False
            if row is None:
                row = DriftMonitorRow(calibrator_id=calibrator_id, version=version, signal=signal, **values)
                session.add(row)
            else:
                for key, value in values.items():
                    setattr(row, key, value)
            if state["alarm_at"] >= 0 and row.alarm_rows is None:
                row.alarm_rows, row.alarmed_at = state["alarm_at"], utcnow()
                webhooks.queue_alarm(session, name, row, webhook_urls)
            elif state["alarm_at"] < 0:
                row.alarm_rows, row.alarmed_at = None, None
    except IntegrityError:  # a concurrent first evaluation created it
        return False
    return True


def alarmed_versions(session, calibrator_id: int, since) -> list[int]:
    """The versions of a calibrator whose drift monitor raised its alarm after ``since``."""
    return list(session.scalars(select(DriftMonitorRow.version).where(
        DriftMonitorRow.calibrator_id == calibrator_id, DriftMonitorRow.alarmed_at > since)).all())
