"""Stateless endpoints: metrics of a labelled batch, and the methods the core offers."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

import calibration as cal

from ..codecs import JSON_TYPE, NPZ_TYPE, dump_json
from ..openapi import body, problems
from ..schemas import MethodList, MetricsOut, MetricsRequest
from .calibrators import incoming

router = APIRouter(prefix="/v1", tags=["evaluation"])
METHODS_BODY = dump_json({"methods": cal.describe_methods()})


@router.post("/metrics", summary="Metrics of a labelled batch (no calibrator)", response_model=MetricsOut,
             responses=problems(400, 413, 415, 422), openapi_extra=body(MetricsRequest, NPZ_TYPE))
async def metrics(request: Request):
    """ECE, MCE, adaptive and classwise ECE, KDE-ECE, Brier, NLL, accuracy, mean confidence and
    the expectation-consistency gap, with reliability bins and optional bootstrap intervals."""
    content = await run_in_threadpool(request.app.state.service.metrics, await incoming(request))
    return Response(content, media_type=JSON_TYPE)


@router.get("/methods", summary="Calibration methods and their options", response_model=MethodList)
async def methods():
    return Response(METHODS_BODY, media_type=JSON_TYPE)
