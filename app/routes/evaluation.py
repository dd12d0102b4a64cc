"""Stateless endpoints: metrics of a labelled batch, method comparison (in the request or as a
background job), and the methods the core offers."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

import calibration as cal

from ..auth import READ
from ..codecs import JSON_TYPE, NPZ_TYPE, dump_json
from ..openapi import body, problems
from ..schemas import CompareOut, CompareRequest, JobOut, MethodList, MetricsOut, MetricsRequest
from .calibrators import incoming

router = APIRouter(prefix="/v1", tags=["evaluation"])
METHODS_BODY = dump_json({"methods": cal.describe_methods()})


@router.post("/metrics", summary="Metrics of a labelled batch (no calibrator)", response_model=MetricsOut,
             responses=problems(400, 413, 415, 422), openapi_extra=body(MetricsRequest, NPZ_TYPE), dependencies=[READ])
async def metrics(request: Request):
    """ECE, MCE, adaptive and classwise ECE, KDE-ECE, Brier, NLL, accuracy, mean confidence and
    the expectation-consistency gap, with reliability bins and optional bootstrap intervals."""
    content = await run_in_threadpool(request.app.state.service.metrics, await incoming(request))
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
    service = request.app.state.service
    data = await incoming(request)
    if "respond-async" in request.headers.get("prefer", "").lower():
        job = await run_in_threadpool(service.start_compare_job, data)
        return Response(dump_json(job), status_code=202, media_type=JSON_TYPE,
                        headers={"Location": f"/v1/jobs/{job['id']}", "Preference-Applied": "respond-async"})
    return Response(dump_json(await run_in_threadpool(service.compare, data)), media_type=JSON_TYPE)


@router.get("/jobs/{job_id}", summary="A background job: status, percent done, result",
            response_model=JobOut, responses=problems(404), dependencies=[READ])
async def job(request: Request, job_id: str):
    return Response(dump_json(await run_in_threadpool(request.app.state.service.get_job, job_id)),
                    media_type=JSON_TYPE)
