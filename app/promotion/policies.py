"""Refit policies: when a calibrator is refitted, on which data, and whether the new
version replaces an alias's.

A policy (``PUT /v1/calibrators/{name}/policy``) fires when, since its last refit, ``every_labels``
labelled observations arrived, a drift alarm was raised (``on_alarm``), or
``every_seconds`` passed. ``run`` checks it (``POST .../policy/run``: call it from a scheduler, or
after posting labels) and, when it fires, submits a ``refit`` job. The job

1. fits ``method`` on the newest ``last`` observations less their newest ``holdout`` fraction (cut
   at a chunk's creation time, so the held-out rows are exactly those created at or after it);
2. with an ``alias``, evaluates the new version against the alias's version on the held-out rows
   that neither saw (created at or after both the cut and the champion's creation;
   ``app.promotion.evaluations``: an anytime-valid confidence sequence, verdict at ``alpha``);
3. with ``promote``, moves the alias when the verdict is ``challenger_better``, citing the
   evaluation (so a gated alias accepts it), recorded with the actor ``policy``.
"""

from __future__ import annotations

from datetime import timedelta

import calibration as cal

from ..monitoring.alarms import alarmed_versions
from ..observations import reads as observations
from ..observations.chunks import refs_from_json
from ..observations.values import ObservationSelection
from ..platform.errors import Conflict, InvalidInput, NotFound, refused_as
from ..platform.rows import utcnow
from ..registry import reads as registry
from ..registry import writes as registry_writes
from ..registry.names import Reference, check_alias, check_name
from ..registry.serving import FitSpec, Serving
from . import aliases as promotion
from . import evaluations
from . import store as ps
from .rows import RefitPolicyRow
from .values import ChallengeSpec, PolicySpec


def _view(name: str, row: RefitPolicyRow) -> dict:
    return {"name": name, **row.config, "created_at": row.created_at, "last_run_at": row.last_run_at,
            "last_job": row.last_job_id}


def set_policy(db, name: str, policy: PolicySpec) -> dict:
    check_name(name)
    if policy.alias is not None:
        check_alias(policy.alias)
    if not any((policy.every_labels, policy.on_alarm, policy.every_seconds)):
        raise InvalidInput("a policy needs a trigger: every_labels, on_alarm or every_seconds")
    with refused_as():
        cal.create(policy.method, policy.options)
    with db.write() as session:
        calibrator = registry_writes.locked_calibrator(session, name)
        row = session.get(RefitPolicyRow, calibrator.id)
        if row is None:
            row = RefitPolicyRow(calibrator_id=calibrator.id, created_at=utcnow())
            session.add(row)
        row.config = policy.to_dict()
        session.flush()
        return _view(name, row)


def get_policy(db, name: str) -> dict:
    check_name(name)
    with db.read() as session:
        calibrator = registry.calibrator(session, name)
        row = session.get(RefitPolicyRow, calibrator.id)
        if row is None:
            raise NotFound(f"calibrator {name!r} has no refit policy")
        return _view(name, row)


def _reasons(session, calibrator_id: int, policy: PolicySpec, since) -> list[str]:
    reasons = []
    if policy.every_labels:
        new = observations.rows_since(session, calibrator_id, since)
        if new >= policy.every_labels:
            reasons.append(f"{new} labelled observations since {since.isoformat()} (every {policy.every_labels})")
    if policy.on_alarm:
        alarms = alarmed_versions(session, calibrator_id, since)
        if alarms:
            reasons.append(f"drift alarm on version(s) {', '.join(map(str, sorted(alarms)))}")
    if policy.every_seconds and utcnow() - since >= timedelta(seconds=policy.every_seconds):
        reasons.append(f"{policy.every_seconds:g} s since {since.isoformat()}")
    return reasons


def _cut(session, calibrator_id: int, last: int, holdout: float):
    """The creation time of the oldest chunk among the newest ``holdout * last`` rows (None: no holdout)."""
    if holdout <= 0:
        return None
    wanted, seen = holdout * last, 0
    rows = observations.row_times(session, calibrator_id, 100_000)
    for n_rows, created_at in rows:
        seen += n_rows
        if seen >= wanted:
            return created_at
    return None


def run(service: Serving, name: str, force: bool = False) -> tuple[bool, dict]:
    """Check the policy; when it fires (or ``force``), submit a refit job: ``(True, job)``, else
    ``(False, why not)``."""
    check_name(name)
    if service.jobs is None:
        raise Conflict("this server runs no jobs")
    with service.db.write() as session:
        calibrator = registry_writes.locked_calibrator(session, name)
        row = session.get(RefitPolicyRow, calibrator.id)
        if row is None:
            raise NotFound(f"calibrator {name!r} has no refit policy")
        config = dict(row.config)
        policy = PolicySpec.from_dict(config)
        since = row.last_run_at or row.created_at
        reasons = _reasons(session, calibrator.id, policy, since) + (["forced"] if force else [])
        if not reasons:
            return False, {"name": name, "triggered": False, "since": since}
        cut = _cut(session, calibrator.id, policy.last, policy.holdout)
        row.last_run_at = utcnow()
    query = ObservationSelection(last=max(1, int(policy.last * (1 - policy.holdout))), until=cut) if cut \
        else ObservationSelection(last=policy.last)
    fields = FitSpec(method=policy.method, options=policy.options, data=query,
                     description=f"refit by policy: {'; '.join(reasons)}")
    index = service.observations.fit_index(name, query)
    request = {"fit": fields.to_dict(), "chunks": [ref.as_json() for ref in index], "policy": config,
               "cut": cut.isoformat() if cut else None, "reasons": reasons}
    job = service.jobs.submit("refit", name, request, None)
    with service.db.write() as session:
        ps.set_last_job(session, calibrator.id, job["id"])
    return True, job


def run_refit(service: Serving, name: str, request: dict, progress) -> dict:
    """The refit job: fit, then evaluate against the policy's alias and promote if it says so."""
    fields = FitSpec.from_dict(request["fit"])
    policy = PolicySpec.from_dict(request["policy"])
    progress.step(f"refitting {fields.method} on stored observations", 5.0)
    version = service.fit(name, service.observations.load(fields, refs_from_json(request["chunks"])))["version"]
    result = {"name": name, "version": version, "reasons": request["reasons"], "evaluation": None,
              "verdict": None, "promoted": False, "reason": None}
    if policy.alias is None:
        return result
    progress.step(f"evaluating version {version} against {policy.alias}", 70.0)
    try:
        champion = service.serving(Reference(name, alias=policy.alias))
        with service.db.read() as session:
            since = ps.version_created_at(session, champion.resolved)
        if request["cut"] is not None:
            since = max(since, ps.parse_time(request["cut"]))
        evaluation = evaluations.evaluate(service, name, ChallengeSpec(
            challenger=version, champion=champion.version, alpha=policy.alpha, bootstrap=100,
            data=ObservationSelection(since=since)))
    except (NotFound, InvalidInput) as exc:
        return {**result, "reason": f"not evaluated: {exc}"}
    result.update(evaluation=evaluation["id"], verdict=evaluation["verdict"])
    if not policy.promote:
        return result
    if evaluation["verdict"] != "challenger_better":
        return {**result, "reason": f"not promoted: the verdict is {evaluation['verdict']}"}
    progress.step(f"moving {policy.alias} to version {version}", 95.0)
    try:
        promotion.move_alias(service.db, name, policy.alias, version, evaluation["id"], actor="policy")
    except (Conflict, NotFound) as exc:
        return {**result, "reason": f"not promoted: {exc}"}
    return {**result, "promoted": True}
