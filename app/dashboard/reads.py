"""What the dashboard reads beyond the API's own answers, through the services and the domains' read APIs:

- ``health``: one calibrator's row on the home page (serving aliases, alarm state, the recent
  calibrated ECE per window of rows, label freshness, logging);
- ``trajectories``: each labelled drift monitor's log e-value after every row, by replaying
  ``calibration.monitoring.DriftTest`` with the monitor's own options on the rows it was fed (its
  version's labelled predictions in arrival order, up to its last chunk): the e-process is a
  function of those rows only, so the replay ends at the stored e-value;
- ``alarm_windows``: the quality window in which each alarm fired;
- ``evaluations``: the stored evaluations with their confidence sequences and intervals.
"""

from __future__ import annotations

import math

import numpy as np

import calibration as cal

from ..monitoring import alarms as drift_alarms
from ..monitoring import quality
from ..monitoring import reads as monitor_reads
from ..observations import reads as observations
from ..observations.chunks import pieces
from ..platform.errors import ServiceError
from ..promotion import evaluations as promotion_evaluations
from ..registry.serving import Serving

SPARK_WINDOWS = 12  # windows of rows in the home page's sparkline
NICE_SIZES = (50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10_000, 20_000, 25_000, 50_000, 100_000)
TRAJECTORY_POINTS = 400  # points drawn per trajectory


def row_window(total_rows: int, windows: int = SPARK_WINDOWS) -> str:
    """The smallest round number of rows per window that shows ``total_rows`` in at most
    ``windows`` windows (at least 50 rows, so that a window's ECE means something)."""
    wanted = max(math.ceil(total_rows / windows), 1)
    return str(next((size for size in NICE_SIZES if size >= wanted), NICE_SIZES[-1]))


def state_of(summary: dict, alarms: dict) -> tuple[str, str]:
    """``(state, what fired or why)``: ``alarmed`` when a monitor alarmed, ``no labels`` without a
    labelled row, ``unchecked`` when labels exist but no monitor has been evaluated, else ``ok``."""
    if alarms["alarms"]:
        fired = ", ".join(f"{a['signal'].replace('_', '-')} v{a['version']}" for a in alarms["alarms"])
        return "alarmed", fired
    if not summary["total_rows"]:
        return "no labels", "no labelled rows yet"
    if not alarms["monitors"]:
        return "unchecked", "no drift monitor evaluated yet"
    return "ok", f"{len(alarms['monitors'])} monitor(s) below 1/alpha"


def health(service: Serving, calibrator: dict) -> dict:
    """The home page's facts about one calibrator (``list_calibrators``' entry)."""
    name = calibrator["name"]
    summary = service.observations.summary(name)
    alarms = drift_alarms.alarms(service.db, name)
    spark, window = [], row_window(summary["total_rows"])
    if summary["total_rows"]:
        try:
            answer = quality.quality(service, name, quality.QualityQuery(window=window, bootstrap=0,
                                                                         windows=SPARK_WINDOWS, metrics=("ece",)))
            spark = [(w["window"], w["calibrated"]["ece"]["estimate"]) for w in answer["windows"]]
        except ServiceError:  # over the read budget: the monitors' ECE stands in
            spark = []
    state, detail = state_of(summary, alarms)
    return {"calibrator": calibrator, "summary": summary, "alarms": alarms, "state": state, "detail": detail,
            "window": window, "sparkline": spark}


def trajectories(service: Serving, name: str, max_rows: int) -> list[dict]:
    """Per labelled monitor (version ascending): ``rows`` and ``log_e`` (at most
    ``TRAJECTORY_POINTS`` points, the first crossing kept), its threshold and alarm; a monitor fed
    more than ``max_rows`` rows is not replayed (``skipped``)."""
    out = []
    for row, chunks in sorted(monitor_reads.labelled_monitors(service.db, name), key=lambda m: m[0].version):
        view = drift_alarms.monitor_view(row)
        entry = {"version": row.version, "threshold_log_e": view["threshold_log_e_value"],
                 "alarm_rows": row.alarm_rows, "n_rows": row.n_rows, "log_e_value": row.log_e_value,
                 "rows": [], "log_e": [], "skipped": row.n_rows > max_rows}
        if not entry["skipped"] and chunks:
            test = cal.DriftTest(**{k: row.state[k] for k in cal.DRIFT_TEST_OPTIONS})
            path = []
            parts = [(chunk.kind, part) for chunk in chunks
                     for part in pieces(chunk.index_entry(), service.max_read_entries)]
            for kind, part in parts:  # one read at a time, each within the read budget
                with service.db.read() as session:
                    inputs, labels = observations.load(session, [part])
                versions = np.full(len(labels), row.version, dtype=np.int64)
                _, probs, usable = quality.calibrated_groups(service, name, kind, inputs, versions)
                labels = labels[usable]
                if len(labels):
                    test.update(cal.top_label_residuals(probs, labels),
                                cal.class_residuals(probs, labels))
                    path.append(test.trajectory)
            log_e = np.concatenate(path) if path else np.zeros(0)
            keep = np.unique(np.concatenate([np.linspace(0, len(log_e) - 1, min(len(log_e), TRAJECTORY_POINTS))
                                             .round().astype(np.int64),
                                             [row.alarm_rows - 1] if row.alarm_rows else []]).astype(np.int64))
            keep = keep[(keep >= 0) & (keep < len(log_e))]
            entry["rows"], entry["log_e"] = (keep + 1).tolist(), log_e[keep].tolist()
            entry["replayed_log_e"] = float(log_e[-1]) if len(log_e) else None
        out.append(entry)
    return out


def alarm_windows(service: Serving, name: str, window: str, alarms: dict) -> list[dict]:
    """Each alarm with the label of the quality window (``quality.quality``'s labels for ``window``)
    holding the row at which it fired: for a labelled monitor, its ``alarm_rows``-th labelled row of
    its version in arrival order; for a label-free one, the newest observation before it was raised."""
    size = quality.window_size(window)
    chunks = monitor_reads.observation_chunks(service.db, name)
    out = []
    for alarm in alarms["alarms"]:
        offset, seen, where = 0, 0, None
        for chunk in chunks:
            if alarm["signal"] == "labelled":
                if chunk.source == "feedback" and chunk.version == alarm["version"]:
                    if seen + chunk.n_rows >= alarm["alarm_rows"]:
                        where = (offset + alarm["alarm_rows"] - seen - 1, chunk.created_at)
                        break
                    seen += chunk.n_rows
            elif alarm["alarmed_at"] is not None and chunk.created_at <= alarm["alarmed_at"]:
                where = (offset + chunk.n_rows - 1, chunk.created_at)
            offset += chunk.n_rows
        if where is None:
            continue
        row, created = where
        label = (created.strftime(quality.TIME_FORMATS[window]) if size is None else
                 f"rows {row // size * size}-{(row // size + 1) * size - 1}")
        out.append({**alarm, "window": label, "row": row})
    return out


def evaluations(service: Serving, name: str, limit: int = 20) -> list[dict]:
    """The newest ``limit`` evaluations, whole (the stored result: confidence sequences, ECE intervals)."""
    return promotion_evaluations.recent_evaluations(service.db, name, limit)
