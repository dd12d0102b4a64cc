"""Calibration quality over time, on domain values: the core's metrics per window of
stored observations, calibrated (through the version that served each feedback row, through the
latest version for uploads, or through one ``version`` for every row) and uncalibrated, each with
a bootstrap interval (``calibration.bootstrap_interval``), and label-free signals per window.

Windows are calendar hours or days (UTC, of the rows' ``created_at``) or blocks of ``N`` rows in
arrival order; only the newest ``windows`` of them are computed. A request reads at most
``CALIBRATION_MAX_READ_ENTRIES`` rows x classes, and its bootstrap resamples are cut to ``BOOTSTRAP_ENTRIES``
(the answer then says ``bootstrap`` used and ``bootstrap_asked``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

import calibration as cal

from ..observations import reads as observations
from ..observations.chunks import total_rows
from ..platform.db import Database
from ..platform.errors import InvalidInput, NotAcceptable, NotFound, TooLarge, refused_as
from ..prediction_log import reads as prediction_log
from ..registry import reads as registry
from ..registry.names import Reference, check_name
from ..registry.serving import Serving
from . import coverage

METRICS = {"ece": cal.ece, "classwise_ece": cal.classwise_ece, "kde_ece": cal.kde_ece, "nll": cal.nll,
           "brier": cal.brier, "accuracy": cal.accuracy, "mean_confidence": cal.mean_confidence}
BINNED = {"ece", "classwise_ece"}
# resamples x rows x classes x 2 (calibrated and not) of one request's intervals: about 20 s of work
BOOTSTRAP_ENTRIES = 200_000_000
TIME_FORMATS = {"hour": "%Y-%m-%dT%H:00:00Z", "day": "%Y-%m-%d"}


@dataclass(frozen=True)
class QualityQuery:
    """``window``: ``hour``, ``day`` or a number of rows; ``version``: score every row through
    this version (default: each feedback row through the version that served it, uploads through
    the latest); ``windows``: how many of the newest windows; ``bootstrap``: resamples per interval
    (0: none); ``metrics``: the ``METRICS`` to compute (``None``: all); ``intervals``: those of them
    that get a bootstrap interval (``None``: all), the others an estimate only. A metric's interval
    is the same whichever others are asked (its resamples' seed is ``seed`` plus its place in
    ``METRICS``)."""

    window: str = "day"
    version: int | None = None
    windows: int = 12
    n_bins: int = 15
    bootstrap: int = 100
    confidence: float = 0.95
    seed: int = 0
    metrics: tuple[str, ...] | None = None
    intervals: tuple[str, ...] | None = None


def window_size(window: str) -> int | None:
    """``None`` for a calendar window, else the rows per window."""
    if window in TIME_FORMATS:
        return None
    if window.isdigit() and int(window) >= 1:
        return int(window)
    raise InvalidInput(f"window must be 'hour', 'day' or a positive number of rows, got {window[:40]!r}")


def _plan(chunks: list, window: str, windows: int) -> tuple[list, list]:
    """The index entries to read (oldest first) and each entry's window label per row: the newest
    ``windows`` calendar windows, or the newest ``windows`` blocks of N rows (the last may be short)."""
    size = window_size(window)
    if size is None:
        keys = [chunk.created_at.strftime(TIME_FORMATS[window]) for chunk in chunks]
        kept = set(sorted(set(keys))[-windows:])
        chosen = [(chunk, key) for chunk, key in zip(chunks, keys, strict=True) if key in kept]
        return ([c.index_entry() for c, _ in chosen], [np.full(c.n_rows, key, dtype=object) for c, key in chosen])
    total = sum(chunk.n_rows for chunk in chunks)
    start = max(-(-total // size) - windows, 0) * size
    entries, labels, offset = [], [], 0
    for chunk in chunks:
        end = offset + chunk.n_rows
        if end > start:
            skip = max(start - offset, 0)
            entries.append(chunk.index_entry(skip))
            rows = np.arange(offset + skip, end) // size
            labels.append(np.array([f"rows {b * size}-{(b + 1) * size - 1}" for b in rows], dtype=object))
        offset = end
    return entries, labels


def check_read(rows: int, k: int, budget: int, asked: str) -> None:
    """Refuse, before anything is read, a read of ``rows`` rows of ``k`` classes over the budget
    (``CALIBRATION_MAX_READ_ENTRIES``): a 422 naming the setting and the most rows it allows."""
    if rows * k > budget:
        raise InvalidInput(f"{asked}={rows} rows of {k} classes are {rows * k} entries, over the limit of {budget} "
                           f"entries one read may load (CALIBRATION_MAX_READ_ENTRIES); ask for at most "
                           f"{max(budget // k, 1)} rows")


def calibrated_groups(service: Serving, name: str, kind: str, inputs: np.ndarray, versions: np.ndarray):
    """``(raw probabilities, calibrated probabilities, usable rows)``: each row through the version in
    ``versions``; rows of a version that was deleted are left out."""
    with refused_as():
        raw = cal.validate_inputs(inputs, kind)
    raw_probs = np.asarray(cal.to_host(raw.probabilities), dtype=np.float64)
    calibrated = np.empty_like(raw_probs)
    usable = np.zeros(len(versions), dtype=bool)
    for version in np.unique(versions):
        rows = np.flatnonzero(versions == version)
        try:
            loaded = service.serving(Reference.pinned(name, int(version)))
        except NotFound:
            continue
        part = cal.validate_inputs(inputs[rows], kind)
        calibrated[rows] = cal.to_host(service.predict(loaded, part))
        usable[rows] = True
    return raw_probs[usable], calibrated[usable], usable


def metrics_of(probs: np.ndarray, labels: np.ndarray, query: QualityQuery) -> dict:
    """The metrics of ``METRICS`` the query asks for, each with its bootstrap interval if asked
    (``low``/``high`` null without one)."""
    out = {}
    for offset, (metric, fn) in enumerate(METRICS.items()):
        if query.metrics is not None and metric not in query.metrics:
            continue
        kwargs = {"n_bins": query.n_bins} if metric in BINNED else {}
        if query.bootstrap and (query.intervals is None or metric in query.intervals):
            interval = cal.bootstrap_interval(fn, probs, labels, n_resamples=query.bootstrap,
                                              confidence=query.confidence, seed=query.seed + offset, **kwargs)
            values = {"estimate": interval.estimate, "low": interval.low, "high": interval.high}
        else:
            values = {"estimate": fn(probs, labels, **kwargs), "low": None, "high": None}
        out[metric] = {k: (v if v is None or np.isfinite(v) else None) for k, v in values.items()}
    return out


def label_free(probs: np.ndarray) -> dict:
    """Signals that need no label: the expected accuracy of calibrated probabilities (their mean
    top-label confidence: the accuracy if the calibration holds, CBPE's estimate), the mean
    entropy (nats) and the predicted class distribution."""
    p = np.clip(probs, 1e-300, 1.0)
    k = probs.shape[1]
    return {"expected_accuracy": float(probs.max(axis=1).mean()),
            "mean_entropy": float(-(probs * np.log(p)).sum(axis=1).mean()),
            "predicted_class_distribution": (np.bincount(probs.argmax(axis=1), minlength=k) / len(probs)).tolist()}


def quality(service: Serving, name: str, query: QualityQuery) -> dict:
    """The quality history of ``name``: one entry per window, oldest first."""
    check_name(name)
    if query.windows < 1 or query.bootstrap < 0 or query.n_bins < 1 or not 0 < query.confidence < 1:
        raise InvalidInput("windows and n_bins must be >= 1, bootstrap >= 0 and confidence in (0, 1)")
    unknown = (set(query.metrics or ()) | set(query.intervals or ())) - set(METRICS)
    if unknown:
        raise InvalidInput(f"unknown metrics {sorted(unknown)}; known: {list(METRICS)}")
    db: Database = service.db
    with db.read() as session:
        calibrator = registry.calibrator(session, name)
        latest = calibrator.last_version
        if query.version is not None:
            registry.version_classes(session, name, query.version)
        chunks = observations.observation_chunks(session, calibrator.id)
        entries, window_labels = _plan(chunks, query.window, query.windows)
        n = total_rows(entries)
        if entries and n * entries[0].n_classes > service.max_read_entries:
            raise TooLarge(f"the newest {query.windows} windows hold {n} rows of {entries[0].n_classes} classes, over "
                           f"the limit of {service.max_read_entries} entries one read may load "
                           "(CALIBRATION_MAX_READ_ENTRIES); ask for fewer or smaller windows")
        inputs, labels = observations.load(session, entries) if entries else (None, None)
    answer = {"name": name, "window": query.window, "version": query.version, "n_bins": query.n_bins,
              "bootstrap": query.bootstrap, "confidence": query.confidence, "windows": [], "skipped_rows": 0}
    if not entries:
        return answer
    by_chunk = {chunk.id: chunk for chunk in chunks}
    versions = np.concatenate([
        np.full(entry.rows, query.version or by_chunk[entry.id].version or latest, dtype=np.int64)
        for entry in entries])
    window_of = np.concatenate(window_labels)
    raw, calibrated, usable = calibrated_groups(service, name, entries[0].kind, inputs, versions)
    labels, window_of, versions = labels[usable], window_of[usable], versions[usable]
    answer["skipped_rows"] = int((~usable).sum())
    affordable = BOOTSTRAP_ENTRIES // max(2 * raw.size, 1)
    if affordable < query.bootstrap:  # the budget, checked before the work: fewer resamples, said so
        answer["bootstrap"], answer["bootstrap_asked"] = affordable, query.bootstrap
        query = replace(query, bootstrap=affordable)
    keys = sorted(set(window_of), key=_window_order)
    sets = coverage.window_coverage(service, name, calibrated, labels, versions, window_of, keys, query.confidence,
                                    query.seed)
    for key in keys:
        rows = np.flatnonzero(window_of == key)
        served = np.unique(versions[rows], return_counts=True)
        answer["windows"].append({
            "window": key, "n_rows": len(rows),
            "versions": {str(v): int(c) for v, c in zip(*served, strict=True)},
            "calibrated": metrics_of(calibrated[rows], labels[rows], query),
            "uncalibrated": metrics_of(raw[rows], labels[rows], query),
            "label_free": label_free(calibrated[rows]), "coverage": sets[key]})
    return answer


def _window_order(key: str):
    return (0, int(key.split()[1].split("-")[0]), key) if key.startswith("rows ") else (1, 0, key)


def label_shift(service: Serving, name: str, version: int | None = None, last: int = 50_000,
                alpha: float = 0.05) -> dict:
    """Class priors of production estimated from the newest ``last`` logged predictions (no labels):
    EM (Saerens et al. 2002) on their calibrated probabilities, each through the version that
    served it (or through ``version``), and BBSE (Lipton et al. 2018) against the labelled
    observations (uploads if there are any, else all) through the same version; the source priors
    are those observations' class frequencies. ``suggestion``: the adjustment to serve, from
    ``calibration.prior_shift`` — EM on a bias-corrected temperature scaling of the raw inputs
    fitted on those observations (whatever the stored method: it is only for the estimate), the
    likelihood-ratio test of no shift at ``alpha`` and the shrinkage toward the source priors."""
    check_name(name)
    if last < 1:
        raise InvalidInput("last must be >= 1")
    if not 0 < alpha < 1:
        raise InvalidInput(f"alpha must lie in (0, 1), got {alpha!r}")
    if service.prediction_log is not None:  # what was served until now, not only what was flushed
        service.prediction_log.flush()
    with service.db.read() as session:
        calibrator = registry.calibrator(session, name)
        reference = version or calibrator.last_version
        k = max(registry.version_classes(session, name, reference), 2)
        check_read(last, k, service.max_read_entries, "last")
        logged = prediction_log.logged_inputs(session, calibrator.id, version, last)
        index = observations.chunk_index(session, calibrator.id, last=last, source="upload") or \
            observations.chunk_index(session, calibrator.id, last=last)
        if logged is None or not index:
            raise NotFound(f"{name!r} needs logged predictions and labelled observations for a label-shift "
                           f"estimate (it has {0 if logged is None else len(logged[1])} logged rows)")
        source_inputs, source_labels = observations.load(session, index)
    kind, inputs, versions = logged
    if version is not None:
        versions[:] = version
    raw_target, target, _ = calibrated_groups(service, name, kind, inputs, versions)
    raw_source, source, usable = calibrated_groups(service, name, index[0].kind, source_inputs,
                                                   np.full(len(source_labels), reference, dtype=np.int64))
    source_labels = source_labels[usable]
    if not len(target) or not len(source_labels):
        raise NotFound(f"the versions that served {name!r}'s rows were deleted")
    k = target.shape[1]
    pi = np.bincount(source_labels, minlength=k) / len(source_labels)
    em = cal.em_priors(target, pi)
    bbse = cal.bbse_priors(source, source_labels, target, pi)
    return {"name": name, "version": version, "reference_version": reference, "n_predictions": len(target),
            "n_source_rows": len(source_labels), "source_priors": pi.tolist(), "em": em.to_dict(),
            "bbse": bbse.to_dict(), "suggestion": suggestion(raw_source, source_labels, raw_target, pi, alpha),
            "label_free": label_free(target),
            "source_label_free": {**label_free(source), "accuracy": cal.accuracy(source, source_labels)}}


def suggestion(raw_source: np.ndarray, source_labels: np.ndarray, raw_target: np.ndarray, pi: np.ndarray,
               alpha: float) -> dict:
    """``calibration.prior_shift``'s decision on the raw probabilities' logs (BCTS fitted on the
    labelled source rows), with the BCTS it used."""
    bcts = cal.bcts_fit(np.log(np.clip(raw_source, 1e-300, 1.0)), source_labels)
    decision = cal.prior_shift_test(bcts.predict_proba(np.log(np.clip(raw_target, 1e-300, 1.0))), pi, alpha)
    return {**decision.to_dict(), "calibration": {"method": "bias_corrected_temperature",
                                                  "temperature": bcts.temperature, "biases": bcts.biases.tolist(),
                                                  "converged": bcts.converged, "rows": len(source_labels)}}


def quality_figure(service: Serving, name: str, query: QualityQuery, fmt: str) -> bytes:
    """The quality history as a picture (``png`` or ``svg``): ECE calibrated and not, and accuracy
    against mean confidence, per window with their intervals."""
    answer = quality(service, name, query)
    if not answer["windows"]:
        raise NotFound(f"{name!r} has no observations to draw")
    windows = answer["windows"]
    panels = {"ECE": {"calibrated": [w["calibrated"]["ece"] for w in windows],
                      "uncalibrated": [w["uncalibrated"]["ece"] for w in windows]},
              "calibrated": {"accuracy": [w["calibrated"]["accuracy"] for w in windows],
                             "mean confidence": [w["calibrated"]["mean_confidence"] for w in windows]}}
    version = f" (all through v{query.version})" if query.version else ""
    try:
        return cal.quality_figure([w["window"] for w in windows], panels, fmt,
                                f"{name}: calibration quality per {query.window}{version}")
    except ImportError as exc:  # pragma: no cover - matplotlib is an optional extra
        raise NotAcceptable("images need the 'plot' extra (matplotlib) on the server") from exc
