"""Set predictors of calibrator versions (/v1): fit, list, get, delete. Their sets are served by
``calibrate`` (``outputs: ["set"]``, ``app.registry.routes``) and ``/v2`` (output ``set``, ``app.oip.routes``)."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from ..http import admission
from ..http.auth import ADMIN, READ, WRITE
from ..http.idempotent import idempotent
from ..http.openapi import body, problems
from ..registry.names import check_name
from ..wire.codecs import dump_json
from ..wire.decoding import JSON_TYPE, NPZ_TYPE, RequestBody, decode_values
from .schemas import SetPredictorFields, SetPredictorList, SetPredictorOut, SetPredictorRequest
from .service import ConformalService

router = APIRouter(prefix="/v1", tags=["prediction sets"])

NAME = Path(description="Calibrator name", examples=["demo"])
VERSION = Path(ge=1, le=2**31 - 1, description="Version number", examples=[1])
PREDICTOR = Path(ge=1, le=2**31 - 1, description="Set predictor id", examples=[1])
BASE = "/calibrators/{name}/versions/{version}/set-predictors"


def _service(request: Request) -> ConformalService:
    return request.app.state.conformal


def _json(value, status: int = 200, headers: dict | None = None) -> Response:
    return Response(dump_json(value), status_code=status, media_type=JSON_TYPE, headers=headers)


def _fit(service: ConformalService, name: str, version: int, data: RequestBody) -> dict:
    check_name(name)
    batch = decode_values(data, SetPredictorFields, need_labels=True, limits=service.registry.limits)
    return service.fit(name, version, batch)


@router.post(BASE, status_code=201, summary="Fit a set predictor (conformal prediction sets) of a version",
             response_model=SetPredictorOut, responses=problems(400, 404, 413, 415, 422),
             openapi_extra=body(SetPredictorRequest, NPZ_TYPE), dependencies=[WRITE])
async def fit_set_predictor(request: Request, name: str = NAME, version: int = VERSION):
    """Split conformal on held-out labelled rows (`logits`/`probabilities` and `labels`, or `data`: the
    calibrator's stored observations), calibrated by this version: one threshold per `coverage` level
    (the ceil((n + 1) * coverage)-th smallest score of the n rows), per class when `class_conditional`.
    Too few rows for a level is a 422 saying how many it needs. Sets are then served by `calibrate` with
    `outputs: ["set"]` and a `coverage`. The rows must not be those the calibrator was fitted on."""
    data = RequestBody(await request.body(), request.headers.get("content-type"), dict(request.query_params))

    async def answer() -> Response:
        value = await admission.run(request, _fit, _service(request), name, version, data)
        return _json(value, 201, {"Location": f"/v1/calibrators/{name}/versions/{version}/set-predictors/"
                                              f"{value['id']}"})

    return await idempotent(request, data, answer)


@router.get(BASE, summary="List a version's set predictors, newest first", response_model=SetPredictorList,
            responses=problems(404, 422), dependencies=[READ])
async def list_set_predictors(request: Request, name: str = NAME, version: int = VERSION):
    check_name(name)
    return _json(await run_in_threadpool(_service(request).list, name, version))


@router.get(BASE + "/{predictor}", summary="Get a set predictor", response_model=SetPredictorOut,
            responses=problems(404, 422), dependencies=[READ])
async def get_set_predictor(request: Request, name: str = NAME, version: int = VERSION,
                            predictor: int = PREDICTOR):
    check_name(name)
    return _json(await run_in_threadpool(_service(request).get, name, version, predictor))


@router.delete(BASE + "/{predictor}", status_code=204, summary="Delete a set predictor",
               responses=problems(404, 422), dependencies=[ADMIN])
async def delete_set_predictor(request: Request, name: str = NAME, version: int = VERSION,
                               predictor: int = PREDICTOR):
    check_name(name)
    await run_in_threadpool(_service(request).delete, name, version, predictor)
    return Response(status_code=204)
