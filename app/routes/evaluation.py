"""Stateless endpoints: metrics of a labelled batch, method comparison (in the request or as a
background job), and the methods the core offers."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

import calibration as cal

from ..codecs import dump_json
from ..decoding import JSON_TYPE, NPZ_TYPE, RequestBody, decode_batch
from ..schemas import (
    CompareFields,
    CompareOut,
    CompareRequest,
    EvaluationFields,
    JobOut,
    MethodList,
    MetricsOut,
    MetricsRequest,
)
from ..service import CalibrationService
from .auth import READ
from .calibrators import request_body
from .openapi import body, problems

router = APIRouter(prefix="/v1", tags=["evaluation"])
METHODS_BODY = dump_json({"methods": cal.describe_methods()})


def _metrics(service: CalibrationService, body: RequestBody) -> bytes:
    batch = decode_batch(body, EvaluationFields, need_labels=True, max_bytes=service.max_body_bytes)
    return dump_json(service.metrics(batch))


def _compare(service: CalibrationService, body: RequestBody, in_background: bool) -> dict:
    batch = decode_batch(body, CompareFields, need_labels=True, max_bytes=service.max_body_bytes)
    return service.start_comparison_job(batch) if in_background else service.compare(batch)


@router.post("/metrics", summary="Metrics of a labelled batch (no calibrator)", response_model=MetricsOut,
             responses=problems(400, 413, 415, 422), openapi_extra=body(MetricsRequest, NPZ_TYPE), dependencies=[READ])
async def metrics(request: Request):
    """ECE, MCE, adaptive and classwise ECE, KDE-ECE, Brier, NLL, accuracy, mean confidence and
    the expectation-consistency gap, with reliability bins and optional bootstrap intervals."""
    content = await run_in_threadpool(_metrics, request.app.state.service, await request_body(request))
    return Response(content, media_type=JSON_TYPE)


@router.get("/methods", summary="Calibration methods and their options", response_model=MethodList, dependencies=[READ])
async def methods():
    return Response(METHODS_BODY, media_type=JSON_TYPE)


@router.post(
    "/compare",
    summary="Compare methods by cross-validation (stores nothing)",
    response_model=CompareOut,
    responses={**problems(400, 413, 415, 422),
               202: {"model": JobOut, "description": "With `Prefer: respond-async`: a job to poll at Location"}},
    openapi_extra=body(CompareRequest, NPZ_TYPE),
    dependencies=[READ],
)
async def compare(request: Request):
    """Stratified K-fold cross-validation of candidate methods on a labelled batch: per candidate
    the mean and sd across folds of NLL, Brier, ECE, KDE-ECE, calibration gain, accuracy change and
    fit time, and the method the selection rule picks (lowest cross-validated NLL; Mix-n-Match
    guideline order among ties) with its reason. Long comparisons: send `Prefer: respond-async`
    to get `202` and a job at `/v1/jobs/{id}` that reports percent done."""
    in_background = "respond-async" in request.headers.get("prefer", "").lower()
    result = await run_in_threadpool(_compare, request.app.state.service, await request_body(request), in_background)
    if in_background:
        return Response(dump_json(result), status_code=202, media_type=JSON_TYPE,
                        headers={"Location": f"/v1/jobs/{result['id']}", "Preference-Applied": "respond-async"})
    return Response(dump_json(result), media_type=JSON_TYPE)


@router.get("/jobs/{job_id}", summary="A background job: status, percent done, result",
            response_model=JobOut, responses=problems(404), dependencies=[READ])
async def job(request: Request, job_id: str):
    return Response(dump_json(await run_in_threadpool(request.app.state.service.get_job, job_id)),
                    media_type=JSON_TYPE)
