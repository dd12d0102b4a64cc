"""Power analysis of the drift monitors, on domain values: how often and how fast the
monitor of a calibrator's version would alarm under a given shift, and how often without one,
simulated by ``calibration.power`` on that calibrator's own stored labelled observations (the
newest ``CALIBRATION_POWER_ROWS``, uploads if there are any: the rows the label-free monitor also
takes as its reference) through that version, with the monitor code the service runs
(``calibration.monitoring``, ``calibration.label_free``).

``submit`` checks the request against the limits (``CALIBRATION_POWER_MAX_STREAMS``,
``CALIBRATION_POWER_MAX_LABELS``: 422; ``CALIBRATION_POWER_MAX_ENTRIES``, the residuals one run
simulates: 413) and queues a ``power`` job; ``run`` is that job.
"""

from __future__ import annotations

import numpy as np

import calibration as cal

from ..observations import reads as observations
from ..platform.errors import Conflict, InvalidInput, NotFound, TooLarge, refused_as
from ..registry import reads as registry
from ..registry.names import Reference, check_name
from ..registry.serving import Serving
from .power_schemas import PowerRequest


def _index(session, calibrator_id: int, rows: int, budget: int) -> list:
    """The newest ``rows`` labelled observations (uploads if there are any), fewer where over the
    read budget ``CALIBRATION_MAX_READ_ENTRIES``, as the label-free monitor's reference."""
    return observations.newest_within(session, calibrator_id, rows, budget, source="upload") or \
        observations.newest_within(session, calibrator_id, rows, budget)


def submit(service: Serving, name: str, fields: PowerRequest, settings) -> dict:
    """Check ``fields`` against the limits and the calibrator, and queue the ``power`` job."""
    check_name(name)
    if service.jobs is None:
        raise Conflict("this server runs no jobs")
    for value, limit, setting in ((fields.streams, settings.power_max_streams, "CALIBRATION_POWER_MAX_STREAMS"),
                                  (fields.labels, settings.power_max_labels, "CALIBRATION_POWER_MAX_LABELS")):
        if value > limit:
            raise InvalidInput(f"{setting.split('_')[-1].lower()} must be at most {limit} ({setting}), got {value}")
    with service.db.read() as session:
        calibrator = registry.calibrator(session, name)
        version = fields.version or calibrator.last_version
        k = registry.version_classes(session, name, version)
        index = _index(session, calibrator.id, settings.power_rows, service.max_read_entries)
    if not index:
        raise NotFound(f"{name!r} has no labelled observations to simulate streams from")
    k = max(int(k), 2)
    entries = fields.streams * fields.labels * (k + 1)
    if entries > settings.power_max_entries:
        raise TooLarge(f"{fields.streams} streams x {fields.labels} labels x {k + 1} residuals = {entries}, over "
                       f"{settings.power_max_entries} (CALIBRATION_POWER_MAX_ENTRIES): fewer streams or labels")
    with refused_as():
        _shift(fields).check(k)
    request = {**fields.model_dump(mode="json"), "version": version, "rows": settings.power_rows}
    return service.jobs.submit("power", name, request, None)


def _shift(fields: PowerRequest) -> cal.PowerShift:
    return cal.PowerShift(fields.shift, fields.size, fields.shift_class,
                      tuple(fields.swap_classes) if fields.swap_classes else None)


def run(service: Serving, name: str, request: dict, progress) -> dict:
    """The ``power`` job: read the rows, simulate the shifted and the null streams."""
    fields = PowerRequest.model_validate({k: v for k, v in request.items() if k != "rows"})
    version = int(request["version"])
    progress.step(f"reading up to {request['rows']} labelled observations", 2.0)
    with service.db.read() as session:
        calibrator = registry.calibrator(session, name)
        index = _index(session, calibrator.id, int(request["rows"]), service.max_read_entries)
        if not index:
            raise NotFound(f"{name!r} has no labelled observations to simulate streams from")
        inputs, labels = observations.load(session, index)
    kind = index[0].kind
    loaded = service.serving(Reference.pinned(name, version))

    def calibrate(raw: np.ndarray) -> np.ndarray:
        return cal.to_host(service.predict(loaded, cal.validate_inputs(raw, kind)))

    with refused_as():
        result = cal.detection_power(calibrate, inputs, kind, labels, _shift(fields), streams=fields.streams,
                                     max_labels=fields.labels, signal=fields.signal, alpha=fields.alpha,
                                     tolerance=fields.tolerance, class_tolerance=fields.class_tolerance,
                                     half_life=fields.half_life, checkpoints=fields.checkpoints,
                                     confidence=fields.confidence, seed=fields.seed,
                                     progress=lambda step, percent: progress.step(step, 5.0 + 0.9 * percent))
    return {"name": name, "version": version, "input_kind": kind, **result}
