"""The native API (/v1): calibrators, versions, aliases, calibrate and report."""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from starlette.responses import Response

from ..access import keys
from ..conformal.service import ConformalService
from ..http import admission, hot_path
from ..http.auth import ADMIN, READ, WRITE, presented_key
from ..http.body import read_body
from ..http.idempotent import idempotent
from ..http.openapi import RouteDoc, body, problems
from ..http.parts import PartsResponse
from ..jobs.schemas import JobOut
from ..promotion.schemas import AliasMoveRequest
from ..wire.codecs import dump_json
from ..wire.decoding import JSON_TYPE, NPY_TYPE, NPZ_TYPE, RequestBody, decode_fields, decode_values
from ..wire.encoding import Parts, calibrated_body, calibrated_headers, image_format, wants
from . import store
from .names import Reference, check_alias, check_name, check_servable
from .schemas import (
    AliasOut,
    CalibrateFields,
    CalibrateOut,
    CalibrateRequest,
    CalibratorList,
    CalibratorOut,
    EvaluationFields,
    FitFields,
    FitRequest,
    ReportOut,
    ReportRequest,
    VersionList,
    VersionOut,
)
from .service import CalibrationService

router = APIRouter(prefix="/v1", tags=["calibrators"])

NAME = Path(description="Calibrator name", examples=["demo"])
REF = Path(description="`name` (latest version) or `name@alias`", examples=["demo", "demo@production"])
VERSION = Path(ge=1, le=2**31 - 1, description="Version number", examples=[1])
ALIAS = Path(description="Alias, e.g. production", examples=["production"])
PAGE_SIZE = Query(50, ge=1, le=store.MAX_PAGE_SIZE)
PAGE_TOKEN = Query(None, max_length=1000)


def _service(request: Request) -> CalibrationService:
    return request.app.state.service


def _json(value, status: int = 200, headers: dict | None = None) -> Response:
    return Response(dump_json(value), status_code=status, media_type=JSON_TYPE, headers=headers)


async def request_body(request: Request) -> RequestBody:
    """The body (read under the size limit) with the Content-Type and query that say how to
    decode it."""
    return RequestBody(await read_body(request), request.headers.get("content-type"), dict(request.query_params))


def prefers_async(request: Request) -> bool:
    return "respond-async" in request.headers.get("prefer", "").lower()


def job_accepted(job: dict) -> Response:
    """``202 Accepted`` with the job to poll at ``Location``."""
    return Response(dump_json(job), status_code=202, media_type=JSON_TYPE,
                    headers={"Location": f"/v1/jobs/{job['id']}", "Preference-Applied": "respond-async"})


def _fit(service: CalibrationService, name: str, body: RequestBody, asked_async: bool) -> tuple[bool, dict]:
    """``(True, job)`` when the fit runs as a job, else ``(False, the stored version)``."""
    check_name(name)
    batch = decode_values(body, FitFields, need_labels=True, limits=service.limits)
    return service.fit_or_submit(name, batch, asked_async)


def _calibrate(service: CalibrationService, reference: Reference, body: RequestBody,
               accept: str | None, conformal: ConformalService) -> tuple[bytes | Parts, str, dict]:
    loaded = service.serving(check_servable(reference))
    batch = decode_values(body, CalibrateFields, need_labels=False, limits=service.limits,
                         npy_kind=loaded.calibrator.input)
    fields = batch.fields  # the set predictor is chosen before anything is logged
    chosen = conformal.for_calibrate(loaded, fields.outputs, fields.coverage, fields.set_predictor,
                                     wants(accept, NPY_TYPE))
    result = service.calibrate(loaded, batch)
    coverage = fields.coverage
    if chosen is not None and coverage is not None:  # (for_calibrate chooses a predictor only with a coverage)
        result = replace(result, sets=conformal.mask(chosen[1], result.probabilities, coverage, chosen[0]),
                         set_predictor=chosen[0], coverage=coverage)
    return *calibrated_body(result, batch.fields.outputs, accept, batch.fields.dtype), calibrated_headers(result)


async def calibrate_body(request: Request) -> RequestBody:
    """A calibrate request's body; for a binary body the prediction ids may come as the ``ids``
    query parameter or the ``Prediction-Ids`` header (comma-separated)."""
    body = await request_body(request)
    header = request.headers.get("prediction-ids")
    if header is None or "ids" in body.query:
        return body
    return RequestBody(body.content, body.content_type, {**body.query, "ids": header})


def _report(service: CalibrationService, reference: Reference, body: RequestBody,
            accept: str | None) -> tuple[bytes, str]:
    loaded = service.serving(reference)
    batch = decode_values(body, EvaluationFields, need_labels=True, limits=service.limits,
                         npy_kind=loaded.calibrator.input)
    image = image_format(accept)
    if image is not None:
        media, fmt = image
        return service.reliability_figure(loaded, batch, fmt), media
    return dump_json(service.report(loaded, batch)), JSON_TYPE


def actor_of(request: Request) -> str | None:
    """Who acts: the id of the request's API key when keys are on (checked by the scope's
    dependency before this runs), else ``None``."""
    match = keys.KEY_PATTERN.match(presented_key(request) or "") if request.app.state.keys else None
    return match.group(1) if match else None


def _set_alias(service: CalibrationService, name: str, alias: str, body: RequestBody, actor: str | None) -> dict:
    check_alias(alias)
    request = decode_fields(body, AliasMoveRequest)
    return service.set_alias(name, alias, request.version, request.evaluation, actor)


@router.post(
    "/calibrators/{name}/versions",
    status_code=201,
    summary="Fit a new version",
    response_model=VersionOut,
    responses={**problems(400, 404, 409, 413, 415, 422),
               202: {"model": JobOut, "description": "A job to poll at Location: with `Prefer: respond-async`, "
                                                     "or when the fit is estimated to take longer than the sync "
                                                     "budget"}},
    openapi_extra=body(FitRequest, NPZ_TYPE),
    dependencies=[WRITE],
)
async def fit(request: Request, name: str = NAME):
    """Fit `method` on the labelled arrays and store it as the next version of `name` (created on
    first fit). Returns the version with its parameters, fit diagnostics and a validation report
    (metrics before and after calibration on the fitting data). A long fit (or any, with
    `Prefer: respond-async`) answers `202` with a job whose result is the version. With an
    `Idempotency-Key` header a retried request gets the first one's answer, not a second version."""
    data = await request_body(request)

    async def answer() -> Response:
        as_job, value = await admission.run(request, _fit, _service(request), name, data, prefers_async(request))
        if as_job:
            return job_accepted(value)
        return _json(value, 201, {"Location": f"/v1/calibrators/{name}/versions/{value['version']}",
                                  "ETag": f'"{value["checksum"]}"'})

    return await idempotent(request, data, answer)


@router.get("/calibrators", summary="List calibrators", response_model=CalibratorList,
            responses=problems(422), dependencies=[READ])
async def list_calibrators(request: Request, page_size: int = PAGE_SIZE, page_token: str | None = PAGE_TOKEN):
    return _json(await run_in_threadpool(_service(request).list_calibrators, page_size, page_token))


@router.get("/calibrators/{name}", summary="Get a calibrator", response_model=CalibratorOut,
            responses=problems(404, 422), dependencies=[READ])
async def get_calibrator(request: Request, name: str = NAME):
    check_name(name)
    return _json(await run_in_threadpool(_service(request).get_calibrator, name))


@router.delete("/calibrators/{name}", status_code=204, summary="Delete a calibrator and all its versions",
               responses=problems(404, 422), dependencies=[ADMIN])
async def delete_calibrator(request: Request, name: str = NAME):
    check_name(name)
    await run_in_threadpool(_service(request).delete_calibrator, name)
    return Response(status_code=204)


@router.get("/calibrators/{name}/versions", summary="List versions, newest first",
            response_model=VersionList, responses=problems(404, 422), dependencies=[READ])
async def list_versions(request: Request, name: str = NAME, page_size: int = PAGE_SIZE,
                        page_token: str | None = PAGE_TOKEN):
    check_name(name)
    return _json(await run_in_threadpool(_service(request).list_versions, name, page_size, page_token))


@router.get("/calibrators/{name}/versions/{version}", summary="Get a version", response_model=VersionOut,
            responses={304: {"description": "Not modified (If-None-Match)"}, **problems(404, 422)}, dependencies=[READ])
async def get_version(request: Request, name: str = NAME, version: int = VERSION):
    check_name(name)
    view = await run_in_threadpool(_service(request).get_version, name, version)
    etag = f'"{view["checksum"]}"'
    if request.headers.get("if-none-match") in (etag, "*"):
        return Response(status_code=304, headers={"ETag": etag})
    return _json(view, headers={"ETag": etag})


@router.delete("/calibrators/{name}/versions/{version}", status_code=204, summary="Delete a version",
               responses=problems(404, 409, 422), dependencies=[ADMIN])
async def delete_version(request: Request, name: str = NAME, version: int = VERSION):
    check_name(name)
    await run_in_threadpool(_service(request).delete_version, name, version)
    return Response(status_code=204)


@router.put("/calibrators/{name}/aliases/{alias}", summary="Point an alias at a version",
            response_model=AliasOut, responses=problems(400, 404, 409, 415, 422),
            openapi_extra=body(AliasMoveRequest), dependencies=[WRITE])
async def set_alias(request: Request, name: str = NAME, alias: str = ALIAS):
    """Move (or create) the alias; the move is recorded (`GET .../history`). An alias whose gate
    requires evidence moves only with `evaluation`: an evaluation whose verdict favours `version`
    over the alias's current version, else 409 with the reason."""
    check_name(name)
    return _json(await run_in_threadpool(_set_alias, _service(request), name, alias, await request_body(request),
                                         actor_of(request)))


@router.delete("/calibrators/{name}/aliases/{alias}", status_code=204, summary="Delete an alias",
               responses=problems(404, 409, 422), dependencies=[WRITE])
async def delete_alias(request: Request, name: str = NAME, alias: str = ALIAS):
    check_name(name)
    check_alias(alias)
    await run_in_threadpool(_service(request).delete_alias, name, alias, actor_of(request))
    return Response(status_code=204)


CALIBRATE_DOC = RouteDoc(
    response_model=CalibrateOut,
    responses={200: {"content": {NPY_TYPE: {}},
                     "description": "Calibrated probabilities (JSON, or .npy with `Accept: application/x-npy`). "
                                    "An .npy answer is in the question's precision: float32 for a float32 (or "
                                    "float16) .npy/.npz body, float64 otherwise; `dtype` (`?dtype=float64`) asks "
                                    "for the other. Computed in float64 either way; only the answer is cast."},
               **problems(400, 404, 413, 415, 422)},
    openapi_extra={**body(CalibrateRequest, NPY_TYPE),
                   "parameters": [{"name": "dtype", "in": "query", "required": False,
                                   "schema": {"type": "string", "enum": ["float32", "float64"]},
                                   "description": "Precision of the probabilities (with a binary body; in a "
                                                  "JSON body, the `dtype` field). Default: the question's for "
                                                  "an .npy answer, float64 for JSON."}]},
)
REPORT_DOC = RouteDoc(
    response_model=ReportOut,
    responses={200: {"content": {"image/png": {}, "image/svg+xml": {}},
                     "description": "Metrics before and after calibration, or a reliability diagram "
                                    "(`Accept: image/png` or `image/svg+xml`)"},
               **problems(400, 404, 413, 415, 422)},
    openapi_extra=body(ReportRequest, NPZ_TYPE),
)


@router.post("/calibrators/{ref}/calibrate", summary="Calibrate a batch (latest or alias)", **CALIBRATE_DOC,
             dependencies=[READ])
async def calibrate(request: Request, ref: str = REF):
    content, media, headers = await hot_path.run(request, _calibrate, _service(request), Reference.parse(ref),
                                                 await calibrate_body(request), request.headers.get("accept"),
                                                 request.app.state.conformal)
    return PartsResponse(content, media_type=media, headers=headers)


@router.post("/calibrators/{name}/versions/{version}/calibrate", summary="Calibrate a batch (pinned version)",
             **CALIBRATE_DOC, dependencies=[READ])
async def calibrate_version(request: Request, name: str = NAME, version: int = VERSION):
    content, media, headers = await hot_path.run(request, _calibrate, _service(request),
                                                 Reference.pinned(name, version), await calibrate_body(request),
                                                 request.headers.get("accept"), request.app.state.conformal)
    return PartsResponse(content, media_type=media, headers=headers)


@router.post("/calibrators/{ref}/report", summary="Report on a labelled batch (latest or alias)", **REPORT_DOC,
             dependencies=[READ])
async def report(request: Request, ref: str = REF):
    content, media = await admission.run(request, _report, _service(request), Reference.parse(ref),
                                         await request_body(request), request.headers.get("accept"))
    return Response(content, media_type=media)


@router.post("/calibrators/{name}/versions/{version}/report", summary="Report on a labelled batch (pinned)",
             **REPORT_DOC, dependencies=[READ])
async def report_version(request: Request, name: str = NAME, version: int = VERSION):
    content, media = await admission.run(request, _report, _service(request), Reference.pinned(name, version),
                                         await request_body(request), request.headers.get("accept"))
    return Response(content, media_type=media)


# FastAPI tries routes in order (the ten ahead of calibrate cost ~35 µs a request): the calibrate
# routes go first. /docs keeps the order written here (openapi.document_common_errors).
DOCS_ORDER = [route.path for route in router.routes if isinstance(route, APIRoute)]  # (all of them are)
router.routes.sort(key=lambda route: not (isinstance(route, APIRoute) and route.path.endswith("/calibrate")))
