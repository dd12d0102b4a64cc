"""Alias moves that are recorded, reversible and, where an alias asks for it, gated on evidence;
and what an unversioned /v2 call serves.

- **Every move is recorded** (``alias_moves``): set, rollback or delete, from and to versions,
  who (the API key id when keys are on) and when, and the evaluation given as evidence.
- **A gated alias** (``require_evaluation``) moves from version ``c`` to ``v`` only with an
  evaluation of this calibrator whose challenger is ``v``, whose champion is ``c`` (the version it
  points at *now*: evidence against an older target is stale) and whose verdict is
  ``challenger_better``; else ``Conflict`` (409) with the reason. Creating a gated alias (no
  current version) needs no evidence; deleting one needs the gate lifted first.
- **A rollback** points the alias back at the version its last move came from (itself a recorded
  move, allowed on a gated alias: undoing a promotion must never wait for evidence). Rolling back
  twice returns to where it was.
"""

from __future__ import annotations

from ..platform.db import Database
from ..platform.errors import Conflict, NotFound
from ..registry import reads as registry
from ..registry import writes as registry_writes
from ..registry.names import check_alias, check_name
from . import store as ps

HISTORY_LIMIT = 1000


def _alias_view(name: str, alias: str, version: int, move=None) -> dict:
    view = {"name": name, "alias": alias, "version": version}
    if move is not None:
        view["move"] = ps.move_view(move)
    return view


def _check_evidence(session, name: str, alias: str, current: int, version: int, evaluation_id: str | None) -> None:
    if evaluation_id is None:
        raise Conflict(f"alias {alias!r} of {name!r} requires an evaluation: send {{\"version\": {version}, "
                       f"\"evaluation\": id}} with an evaluation whose verdict favours version {version} over "
                       f"version {current} (POST /v1/calibrators/{name}/evaluations)")
    found = ps.evaluation(session, name, evaluation_id)
    if found.challenger != version:
        raise Conflict(f"evaluation {evaluation_id} has version {found.challenger} as its challenger, not {version}")
    if found.champion != current:
        raise Conflict(f"evaluation {evaluation_id} compared against version {found.champion}, but {alias!r} now "
                       f"points at version {current}: evaluate against the current version")
    if found.verdict != "challenger_better":
        raise Conflict(f"evaluation {evaluation_id} does not favour version {version} over version {current}: "
                       f"its verdict is {found.verdict} at alpha={found.alpha}")


def move_alias(db: Database, name: str, alias: str, version: int, evaluation_id: str | None = None,
               actor: str | None = None) -> dict:
    """Point ``alias`` at ``version`` (recorded; a gated alias needs ``evaluation_id``). Pointing it
    where it already points changes and records nothing."""
    check_name(name)
    check_alias(alias)
    with db.write() as session:
        calibrator = registry_writes.locked_calibrator(session, name)
        current = registry.alias_target(session, calibrator.id, alias)
        if current == version:
            return _alias_view(name, alias, version)
        if current is not None and ps.gate(session, calibrator.id, alias):
            _check_evidence(session, name, alias, current, version, evaluation_id)
        elif evaluation_id is not None:
            ps.evaluation(session, name, evaluation_id)  # evidence given is recorded, so it must exist
        registry_writes.point_alias(session, name, calibrator.id, alias, version)
        ps.record_move(session, calibrator.id, alias, "set", current, version, actor, evaluation_id)
        return _alias_view(name, alias, version)


def delete_alias(db: Database, name: str, alias: str, actor: str | None = None) -> None:
    check_name(name)
    check_alias(alias)
    with db.write() as session:
        calibrator = registry_writes.locked_calibrator(session, name)
        current = registry.alias_target(session, calibrator.id, alias)
        if current is None:
            raise NotFound(f"calibrator {name!r} has no alias {alias!r}")
        if ps.gate(session, calibrator.id, alias):
            raise Conflict(f"alias {alias!r} of {name!r} requires evidence to move; lift its gate first "
                           f"(PUT .../aliases/{alias}/gate {{\"require_evaluation\": false}})")
        if registry.v2_default(session, calibrator.id) == alias:
            raise Conflict(f"alias {alias!r} is what unversioned /v2 calls of {name!r} serve; change that first "
                           "(PUT .../serving)")
        registry_writes.remove_alias(session, calibrator.id, alias)
        ps.record_move(session, calibrator.id, alias, "delete", current, None, actor, None)


def rollback(db: Database, name: str, alias: str, actor: str | None = None) -> dict:
    """Point ``alias`` back at the version its last move came from (recorded as a rollback)."""
    check_name(name)
    check_alias(alias)
    with db.write() as session:
        calibrator = registry_writes.locked_calibrator(session, name)
        last = ps.last_move(session, calibrator.id, alias)
        if last is None or last.from_version is None:
            raise Conflict(f"alias {alias!r} of {name!r} has no earlier version to roll back to")
        current = registry.alias_target(session, calibrator.id, alias)
        try:
            registry_writes.point_alias(session, name, calibrator.id, alias, last.from_version)
        except NotFound as exc:
            raise Conflict(f"cannot roll {alias!r} back: version {last.from_version} was deleted") from exc
        move = ps.record_move(session, calibrator.id, alias, "rollback", current, last.from_version, actor, None)
        return _alias_view(name, alias, last.from_version, move)


def history(db: Database, name: str, alias: str, limit: int = HISTORY_LIMIT) -> dict:
    """The alias's target, its gate and its moves, newest first."""
    check_name(name)
    check_alias(alias)
    with db.read() as session:
        calibrator = registry.calibrator(session, name)
        rows = ps.moves(session, calibrator.id, alias, limit)
        return {"name": name, "alias": alias, "version": registry.alias_target(session, calibrator.id, alias),
                "require_evaluation": ps.gate(session, calibrator.id, alias),
                "moves": [ps.move_view(row) for row in rows]}


def set_gate(db: Database, name: str, alias: str, require_evaluation: bool) -> dict:
    check_name(name)
    check_alias(alias)
    with db.write() as session:
        calibrator = registry_writes.locked_calibrator(session, name)
        ps.set_gate(session, calibrator.id, alias, require_evaluation)
        return {"name": name, "alias": alias, "require_evaluation": require_evaluation,
                "version": registry.alias_target(session, calibrator.id, alias)}


def serving(db: Database, name: str) -> dict:
    check_name(name)
    with db.read() as session:
        calibrator = registry.calibrator(session, name)
        return {"name": name, "v2_default": registry.v2_default(session, calibrator.id) or "latest"}


def set_serving(db: Database, name: str, v2_default: str) -> dict:
    """What an unversioned /v2 call of ``name`` serves: ``latest`` or an existing alias."""
    check_name(name)
    alias = None if v2_default == "latest" else check_alias(v2_default)
    with db.write() as session:
        calibrator = registry_writes.locked_calibrator(session, name)
        if alias is not None and registry.alias_target(session, calibrator.id, alias) is None:
            raise NotFound(f"calibrator {name!r} has no alias {alias!r}")
        registry_writes.set_v2_default(session, calibrator.id, alias)
    return {"name": name, "v2_default": v2_default}
