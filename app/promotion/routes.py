"""Safe promotion (/v1): alias history and rollback, alias gates, what an unversioned
/v2 call serves, and challenger evaluations."""

from __future__ import annotations

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool

from ..http import admission
from ..http.auth import READ, WRITE
from ..http.openapi import body, problems
from ..jobs.schemas import JobOut
from ..monitoring.schemas import (
    AliasHistoryOut,
    AliasMoveOut,
    EvaluationList,
    EvaluationOut,
    GateOut,
    PolicyOut,
    PolicyRunOut,
    ServingOut,
)
from ..registry.routes import ALIAS, NAME, _json, actor_of, job_accepted, request_body
from ..registry.service import CalibrationService
from ..wire.decoding import decode_fields
from . import aliases as promotion
from . import evaluations, policies
from .schemas import EvaluationRequest, GateRequest, RefitPolicy, ServingRequest

router = APIRouter(prefix="/v1", tags=["promotion"])
EVALUATION_ID = Path(pattern=r"^[0-9a-f]{32}$", description="Evaluation id")


def _service(request: Request) -> CalibrationService:
    return request.app.state.service


@router.get("/calibrators/{name}/aliases/{alias}/history", summary="Alias moves, newest first",
            response_model=AliasHistoryOut,
            responses=problems(404, 422), dependencies=[READ])
async def alias_history(request: Request, name: str = NAME, alias: str = ALIAS,
                        limit: int = Query(100, ge=1, le=promotion.HISTORY_LIMIT)):
    """Every move of the alias (set, rollback, delete): from and to versions, who (API key id when
    keys are on), when, and the evaluation given as evidence; with its current version and gate."""
    return _json(await run_in_threadpool(promotion.history, _service(request).db, name, alias, limit))


@router.post("/calibrators/{name}/aliases/{alias}/rollback", summary="Point an alias back at its previous version",
            response_model=AliasMoveOut,
             responses=problems(404, 409, 422), dependencies=[WRITE])
async def alias_rollback(request: Request, name: str = NAME, alias: str = ALIAS):
    """Undo the alias's last move (recorded as a rollback; allowed on a gated alias). Rolling back
    twice returns to where it was."""
    return _json(await run_in_threadpool(promotion.rollback, _service(request).db, name, alias, actor_of(request)))


def _set_gate(service: CalibrationService, name: str, alias: str, data) -> dict:
    return promotion.set_gate(service.db, name, alias, decode_fields(data, GateRequest).require_evaluation)


@router.put("/calibrators/{name}/aliases/{alias}/gate", summary="Require evidence to move an alias",
            response_model=GateOut,
            responses=problems(400, 404, 413, 415, 422), openapi_extra=body(GateRequest), dependencies=[WRITE])
async def alias_gate(request: Request, name: str = NAME, alias: str = ALIAS):
    """With `require_evaluation`, the alias moves only with an evaluation whose verdict favours the
    new version over its current one (PUT .../aliases/{alias} with `evaluation`)."""
    return _json(await run_in_threadpool(_set_gate, _service(request), name, alias, await request_body(request)))


@router.get("/calibrators/{name}/serving", summary="What an unversioned /v2 call serves",
            response_model=ServingOut,
            responses=problems(404, 422), dependencies=[READ])
async def get_serving(request: Request, name: str = NAME):
    return _json(await run_in_threadpool(promotion.serving, _service(request).db, name))


def _set_serving(service: CalibrationService, name: str, data) -> dict:
    return promotion.set_serving(service.db, name, decode_fields(data, ServingRequest).v2_default)


@router.put("/calibrators/{name}/serving", summary="Set what an unversioned /v2 call serves",
            response_model=ServingOut,
            responses=problems(400, 404, 409, 413, 415, 422), openapi_extra=body(ServingRequest),
            dependencies=[WRITE])
async def put_serving(request: Request, name: str = NAME):
    """`latest` (the default) or an alias such as `production`: `/v2/models/{name}/infer` then
    serves that alias, so a new fit changes nothing for /v2 callers until the alias moves."""
    return _json(await run_in_threadpool(_set_serving, _service(request), name, await request_body(request)))


def _evaluate(service: CalibrationService, name: str, data) -> dict:
    return evaluations.evaluate(service, name, decode_fields(data, EvaluationRequest).to_value())


@router.post("/calibrators/{name}/evaluations", status_code=201, summary="Evaluate a challenger against a champion",
            response_model=EvaluationOut,
             responses=problems(400, 404, 409, 413, 415, 422), openapi_extra=body(EvaluationRequest),
             dependencies=[WRITE])
async def create_evaluation(request: Request, name: str = NAME):
    """Both versions on the same stored observations that neither was fitted on (by default those
    created after both versions): NLL (each row's floored at probability 2.2e-16, so at most 36.04
    nats) and Brier of each, their difference (challenger - champion) with an anytime-valid
    confidence sequence (unclipped), ECE with bootstrap intervals, and the verdict at level `alpha`
    (`challenger_better`, `champion_better` or `inconclusive`), which always agrees with the sign
    of the shown mean difference. Stored: a gated alias move cites its id."""
    result = await admission.run(request, _evaluate, _service(request), name, await request_body(request))
    return _json(result, 201, {"Location": f"/v1/calibrators/{name}/evaluations/{result['id']}"})


@router.get("/calibrators/{name}/evaluations", summary="List evaluations, newest first",
            response_model=EvaluationList,
            responses=problems(404, 422), dependencies=[READ])
async def list_evaluations(request: Request, name: str = NAME, limit: int = Query(20, ge=1, le=1000)):
    """The newest evaluations in brief (versions, rows, level, verdict); each in full at its id."""
    return _json(await run_in_threadpool(evaluations.list_evaluations, _service(request).db, name, limit))


@router.get("/calibrators/{name}/evaluations/{evaluation_id}", summary="Get an evaluation",
            response_model=EvaluationOut,
            responses=problems(404, 422), dependencies=[READ])
async def get_evaluation(request: Request, name: str = NAME, evaluation_id: str = EVALUATION_ID):
    return _json(await run_in_threadpool(evaluations.get_evaluation, _service(request).db, name, evaluation_id))


def _set_policy(service: CalibrationService, name: str, data) -> dict:
    return policies.set_policy(service.db, name, decode_fields(data, RefitPolicy).to_value())


@router.put("/calibrators/{name}/policy", summary="Set the refit policy",
            response_model=PolicyOut,
            responses=problems(400, 404, 413, 415, 422),
            openapi_extra=body(RefitPolicy), dependencies=[WRITE])
async def put_policy(request: Request, name: str = NAME):
    """When to refit (every N new labelled observations, on a drift alarm, on a schedule), on which
    observations (the newest `last`, less the newest `holdout` fraction kept to evaluate), with
    which method, and which alias the new version must beat (and whether to move it on its own)."""
    return _json(await run_in_threadpool(_set_policy, _service(request), name, await request_body(request)))


@router.get("/calibrators/{name}/policy", summary="Get the refit policy",
            response_model=PolicyOut, responses=problems(404, 422),
            dependencies=[READ])
async def get_policy(request: Request, name: str = NAME):
    return _json(await run_in_threadpool(policies.get_policy, _service(request).db, name))


@router.post("/calibrators/{name}/policy/run", summary="Check the refit policy; refit as a job if it fires",
            response_model=PolicyRunOut,
             responses={202: {"model": JobOut, "description": "The refit job, to poll at Location"},
                        **problems(404, 409, 413, 422)},
             dependencies=[WRITE])
async def run_policy(request: Request, name: str = NAME,
                     force: bool = Query(False, description="Refit even if no trigger fired")):
    """Call it from a scheduler (or after posting labels): when a trigger fired since the last
    refit, a `refit` job fits the challenger, evaluates it against the policy's alias on the
    held-out rows and, with `promote`, moves the alias if the verdict favours it (202 with the
    job); else 200 with `triggered: false`."""
    fired, value = await run_in_threadpool(policies.run, _service(request), name, force)
    return job_accepted(value) if fired else _json(value)
