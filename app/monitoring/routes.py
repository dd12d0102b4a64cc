"""Calibration quality over time (/v1): metrics per window of stored observations,
the anytime-valid drift alarms and their evaluation, and the label-shift estimate from the
prediction log."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from ..http import admission
from ..http.auth import READ, WRITE
from ..http.openapi import body, problems
from ..jobs.schemas import JobOut
from ..registry.routes import NAME, _json, job_accepted, request_body
from ..registry.service import CalibrationService
from ..wire.decoding import decode_fields
from ..wire.encoding import image_format
from . import alarms as drift_alarms
from . import power, quality, webhooks
from .power_schemas import PowerRequest
from .schemas import AlarmsOut, DeliveriesOut, LabelShiftOut, QualityOut

router = APIRouter(prefix="/v1", tags=["quality"])
WINDOW = Query("day", max_length=20, description="`hour`, `day` (UTC) or a number of rows per window")
VERSION = Query(None, ge=1, le=2**31 - 1, description="Score every row through this version (default: "
                "each labelled prediction through the version that served it, uploads through the latest)")


def _service(request: Request) -> CalibrationService:
    return request.app.state.service


@router.get("/calibrators/{name}/quality", summary="Calibration quality per time window",
            response_model=QualityOut,
            responses={200: {"content": {"application/json": {}, "image/png": {}, "image/svg+xml": {}},
                             "description": "Metrics per window as JSON, or drawn (`Accept: image/png` or "
                                            "`image/svg+xml`)"}, **problems(404, 406, 413, 422)},
            dependencies=[READ])
async def get_quality(request: Request, name: str = NAME, window: str = WINDOW, version: int | None = VERSION,
                      windows: int = Query(12, ge=1, le=500, description="How many of the newest windows"),
                      bootstrap: int = Query(100, ge=0, le=2000, description="Bootstrap resamples (0: none)"),
                      n_bins: int = Query(15, ge=1, le=1000), confidence: float = Query(0.95, gt=0, lt=1),
                      seed: int = Query(0, ge=0, le=2**31 - 1)):
    """ECE, classwise ECE, KDE-ECE, NLL, Brier, accuracy and mean confidence of the calibrated
    probabilities and of the uncalibrated inputs, per window of the stored observations, each with
    a percentile-bootstrap interval; and the label-free signals of each window (expected accuracy
    = mean calibrated confidence, mean entropy, predicted class distribution). With `Accept:
    image/png` or `image/svg+xml`, the ECEs and accuracy against mean confidence drawn per window."""
    query = quality.QualityQuery(window, version, windows, n_bins, bootstrap, confidence, seed)
    image = image_format(request.headers.get("accept"))
    if image is not None:
        media, fmt = image
        content = await admission.run(request, quality.quality_figure, _service(request), name, query, fmt)
        return Response(content, media_type=media)
    return _json(await admission.run(request, quality.quality, _service(request), name, query))


@router.get("/calibrators/{name}/alarms", summary="Drift alarms and monitors",
            response_model=AlarmsOut, responses=problems(404, 422),
            dependencies=[READ])
async def get_alarms(request: Request, name: str = NAME,
                     drift: float | None = Query(None, gt=0, lt=1, description="A drift of the expected "
                                                 "confidence: label-free monitors say how many reference rows "
                                                 "they need to see it")):
    """Each served version's anytime-valid drift monitors (the e-value on the labelled predictions
    it served, and without labels on its logged predictions against a labelled reference) and the
    alarms raised: a monitor alarms once its e-value reaches its threshold, which under no drift
    happens with probability at most alpha over its whole life, whatever the reference's size (the
    label-free monitor spends half of alpha on the reference's confidence bounds and widens its
    tolerances by them; `reference` says what it can see)."""
    return _json(await run_in_threadpool(drift_alarms.alarms, _service(request).db, name, drift))


@router.post("/calibrators/{name}/alarms/evaluate", summary="Evaluate the drift monitors",
            response_model=AlarmsOut,
             responses=problems(404, 422), dependencies=[WRITE])
async def evaluate_alarms(request: Request, name: str = NAME,
                          alpha: float = Query(0.01, ge=1e-10, lt=1, description="False-alarm probability, ever"),
                          tolerance: float = Query(0.02, ge=0, lt=0.5, description="Drift of mean confidence "
                                                   "minus accuracy that is no alarm"),
                          half_life: float = Query(1000.0, gt=0, le=1e9, description="Rows of the bet's memory"),
                          class_tolerance: float = Query(0.02, ge=0, lt=0.5, description="Drift of a class's "
                                                         "mean probability minus its frequency that is no alarm")):
    """Feed every served version's monitor the labelled rows that arrived since it last ran
    (changed options restart it from the first row) and record new alarms. A monitor bets on two
    things: that mean confidence minus accuracy stays within `tolerance`, and that each class's mean
    probability minus its frequency stays within `class_tolerance` (a label shift breaks this)."""
    return _json(await admission.run(request, drift_alarms.evaluate, _service(request), name, alpha, tolerance,
                                     half_life, class_tolerance, request.app.state.settings.alarm_webhook_url))


@router.get("/calibrators/{name}/alarms/deliveries", summary="Webhook deliveries of the drift alarms",
            response_model=DeliveriesOut, responses=problems(404, 422), dependencies=[READ])
async def get_alarm_deliveries(request: Request, name: str = NAME):
    """Each new alarm is POSTed once to `CALIBRATION_ALARM_WEBHOOK_URL`, whichever evaluation raised
    it: a delivery per alarm, retried with backoff until it is answered 2xx (`delivered`) or its
    attempts run out (`failed`, with the last error)."""
    return _json(await run_in_threadpool(webhooks.deliveries, _service(request).db, name))


@router.get("/calibrators/{name}/label-shift", summary="Label-shift estimate from the prediction log",
            response_model=LabelShiftOut,
            responses=problems(404, 422), dependencies=[READ])
async def get_label_shift(request: Request, name: str = NAME, version: int | None = VERSION,
                          last: int = Query(50_000, ge=1, le=5_000_000, description="Newest logged rows used"),
                          alpha: float = Query(0.05, gt=0, lt=1, description="Level of the test of no prior "
                                               "shift that decides whether to suggest an adjustment")):
    """Production class priors estimated without labels from the logged predictions: EM (Saerens
    et al. 2002) on the calibrated probabilities and BBSE (Lipton et al. 2018), with the priors of
    the labelled observations they shift from, and the label-free signals of the logged rows.
    `suggestion` is what to serve (calibrate with `"priors": suggested_priors`): EM on a
    bias-corrected temperature scaling fitted on the labelled observations (Alexandari et al.
    2020), the likelihood-ratio test of no shift (statistic, degrees of freedom, p-value) and the
    shrinkage `s` toward the source priors, `max(0, 1 - (k-1)/G)` when the test rejects at `alpha`,
    else 0 (`adjust` false: keep serving unadjusted)."""
    return _json(await admission.run(request, quality.label_shift, _service(request), name, version, last, alpha))


def _power(service: CalibrationService, name: str, data, settings) -> dict:
    return power.submit(service, name, decode_fields(data, PowerRequest).to_value(), settings)


@router.post("/calibrators/{name}/power", status_code=202, summary="Power analysis of the drift monitor (a job)",
             response_model=JobOut, responses=problems(400, 404, 409, 413, 415, 422),
             openapi_extra=body(PowerRequest), dependencies=[WRITE])
async def create_power(request: Request, name: str = NAME):
    """How often and how fast the drift monitor of a version would alarm under a shift (the raw
    logits times `size`, one class's prior set to `size`, Dirichlet priors, or `size` class pairs'
    labels swapped), and how often with no shift at all: `streams` streams of up to `labels` rows
    drawn with replacement from the calibrator's own stored labelled observations, fed to the
    monitor the service runs. A `power` job (202, poll `Location`): its result gives, for the
    shifted and the null streams, the detection probability within each checkpoint (Clopper-Pearson
    intervals), quantiles of the labels until the alarm (order-statistic intervals) and the
    expected drift (a drift within the tolerances can never alarm). Example:
    `{"shift": "temperature", "size": 1.25, "labels": 50000}`."""
    settings = request.app.state.settings
    job = await run_in_threadpool(_power, _service(request), name, await request_body(request), settings)
    return job_accepted(job)
