"""What the service does, on domain values: names, references (``names.Reference``) and decoded
batches (``app.wire.batches.ArrayBatch``) whose fields are the values of ``app.registry.serving``
(``FitSpec``, ``CalibrateSpec``, ``EvaluationSpec``) in; versions, calibrated batches, reports and
jobs out. Plain synchronous functions, run off the event loop by the routes.

Array values are validated by the core here (``calibration.validate_inputs``, ``check_labels``): a
core ``ValueError`` becomes ``InvalidInput``. Errors are the domain errors of ``app.platform.errors``,
which the routes render as problems. Nothing here knows HTTP or a wire format.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

import calibration as cal

from ..jobs.inputs import job_input
from ..jobs.runner import JobProgress, JobRunner
from ..observations.online_updates import OnlineUpdates
from ..observations.service import Observations, shape_of_index
from ..platform.db import Database
from ..platform.errors import InvalidInput, NotAcceptable, refused_as
from ..prediction_log.service import PredictionLog, log_served
from ..promotion import aliases as promotion
from ..wire.batches import ArrayBatch, CalibratedBatch, validated
from ..wire.costs import (
    MAX_ARRAY_BYTES,
    MAX_ENTRIES,
    MAX_JSON_BYTES,
    MAX_PARAMETERS,
    RequestLimits,
    affordable_auto_options,
    check_fit_parameters,
    estimated_fit_seconds,
)
from . import prior_shift, reports, store, version_records
from .cache import CalibratorCache, Device, LoadedVersion, Resolutions, load_calibrator
from .names import Reference, check_name
from .serving import CalibrateSpec, EvaluationSpec, FitSpec
from .version_records import version_view
from .writes import NewVersion, write_version

OBSERVATION_CAPS = (5_000_000, 1 << 30, 1 << 26)  # rows and bytes per name, entries of one fit
MAX_READ_ENTRIES = 1 << 23  # CALIBRATION_MAX_READ_ENTRIES's default


class CalibrationService:
    def __init__(self, db: Database, cache_size: int, max_body_bytes: int, device: str = "cpu",
                 jobs: JobRunner | None = None, sync_budget_seconds: float = float("inf"),
                 cache_bytes: int = 256 << 20, max_array_bytes: int = MAX_ARRAY_BYTES,
                 max_json_bytes: int = MAX_JSON_BYTES, max_entries: int = MAX_ENTRIES,
                 max_parameters: int = MAX_PARAMETERS, integrity_key: bytes | None = None,
                 prediction_log: PredictionLog | None = None,
                 observation_caps: tuple[int, int, int] = OBSERVATION_CAPS, online_update_rows: int = 100,
                 max_read_entries: int = MAX_READ_ENTRIES):
        self.db = db
        self.integrity_key = integrity_key
        self.device = Device(device)
        self.cache = CalibratorCache(cache_size, cache_bytes)
        self.resolutions = Resolutions(db)
        self.limits = RequestLimits(max_body_bytes, max_array_bytes, max_json_bytes, max_entries)
        self.max_parameters = max_parameters
        self.max_read_entries = max_read_entries  # stored rows x classes one read loads (monitoring.quality.check_read)
        self.jobs = jobs
        self.sync_budget_seconds = sync_budget_seconds
        self.prediction_log = prediction_log
        self.observations = Observations(db, prediction_log, *observation_caps,
                                         OnlineUpdates(integrity_key, online_update_rows))

    # -- fitting ----------------------------------------------------------------------------

    def _fit_inputs(self, name: str, batch: ArrayBatch[FitSpec]):
        """Everything a fit checks before it starts: name, arrays, options, class names."""
        check_name(name)
        fields = batch.fields
        inputs, labels = validated(batch)
        options = dict(fields.options)
        if options.setdefault("input", batch.kind) != batch.kind:
            raise InvalidInput(f"options.input is {options['input']!r} but the body sends {batch.kind}")
        if fields.class_names is not None and len(fields.class_names) != inputs.k:
            raise InvalidInput(f"class_names has {len(fields.class_names)} names for {inputs.k} classes")
        return fields, inputs, labels, self._calibrator(fields.method, options, inputs.n, inputs.k)

    def _calibrator(self, method: str, options: dict, n: int, k: int) -> cal.Calibrator:
        """The unfitted calibrator, its options checked and its cost within the budgets."""
        if method == "auto":
            options = affordable_auto_options(options, n, k, self.max_parameters)
        with refused_as():
            calibrator = cal.create(method, options)
        check_fit_parameters(calibrator.method, calibrator.options, n, k, self.max_parameters, self.limits.entries)
        return calibrator

    def fit_or_submit(self, name: str, batch: ArrayBatch[FitSpec], asked: bool) -> tuple[bool, dict]:
        """Check the fit once (bad input is a 4xx, not a failed job), then ``(True, job)`` when the
        caller ``asked`` for a job or the fit's estimated cost exceeds the sync budget, else
        ``(False, the stored version)``. A batch without arrays names stored observations."""
        if batch.kind is None:
            return self._fit_stored_or_submit(name, batch.fields, asked)
        prepared = self._fit_inputs(name, batch)
        fields, inputs, labels, calibrator = prepared
        seconds = estimated_fit_seconds(calibrator.method, fields.options, inputs.n, inputs.k)
        if self.jobs is not None and (asked or seconds > self.sync_budget_seconds):
            request, payload = job_input(batch, labels, fields.to_dict())
            return True, self.jobs.submit("fit", name, request, payload)
        return False, self._fit_checked(name, batch, prepared)

    def _fit_stored_or_submit(self, name: str, fields: FitSpec, asked: bool) -> tuple[bool, dict]:
        """A fit on stored observations: the chunks are fixed now; a job reads them in its worker."""
        check_name(name)
        if fields.data is None:  # decode_batch gives a batch without arrays only with `data`
            raise InvalidInput("send exactly one of logits, probabilities or scores")
        index = self.observations.fit_index(name, fields.data)
        n, k, kind = shape_of_index(index)
        seconds = estimated_fit_seconds(fields.method, fields.options, n, k)
        if self.jobs is not None and (asked or seconds > self.sync_budget_seconds):
            self._calibrator(fields.method, {**fields.options, "input": kind}, n, k)
            request = {"kind": kind, "fields": fields.to_dict(),
                       "chunks": [ref.as_json() for ref in index]}
            return True, self.jobs.submit("fit", name, request, None)
        return False, self.fit(name, self.observations.load(fields, index))

    def fit(self, name: str, batch: ArrayBatch[FitSpec], job: JobProgress | None = None) -> dict:
        """Fit ``batch.fields.method`` on the labelled batch and store it as the next version; as
        a ``job``, report its steps and record its success in the transaction that stores it."""
        return self._fit_checked(name, batch, self._fit_inputs(name, batch), job)

    def _fit_checked(self, name: str, batch: ArrayBatch[FitSpec], prepared, job: JobProgress | None = None) -> dict:
        fields, inputs, labels, calibrator = prepared
        if job is not None:
            job.fitting(calibrator, inputs.n, inputs.k)
        with refused_as():
            calibrator.fit_batch(inputs, labels, warn=False)
            if job is not None:
                job.step("validation report", 80.0)
            params = calibrator.to_dict()
            report = reports.fit_report(inputs, calibrator.predict_batch, labels)
            if calibrator.method == "auto":
                report["comparison"] = {**calibrator.comparison_.to_dict(),
                                        "selection": calibrator.selection_.to_dict()}
        # the calibrator's input is the batch's kind (_fit_inputs refuses any other options.input)
        new = NewVersion(calibrator, params, calibrator.input, inputs.k, inputs.n, report, fields.class_names,
                         fields.description, fields.tags, fields.tensor_names)
        if job is not None:
            job.step("storing the version", 95.0)
        with self.db.write() as session:
            row = write_version(session, name, new, self.integrity_key)
            if getattr(calibrator, "updates_online", False):  # labels stored after this update it
                row.report = {**row.report, "online_update": self.observations.online.watermark(session,
                                                                                                 row.calibrator_id)}
                store.seal(row, name, self.integrity_key)
            view = version_view(name, row, [])
            if job is not None:
                job.finish_with(session, view)
        resolved = store.ResolvedVersion(name, row.version, row.checksum, row.id)
        self.cache.put(LoadedVersion(resolved, calibrator, new.class_names, new.tensor_names, len(row.params_json)))
        return view

    # -- reading ----------------------------------------------------------------------------

    def get_version(self, name: str, version: int) -> dict:
        """The version as the API shows it; ``IntegrityFailure`` naming it when it is damaged."""
        with self.db.read() as session:
            raw = version_records.get(session, name, version)
            aliases = [a for a, v in store.aliases_of(session, raw.calibrator_id).items() if v == version]
        return version_records.view(name, raw, aliases, self.integrity_key)

    def list_versions(self, name: str, page_size: int, page_token: str | None) -> dict:
        """A page of versions, newest first; damaged ones (``app.registry.version_records``) are left out of
        ``versions`` and named in ``damaged`` with why."""
        with self.db.read() as session:
            return version_records.listing(session, name, page_size, page_token, self.integrity_key)

    def list_calibrators(self, page_size: int, page_token: str | None) -> dict:
        with self.db.read() as session:
            rows, token = store.list_calibrators(session, page_size, page_token)
            return {"calibrators": [store.calibrator_overview(session, r) for r in rows],
                    "next_page_token": token}

    def get_calibrator(self, name: str) -> dict:
        with self.db.read() as session:
            return store.get_calibrator(session, name)

    def model_metadata(self, reference: Reference) -> dict:
        """What the Open Inference Protocol's model metadata shows of a version: its method,
        input kind, classes and tensor names, and the versions of the model."""
        loaded = self.serving(reference)
        with self.db.read() as session:
            row = store.version_by_id(session, loaded.resolved)
            versions = [loaded.version] if reference.version or reference.alias \
                else store.version_numbers(session, reference.name)
            return {"name": reference.name, "versions": versions, "method": row.method,
                    "input_kind": row.input_kind, "n_classes": row.n_classes, "tensor_names": row.tensor_names}

    # -- serving ----------------------------------------------------------------------------

    def serving(self, reference: Reference) -> LoadedVersion:
        """The version a reference means (``resolutions``: one query, none while the database is
        unchanged), loaded (once per (name, version, checksum), then kept in the cache)."""
        resolved = self.resolutions.resolve(reference)

        def load() -> LoadedVersion:
            with self.db.read() as session:
                record = version_records.for_serving(session, resolved)
            calibrator = load_calibrator(resolved, record, self.integrity_key)
            return LoadedVersion(resolved, calibrator, record.class_names, record.tensor_names,
                                 len(record.params_json))

        loaded = self.cache.get(resolved, load)
        if loaded.resolved is resolved or loaded.resolved == resolved:
            return loaded
        loaded = replace(loaded, resolved=resolved)  # its row changed (a log rate), or a fit put it
        self.cache.put(loaded)  # kept as now resolved: the next calls take it as it is
        return loaded

    def predict(self, loaded: LoadedVersion, inputs: cal.InputBatch) -> np.ndarray:
        """Calibrated probabilities of validated inputs, on the configured device."""
        with refused_as():
            return self.device.predict(loaded.calibrator, inputs)

    def _checked_inputs(self, loaded: LoadedVersion,
                        batch: ArrayBatch[Any]) -> tuple[cal.InputBatch, np.ndarray | None]:
        expected = loaded.calibrator.input
        if batch.kind != expected:
            raise InvalidInput(f"calibrator {loaded.name!r} version {loaded.version} was fitted on "
                               f"{expected}; send {expected}, not {batch.kind}")
        return validated(batch)

    def calibrate(self, loaded: LoadedVersion, batch: ArrayBatch[CalibrateSpec]) -> CalibratedBatch:
        inputs, _ = self._checked_inputs(loaded, batch)
        probabilities = self.predict(loaded, inputs)
        if batch.fields.priors is not None:  # label shift (app.registry.prior_shift)
            probabilities = prior_shift.adjusted(self.db, loaded, probabilities, batch.fields.priors,
                                                 batch.fields.source_priors)
        kind = loaded.calibrator.input  # the batch's kind: _checked_inputs refuses any other
        served = log_served(self.prediction_log, loaded, kind, batch.values, batch.fields.ids)
        return CalibratedBatch(loaded.name, loaded.version, probabilities, inputs.given,
                               loaded.class_names, served, getattr(batch.values, "dtype", None))

    def _labelled(self, loaded: LoadedVersion, batch: ArrayBatch[EvaluationSpec]):
        inputs, labels = self._checked_inputs(loaded, batch)
        return inputs.probabilities, self.predict(loaded, inputs), labels

    def report(self, loaded: LoadedVersion, batch: ArrayBatch[EvaluationSpec]) -> dict:
        """Metrics before and after calibration on a labelled batch."""
        raw, calibrated, labels = self._labelled(loaded, batch)
        fields = batch.fields
        report = reports.comparison(raw, calibrated, labels, fields.n_bins, fields.bootstrap, fields.confidence,
                                    fields.seed)
        return {"name": loaded.name, "version": loaded.version, **report}

    def reliability_figure(self, loaded: LoadedVersion, batch: ArrayBatch[EvaluationSpec], fmt: str) -> bytes:
        """The reliability diagram before and after calibration, as ``png`` or ``svg`` bytes."""
        raw, calibrated, labels = self._labelled(loaded, batch)
        try:
            figure = cal.reliability_figure
        except ImportError as exc:  # pragma: no cover - matplotlib is an optional extra
            raise NotAcceptable("images need the 'plot' extra (matplotlib) on the server") from exc
        return figure({"before": raw, "after": calibrated}, labels, n_bins=batch.fields.n_bins, format=fmt,
                      title=f"{loaded.name} v{loaded.version}")

    def metrics(self, batch: ArrayBatch[EvaluationSpec]) -> dict:
        inputs, labels = validated(batch)
        if labels is None:  # (decoded with need_labels: it has them)
            raise InvalidInput("labels are required")
        fields = batch.fields
        result = reports.evaluation(inputs.probabilities, labels, fields.n_bins, fields.bootstrap,
                                    fields.confidence, fields.seed)
        return {"n_samples": inputs.n, "n_classes": inputs.k, "n_bins": fields.n_bins, **result}

    # -- writes -----------------------------------------------------------------------------

    def delete_calibrator(self, name: str) -> None:
        with self.db.write() as session:
            store.delete_calibrator(session, name)

    def delete_version(self, name: str, version: int) -> None:
        with self.db.write() as session:
            store.delete_version(session, name, version)

    def set_alias(self, name: str, alias: str, version: int, evaluation: str | None = None,
                  actor: str | None = None) -> dict:
        """Point ``alias`` at ``version``, recorded; a gated alias needs ``evaluation`` (``app.promotion.aliases``)."""
        return promotion.move_alias(self.db, name, alias, version, evaluation, actor)

    def delete_alias(self, name: str, alias: str, actor: str | None = None) -> None:
        promotion.delete_alias(self.db, name, alias, actor)
