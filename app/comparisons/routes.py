"""Stateless endpoints: metrics of a labelled batch, method comparison (in the request or as a
background job), and the methods the core offers."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

import calibration as cal

from ..http import admission
from ..http.auth import READ, WRITE
from ..http.idempotent import idempotent
from ..http.openapi import body, problems
from ..jobs.runner import JobRunner
from ..jobs.schemas import JobList, JobOut
from ..jobs.status import JobState
from ..registry.routes import job_accepted, prefers_async, request_body
from ..registry.schemas import EvaluationFields, MethodList, MetricsOut, MetricsRequest
from ..registry.service import CalibrationService
from ..wire.codecs import dump_json
from ..wire.decoding import JSON_TYPE, NPZ_TYPE, RequestBody, decode_values
from .schemas import CompareFields, CompareOut, CompareRequest
from .service import Comparisons

router = APIRouter(prefix="/v1", tags=["evaluation"])
METHODS_BODY = dump_json({"methods": cal.describe_methods()})
JOB_STATUS = Query(None)  # a JobState or none


def jobs_of(request: Request) -> JobRunner:
    return request.app.state.service.jobs


def _metrics(service: CalibrationService, body: RequestBody) -> bytes:
    batch = decode_values(body, EvaluationFields, need_labels=True, limits=service.limits)
    return dump_json(service.metrics(batch))


def _compare(service: CalibrationService, body: RequestBody, asked_async: bool) -> tuple[bool, dict]:
    """``(True, job)`` when the comparison runs as a job, else ``(False, the comparison)``."""
    batch = decode_values(body, CompareFields, need_labels=True, limits=service.limits)
    return Comparisons(service).compare_or_submit(batch, asked_async)


@router.post("/metrics", summary="Metrics of a labelled batch (no calibrator)", response_model=MetricsOut,
             responses=problems(400, 413, 415, 422), openapi_extra=body(MetricsRequest, NPZ_TYPE), dependencies=[READ])
async def metrics(request: Request):
    """ECE, MCE, adaptive and classwise ECE, KDE-ECE, Brier, NLL, accuracy, mean confidence and
    the expectation-consistency gap, with reliability bins and optional bootstrap intervals."""
    content = await admission.run(request, _metrics, request.app.state.service, await request_body(request))
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
    data = await request_body(request)

    async def answer() -> Response:
        as_job, value = await admission.run(request, _compare, request.app.state.service, data, prefers_async(request))
        return job_accepted(value) if as_job else Response(dump_json(value), media_type=JSON_TYPE)

    return await idempotent(request, data, answer)


@router.get("/jobs", summary="List jobs, newest first", response_model=JobList, responses=problems(422),
            dependencies=[READ])
async def jobs(request: Request, calibrator: str | None = Query(None, max_length=128),
               status: JobState | None = JOB_STATUS, limit: int = Query(100, ge=1, le=1000)):
    listed = {"jobs": await run_in_threadpool(jobs_of(request).list, calibrator, status, limit)}
    return Response(dump_json(listed), media_type=JSON_TYPE)


@router.get("/jobs/{job_id}", summary="A background job: status, step, percent done, result",
            response_model=JobOut, responses=problems(404), dependencies=[READ])
async def job(request: Request, job_id: str):
    return Response(dump_json(await run_in_threadpool(jobs_of(request).get, job_id)),
                    media_type=JSON_TYPE)


@router.delete("/jobs/{job_id}", summary="Cancel a job", response_model=JobOut, responses=problems(404),
               dependencies=[WRITE])
async def cancel_job(request: Request, job_id: str):
    """A queued job is cancelled at once; a running one stops at its next progress point (its
    state says `cancelled` then). A finished job is left as it is."""
    return Response(dump_json(await run_in_threadpool(jobs_of(request).cancel, job_id)),
                    media_type=JSON_TYPE)
