"""Liveness, readiness (database reachable and schema at the Alembic head) and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from starlette.responses import JSONResponse, Response

from ..monitoring.schemas import HealthOut, ReadyOut
from ..platform.logs import first_line
from ..platform.revision import HEAD, current_revision

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers",
            response_model=HealthOut)
async def healthz():
    return {"status": "ok"}


def readiness(engine) -> tuple[int, dict]:
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        revision = current_revision(engine)
    except SQLAlchemyError as exc:
        return 503, {"status": "unavailable", "database": f"unreachable: {first_line(exc)}"}
    if revision != HEAD:
        return 503, {"status": "unavailable", "database": "ok",
                     "schema": f"at revision {revision}, head is {HEAD}: run `calibration-service migrate`"}
    return 200, {"status": "ready", "database": "ok", "schema": revision}


@router.get("/readyz", summary="Readiness: database reachable and schema at head",
            response_model=ReadyOut,
            responses={503: {"description": "Not ready (database unreachable or schema behind), with Retry-After"}})
async def readyz(request: Request):
    status, payload = await run_in_threadpool(readiness, request.app.state.db.engine)
    return JSONResponse(payload, status_code=status, headers={"Retry-After": "5"} if status == 503 else None)


@router.get("/metrics", summary="Prometheus metrics of this process",
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
                             "description": "Prometheus text exposition format"}})
async def metrics(request: Request):
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
