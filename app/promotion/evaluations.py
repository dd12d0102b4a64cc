"""Challenger evaluations: two versions of one calibrator compared on the same stored
observations that neither was fitted on, with anytime-valid confidence sequences on their NLL and
Brier differences (``calibration.compare_losses``: the empirical-Bernstein CS of Waudby-Smith &
Ramdas 2023 on the per-row paired difference of the floored losses, unclipped, bounded by
``log(1/EPSILON)`` nats for NLL), each one's ECE (15 bins by default) and KDE-ECE with
percentile-bootstrap intervals, and a verdict at level alpha that always agrees with the mean
losses shown (``challenger_better`` only when the challenger's reported mean is the lower).
Stored, so that a gated alias move can cite it. ``nll_clip`` in a request is accepted and ignored
(deprecated: nothing is clipped any more).

**Held out by default**: the observations created at or after the later of the two versions'
creation times. A version is fitted on data that existed when it was created (uploads carry
their ``observed_at``), so these rows were seen by neither. A caller may name another selection
(``data.observations``); the answer says which was used and whether it was the held-out default.
The confidence sequence holds at every sample size, so an evaluation may be repeated as labels
arrive and the first ``challenger_better`` acted on, with the error still at most alpha.

**Shadow evaluation** (no ``champion``): a version that serves no caller (a ``shadow`` alias, say)
is scored on the live labelled stream, the feedback rows created after it, against the version
that actually served each of those predictions. When one version served them all it is the
champion (and a gated alias pointing at it accepts the evaluation); otherwise the champion is
``served`` (stored as 0), which no gate accepts.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import numpy as np

import calibration as cal

from ..observations import reads as observations
from ..observations.service import shape_of_index
from ..observations.values import ObservationSelection
from ..platform.errors import InvalidInput, NotFound, TooLarge, refused_as
from ..platform.rows import utcnow
from ..registry import reads as registry
from ..registry.names import Reference, check_alias, check_name
from ..registry.serving import Serving
from . import store as promotion_store
from .rows import EvaluationRow
from .values import ChallengeSpec


def _reference(name: str, value: int | str) -> Reference:
    if isinstance(value, int):
        if not 1 <= value < 2**31:
            raise InvalidInput(f"version {value} is out of range")
        return Reference.pinned(name, value)
    if value.isascii() and value.isdigit():
        return _reference(name, int(value))
    return Reference(name, alias=check_alias(value))


def _interval(metric, probs, labels, fields: ChallengeSpec, **kwargs) -> dict:
    """The metric with its percentile-bootstrap interval (``fields.bootstrap`` resamples; 0: none)."""
    if fields.bootstrap == 0:
        return {"estimate": metric(probs, labels, **kwargs)}
    return cal.bootstrap_interval(metric, probs, labels, n_resamples=fields.bootstrap, confidence=fields.confidence,
                                  seed=fields.seed, **kwargs).to_dict()


def _served_probabilities(service: Serving, name: str, index: list, values,
                          kind: str) -> tuple[np.ndarray, dict[int, int]]:
    """Each labelled prediction's probabilities from the version that served it (the shadow's
    champion: what callers actually got), and the rows per serving version."""
    with service.db.read() as session:
        versions = observations.chunk_versions(session, [entry.id for entry in index])
    served = np.repeat([versions[entry.id] for entry in index], [entry.rows for entry in index])
    probabilities = None
    for version in np.unique(served).tolist():
        loaded = service.serving(Reference.pinned(name, version))
        rows = served == version
        with refused_as():
            inputs = cal.validate_inputs(values[rows], kind)
        part = service.predict(loaded, inputs)
        if probabilities is None:
            probabilities = np.empty((len(served), part.shape[1]))
        probabilities[rows] = part
    return probabilities, {v: int((served == v).sum()) for v in np.unique(served).tolist()}


def evaluate(service: Serving, name: str, fields: ChallengeSpec) -> dict:
    """Compare ``fields.challenger`` with ``fields.champion`` (or, without one, with the versions that
    served each labelled prediction: a shadow evaluation) on held-out observations; store and
    return the evaluation."""
    check_name(name)
    challenger = service.serving(_reference(name, fields.challenger))
    champion = None if fields.champion is None else service.serving(_reference(name, fields.champion))
    if champion is not None and challenger.version == champion.version:
        raise InvalidInput(f"challenger and champion are both version {challenger.version}")
    with service.db.read() as session:
        created = [registry.version_created(session, v.resolved) for v in (challenger, champion) if v]
    held_out = fields.data is None
    query = fields.data if fields.data is not None else ObservationSelection(since=max(created))
    if champion is None:  # only labelled predictions know the version that served them
        query = replace(query, source="feedback")
    try:
        index = service.observations.fit_index(name, query)
    except NotFound as exc:
        hint = " (post labels created after both versions, or name a selection in data.observations)"
        raise NotFound(str(exc) + (hint if held_out else "")) from exc
    n, k, _ = shape_of_index(index)
    if n * k > service.max_read_entries:
        raise TooLarge(f"the selected observations are {n} rows of {k} classes, {n * k} entries, over the limit of "
                       f"{service.max_read_entries} entries one read may load (CALIBRATION_MAX_READ_ENTRIES); "
                       "select fewer (data.observations.last)")
    batch = service.observations.load(None, index)
    for loaded in (challenger, champion):
        if loaded is not None and loaded.calibrator.input != batch.kind:
            raise InvalidInput(f"version {loaded.version} takes {loaded.calibrator.input}; the observations "
                               f"are {batch.kind}")
    with refused_as():
        inputs = cal.validate_inputs(batch.values, batch.kind)
        labels = cal.check_labels(batch.labels, inputs.n, inputs.k)
    challenger_probs = service.predict(challenger, inputs)
    if champion is None:
        champion_probs, served = _served_probabilities(service, name, index, batch.values, batch.kind)
    else:
        champion_probs, served = service.predict(champion, inputs), {champion.version: inputs.n}
    champion_version = next(iter(served)) if len(served) == 1 else 0  # 0: several (no gate accepts it)
    comparison = cal.compare_losses(challenger_probs, champion_probs, labels, fields.alpha, fields.decide_on)
    result = {
        "name": name, "challenger": challenger.version, "champion": champion_version or "served",
        "challenger_ref": str(fields.challenger),
        "champion_ref": "served" if champion is None else str(fields.champion),
        "served_by": {str(v): n for v, n in served.items()},
        "selection": query.to_dict(exclude_none=True), "held_out": held_out,
        **comparison,
        "ece": {"n_bins": fields.n_bins, "challenger": _interval(cal.ece, challenger_probs, labels, fields,
                                                                  n_bins=fields.n_bins),
                "champion": _interval(cal.ece, champion_probs, labels, fields, n_bins=fields.n_bins)},
        "kde_ece": {"challenger": _interval(cal.kde_ece, challenger_probs, labels, fields),
                    "champion": _interval(cal.kde_ece, champion_probs, labels, fields)},
    }
    result = cal.json_safe(result)
    row = EvaluationRow(id=uuid.uuid4().hex, challenger=challenger.version, champion=champion_version,
                        alpha=fields.alpha, n_rows=comparison["n_rows"], verdict=comparison["verdict"],
                        result=result, created_at=utcnow())
    with service.db.write() as session:
        row.calibrator_id = registry.calibrator_id(session, name)
        promotion_store.add_evaluation(session, row)
        return _view(row)


def _view(row: EvaluationRow) -> dict:
    return {"id": row.id, **row.result, "created_at": row.created_at}


def list_evaluations(db, name: str, limit: int = 20) -> dict:
    """The newest evaluations of ``name`` in brief: the versions, rows, level and verdict."""
    check_name(name)
    with db.read() as session:
        rows = promotion_store.recent_evaluations(session, name, limit)
        return {"name": name, "evaluations": [
            {"id": r.id, "challenger": r.challenger, "champion": r.champion, "alpha": r.alpha, "n_rows": r.n_rows,
             "verdict": r.verdict, "created_at": r.created_at} for r in rows]}


def recent_evaluations(db, name: str, limit: int = 20) -> list[dict]:
    """The newest ``limit`` evaluations of ``name``, whole (the stored result: confidence sequences,
    ECE intervals), newest first."""
    with db.read() as session:
        return [_view(row) for row in promotion_store.recent_evaluations(session, name, limit)]


def get_evaluation(db, name: str, evaluation_id: str) -> dict:
    check_name(name)
    with db.read() as session:
        return _view(promotion_store.evaluation(session, name, evaluation_id))
