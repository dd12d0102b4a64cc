"""The Open Inference Protocol (/v2): server and model metadata, health, and inference."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from ..conformal.service import ConformalService
from ..http import hot_path
from ..http.auth import READ
from ..http.body import query_parameter, read_body
from ..http.health import readiness
from ..http.parts import PartsResponse
from ..monitoring.schemas import V2InferResponse, V2Live, V2ModelMetadata, V2ModelReady, V2Ready, V2ServerMetadata
from ..platform.errors import NotFound
from ..platform.info import SERVER_NAME, server_version
from ..prediction_log.service import log_served
from ..registry.names import Reference, check_servable, is_alias, is_name
from ..registry.service import CalibrationService
from ..wire.codecs import dump_json
from . import protocol as oip

router = APIRouter(prefix="/v2", tags=["open inference protocol"])
MODEL = Path(description="Calibrator name, or `name@alias`", examples=["demo", "demo@production"])
VERSION = Path(description="Version number (as a string) or an alias", examples=["1", "production"])
EXTENSIONS = ["binary_tensor_data"]


def _reference(name: str, version: str | None = None) -> Reference:
    """A model name (and version, a string on this protocol) as a reference; a name or version
    that cannot exist is a 404 here, as the protocol has no 422. A version is ASCII digits only
    (``str.isdigit`` also takes '١' and '²', which ``int`` reads as 1 or refuses), or an alias
    (``versions/production``); a name may carry an alias (``demo@production``). Unversioned, it is
    what the calibrator's settings say (``PUT /v1/calibrators/{name}/serving``: latest by default)."""
    model, at, alias = name.partition("@")
    if not is_name(model) or (at and not is_alias(alias)):
        raise NotFound(f"no model named {name[:80]!r}")
    if at and version is not None:
        raise NotFound(f"model {name[:80]!r} names an alias: ask for /v2/models/{model}/versions/{alias}")
    if at:
        return Reference(model, alias=alias)
    if version is None:
        return Reference(model, v2_default=True)
    if is_alias(version):
        return Reference(model, alias=version)
    if not (version.isascii() and version.isdigit()) or len(version) > 10 or not 0 < int(version) < 2**31:
        raise NotFound(f"no model version {version[:80]!r}")
    return Reference(model, version=int(version))


def _serving(service: CalibrationService, reference: Reference, version: str | None):
    """The loaded version; a missing alias given as the version is the protocol's 'no model version'."""
    try:
        return service.serving(reference)
    except NotFound as exc:
        if version is not None and reference.alias is not None:
            raise NotFound(f"no model version {version[:80]!r} ({exc})") from exc
        raise


@router.get("", summary="Server metadata",
            response_model=V2ServerMetadata)
@router.get("/", include_in_schema=False)
async def server_metadata():
    return {"name": SERVER_NAME, "version": server_version(), "extensions": EXTENSIONS}


@router.get("/health/live", summary="Server liveness",
            response_model=V2Live)
async def live():
    return {"live": True}


@router.get("/health/ready", summary="Server readiness",
            response_model=V2Ready, responses={503: {"description": "Not ready"}})
async def ready(request: Request):
    status, _ = await run_in_threadpool(readiness, request.app.state.db.engine)
    return JSONResponse({"ready": status == 200}, status_code=status)


def _metadata(service: CalibrationService, conformal: ConformalService, name: str, version: str | None = None) -> bytes:
    reference = _reference(name, version)
    loaded = _serving(service, reference, version)
    described = service.model_metadata(reference)
    metadata = oip.model_metadata(**{**described, "name": name})
    if conformal.levels(loaded):  # the version has prediction sets: the output `set` (parameter `coverage`)
        metadata["outputs"].append({"name": oip.SET_OUTPUT, "datatype": "BOOL", "shape": [-1, described["n_classes"]]})
    return dump_json(metadata)


@router.get("/models/{name}", summary="Model metadata (latest version, or the calibrator's /v2 default)",
            response_model=V2ModelMetadata,
            dependencies=[READ])
async def model(request: Request, name: str = MODEL):
    return Response(await run_in_threadpool(_metadata, request.app.state.service, request.app.state.conformal, name),
                    media_type="application/json")


@router.get("/models/{name}/versions/{version}", summary="Model version metadata",
            response_model=V2ModelMetadata, dependencies=[READ])
async def model_version(request: Request, name: str = MODEL, version: str = VERSION):
    metadata = await run_in_threadpool(_metadata, request.app.state.service, request.app.state.conformal, name,
                                       version)
    return Response(metadata, media_type="application/json")


def _ready(service: CalibrationService, name: str, version: str | None = None) -> dict:
    return {"name": name, "version": str(_serving(service, _reference(name, version), version).version),
            "ready": True}


@router.get("/models/{name}/ready", summary="Model readiness (latest version, or the calibrator's /v2 default)",
            response_model=V2ModelReady,
            dependencies=[READ])
async def model_ready(request: Request, name: str = MODEL):
    return await run_in_threadpool(_ready, request.app.state.service, name)


@router.get("/models/{name}/versions/{version}/ready", summary="Model version readiness",
            response_model=V2ModelReady, dependencies=[READ])
async def model_version_ready(request: Request, name: str = MODEL, version: str = VERSION):
    return await run_in_threadpool(_ready, request.app.state.service, name, version)


def _infer(service: CalibrationService, name: str, version: str | None, body: bytes, header_length: str | None,
           dtype: str | None, conformal: ConformalService):
    loaded = _serving(service, check_servable(_reference(name, version)), version)
    request = oip.parse_request(body, header_length, service.limits)
    sets = None
    coverage = request.coverage
    # chosen before anything is logged: a missing level is a 404 (parse_request refuses a set without a coverage)
    if request.wants_sets() and coverage is not None:
        chosen, predictor = conformal.predictor_for(loaded, coverage, request.set_predictor)
        sets = chosen, lambda probabilities: conformal.mask(predictor, probabilities, coverage, chosen)

    def log(array, ids):
        return log_served(service.prediction_log, loaded, loaded.calibrator.input, array, ids)

    return oip.infer(loaded.calibrator, request, loaded.tensor_names, name, loaded.version,
                     service.device.predict, log, dtype, sets)


INFER_DOC = {
    "requestBody": {"required": True, "content": {
        "application/json": {"schema": {"type": "object"}, "example": {
            "id": "42", "inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP32",
                                    "data": [[2.0, 0.5, -1.0]]}],
            "outputs": [{"name": "probabilities"}, {"name": "predicted_class"}]}},
        "application/octet-stream": {"schema": {"type": "string", "format": "binary",
                                                "description": "JSON header (Inference-Header-Content-Length "
                                                               "bytes) followed by binary tensors"}}}},
    "parameters": [{"name": "dtype", "in": "query", "required": False,
                    "schema": {"type": "string", "enum": ["float32", "float64"]},
                    "description": "Datatype of the probabilities and confidence: FP32 or FP64. Default: FP64 "
                                   "for an FP64 input, FP32 for FP32 and FP16. Computed in float64 either way; "
                                   "only the answer is cast."}],
}


@router.post("/models/{name}/infer", summary="Inference (latest version, or the calibrator's /v2 default)",
            response_model=V2InferResponse,
             openapi_extra=INFER_DOC, dependencies=[READ])
async def infer(request: Request, name: str = MODEL):
    body = await read_body(request)
    content, headers = await hot_path.run(request, _infer, request.app.state.service, name, None, body,
                                          request.headers.get(oip.HEADER_LENGTH),
                                          query_parameter(request, "dtype"), request.app.state.conformal)
    return PartsResponse(content, headers=headers, media_type=headers["content-type"])


@router.post("/models/{name}/versions/{version}/infer", summary="Inference (pinned version or alias)",
            response_model=V2InferResponse,
             openapi_extra=INFER_DOC, dependencies=[READ])
async def infer_version(request: Request, name: str = MODEL, version: str = VERSION):
    body = await read_body(request)
    content, headers = await hot_path.run(request, _infer, request.app.state.service, name, version,
                                          body, request.headers.get(oip.HEADER_LENGTH),
                                          query_parameter(request, "dtype"), request.app.state.conformal)
    return PartsResponse(content, headers=headers, media_type=headers["content-type"])
