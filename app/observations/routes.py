"""Observations (/v1): append labelled batches, summarise and delete them, turn the prediction
log on, and join labels that arrive later to the predictions they belong to."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from ..http import admission
from ..http.auth import ADMIN, READ, WRITE
from ..http.idempotent import idempotent
from ..http.openapi import body, problems
from ..platform.errors import InvalidInput
from ..registry.names import check_name
from ..registry.routes import NAME, _json, request_body
from ..registry.service import CalibrationService
from ..wire.decoding import NPZ_TYPE, RequestBody, decode_fields, decode_values
from .schemas import (
    DeletedObservations,
    LabelsOut,
    LabelsRequest,
    LoggingOut,
    LoggingRequest,
    ObservationFields,
    ObservationRequest,
    ObservationsAppended,
    ObservationSummary,
)

router = APIRouter(prefix="/v1", tags=["observations"])
BEFORE = Query(description="Delete rows observed before this time (ISO 8601 with a UTC offset)")


def _service(request: Request) -> CalibrationService:
    return request.app.state.service


def _append(service: CalibrationService, name: str, data: RequestBody) -> dict:
    check_name(name)
    batch = decode_values(data, ObservationFields, need_labels=True, limits=service.limits)
    return service.observations.append(name, batch)


@router.post("/calibrators/{name}/observations", status_code=201, summary="Append labelled observations",
             response_model=ObservationsAppended, responses=problems(400, 404, 413, 415, 422),
             openapi_extra=body(ObservationRequest, NPZ_TYPE), dependencies=[WRITE])
async def append_observations(request: Request, name: str = NAME):
    """Append a labelled batch (JSON, or `.npz` with the input array and `labels`) to `name`'s
    observations, creating the name if it is new. Each append is atomic; a large validation set
    arrives as many appends, and an `Idempotency-Key` makes a retried append count once."""
    data = await request_body(request)

    async def answer() -> Response:
        return _json(await admission.run(request, _append, _service(request), name, data), 201)

    return await idempotent(request, data, answer)


@router.get("/calibrators/{name}/observations", summary="Summarise the observations",
            response_model=ObservationSummary, responses=problems(404, 422), dependencies=[READ])
async def observation_summary(request: Request, name: str = NAME):
    """Counts per source, per serving version and per day, the class balance, and the state of
    the prediction log; never the arrays."""
    return _json(await run_in_threadpool(_service(request).observations.summary, name))


@router.delete("/calibrators/{name}/observations", summary="Delete old observations",
               response_model=DeletedObservations, responses=problems(404, 422), dependencies=[ADMIN])
async def delete_observations(request: Request, name: str = NAME, before: datetime = BEFORE):
    if before.tzinfo is None:
        raise InvalidInput("before needs a UTC offset (e.g. 2026-11-23T00:00:00Z)")
    return _json(await run_in_threadpool(_service(request).observations.delete_before, name, before))


def _set_logging(service: CalibrationService, name: str, data: RequestBody) -> dict:
    return service.observations.set_logging(name, decode_fields(data, LoggingRequest).sample_rate)


@router.put("/calibrators/{name}/logging", summary="Log served predictions (sampling rate)",
            response_model=LoggingOut, responses=problems(400, 404, 415, 422), openapi_extra=body(LoggingRequest),
            dependencies=[WRITE])
async def set_logging(request: Request, name: str = NAME):
    """Keep a `sample_rate` share of the rows `name` calibrates (on `/v1` and `/v2`), with their
    prediction ids, so that labels posted later become observations tied to the serving version."""
    check_name(name)
    return _json(await run_in_threadpool(_set_logging, _service(request), name, await request_body(request)))


@router.get("/calibrators/{name}/logging", summary="The prediction log's state",
            response_model=LoggingOut, responses=problems(404, 422), dependencies=[READ])
async def get_logging(request: Request, name: str = NAME):
    """The sampling rate, the logged rows and their cap (`CALIBRATION_MAX_LOGGED_ROWS`), whether the
    log is full, and the rows it did not take for being full (`dropped_rows`; also
    `calibration_log_dropped_rows_total` in /metrics). A full log never blocks calibrate."""
    return _json(await run_in_threadpool(_service(request).observations.logging, name))


def _label(service: CalibrationService, name: str, data: RequestBody) -> dict:
    check_name(name)
    labels = decode_fields(data, LabelsRequest, service.limits.json_bytes)
    return service.observations.label(name, labels.ids, labels.labels)


@router.post("/calibrators/{name}/labels", summary="Labels of logged predictions", response_model=LabelsOut,
             responses=problems(400, 404, 413, 415, 422), openapi_extra=body(LabelsRequest), dependencies=[WRITE])
async def post_labels(request: Request, name: str = NAME):
    """Turn logged predictions into observations, each tied to the version that served it. Every
    id gets a status: labelled now, unknown, already labelled, or repeated in this request."""
    data = await request_body(request)
    return _json(await admission.run(request, _label, _service(request), name, data))
