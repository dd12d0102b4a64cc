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

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

import numpy as np

import calibration as cal

from ..observations import reads as observations
from ..platform.errors import Conflict, InvalidInput, NotFound, TooLarge, refused_as
from ..platform.values import entries_of
from ..registry import reads as registry
from ..registry.names import Reference, check_name
from ..registry.serving import Serving

ShiftKind = Literal["temperature", "tweak_one", "dirichlet", "swap"]
Signal = Literal["labelled", "label_free"]
SHIFTS, SIGNALS = get_args(ShiftKind), get_args(Signal)


@dataclass(frozen=True)
class PowerSpec:
    """A power analysis: the ``shift`` of the stored rows (``temperature``, ``tweak_one``, ``dirichlet``
    or ``swap``) of ``size`` (on class ``shift_class``, or the pair ``swap_classes``; ``None``: random
    per stream), the monitor (``signal``: ``labelled`` or ``label_free``, with ``alpha``, ``tolerance``,
    ``class_tolerance`` and ``half_life``) of ``version`` (``None``: the latest), and the simulation:
    ``streams`` streams of at most ``labels`` labels, detection also within each of ``checkpoints``,
    intervals at level ``confidence``, drawn with ``seed``. Also the ``power`` job's request."""

    shift: ShiftKind
    size: float
    shift_class: int | None = None
    swap_classes: tuple[int, int] | None = None
    signal: Signal = "labelled"
    version: int | None = None
    streams: int = 200
    labels: int = 50_000
    checkpoints: list[int] | None = None
    alpha: float = 0.01
    tolerance: float = 0.02
    class_tolerance: float = 0.02
    half_life: float = 1000.0
    confidence: float = 0.95
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The analysis as JSON (``swap_classes`` as a list), as the job keeps its request."""
        entries = asdict(self)
        if self.swap_classes is not None:
            entries["swap_classes"] = list(self.swap_classes)
        return entries

    @classmethod
    def from_dict(cls, data: Any, where: str = "a stored power request") -> PowerSpec:
        """The analysis of a ``to_dict`` dict; ``ValueError`` naming the field when it is damaged."""
        return cls(**entries_of(cls, data, where))


def _index(session, calibrator_id: int, rows: int, budget: int) -> list:
    """The newest ``rows`` labelled observations (uploads if there are any), fewer where over the
    read budget ``CALIBRATION_MAX_READ_ENTRIES``, as the label-free monitor's reference."""
    return observations.newest_within(session, calibrator_id, rows, budget, source="upload") or \
        observations.newest_within(session, calibrator_id, rows, budget)


def submit(service: Serving, name: str, fields: PowerSpec, settings) -> dict:
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
    request = {**fields.to_dict(), "version": version, "rows": settings.power_rows}
    return service.jobs.submit("power", name, request, None)


def _shift(fields: PowerSpec) -> cal.PowerShift:
    return cal.PowerShift(fields.shift, fields.size, fields.shift_class,
                      tuple(fields.swap_classes) if fields.swap_classes else None)


def run(service: Serving, name: str, request: dict, progress) -> dict:
    """The ``power`` job: read the rows, simulate the shifted and the null streams."""
    fields = PowerSpec.from_dict({k: v for k, v in request.items() if k != "rows"})
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
