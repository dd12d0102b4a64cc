"""What the routes do, as plain synchronous functions (run off the event loop).

Request bodies arrive as bytes and are decoded here: JSON (orjson, arrays straight to numpy),
``.npy`` (one array; the other fields as query parameters) or ``.npz`` (named arrays). Core
``ValueError``s become 422 problems naming the field.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import orjson
from pydantic import BaseModel, ValidationError
from sqlalchemy import delete, update

import calibration as cal
from calibration import selection

from . import reports, store
from .cache import CalibratorCache, Loaded, load_calibrator
from .codecs import (
    JSON_TYPE,
    NPY_TYPE,
    NPZ_TYPE,
    dump_json,
    media_type,
    parse_json,
    read_npy,
    read_npz,
    wants,
    write_npy,
)
from .db import Database
from .device import Device
from .models import JobRow, VersionRow, utcnow
from .problems import Problem, invalid
from .schemas import ARRAY_FIELDS, AliasRequest, CalibrateFields, CompareFields, EvaluationFields, FitFields

INPUT_FIELDS = ("logits", "probabilities", "scores")
JOB_RETENTION = timedelta(days=1)
JOB_PROGRESS_STEP = 5.0  # percent between progress writes
logger = logging.getLogger(__name__)
IMAGE_TYPES = {"image/png": "png", "image/svg+xml": "svg"}


@dataclass
class Incoming:
    """A request body with the headers and query parameters that say how to read it."""

    body: bytes
    content_type: str | None = JSON_TYPE
    accept: str | None = None
    query: dict[str, str] | None = None


@dataclass
class Decoded:
    """A decoded request: validated small fields, the input kind and arrays."""

    fields: BaseModel
    kind: str | None
    values: object
    labels: object


def _fields(model: type[BaseModel], payload: dict) -> BaseModel:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        parts = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "body"
            message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
            parts.append(f"{where}: {message}")
        raise invalid("; ".join(parts)) from exc


def _query_payload(query: dict[str, str]) -> dict:
    payload: dict = {}
    for key, value in query.items():
        if key == "input":
            continue
        if key in ("options", "tags", "tensor_names"):
            try:
                payload[key] = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                raise invalid(f"query parameter {key!r} must be JSON: {exc}") from exc
        elif key in ("outputs", "class_names"):
            payload[key] = [item for item in value.split(",") if item]
        else:
            payload[key] = value
    return payload


def decode(incoming: Incoming, model: type[BaseModel], *, need_labels: bool, max_bytes: int,
           default_kind: str | None = None) -> Decoded:
    """Decode a body that carries one input array (and maybe labels) plus small fields."""
    body, content_type, query = incoming.body, incoming.content_type, incoming.query or {}
    kind_type = media_type(content_type)
    if kind_type == JSON_TYPE:
        payload = parse_json(body)
        arrays = {name: payload.pop(name) for name in ARRAY_FIELDS if name in payload}
        fields = _fields(model, payload)
    elif kind_type == NPY_TYPE:
        if need_labels:
            raise Problem(415, "this endpoint needs labels: send an .npz archive (application/x-npz) "
                               "with the input array and 'labels', or JSON")
        kind = query.get("input") or default_kind or "logits"
        if kind not in INPUT_FIELDS:
            raise invalid(f"query parameter 'input' must be one of {', '.join(INPUT_FIELDS)}")
        arrays = {kind: read_npy(body, kind)}
        fields = _fields(model, _query_payload(query))
    elif kind_type == NPZ_TYPE:
        arrays = read_npz(body, max_bytes)
        unknown = sorted(set(arrays) - set(ARRAY_FIELDS))
        if unknown:
            raise invalid(f"unknown .npz member(s) {', '.join(unknown)}; expected {', '.join(ARRAY_FIELDS)}")
        fields = _fields(model, _query_payload(query))
    else:
        raise Problem(415, f"unsupported Content-Type {content_type!r}: send {JSON_TYPE}, {NPY_TYPE} "
                           f"or {NPZ_TYPE}")
    given = [name for name in INPUT_FIELDS if arrays.get(name) is not None]
    if len(given) != 1:
        raise invalid("send exactly one of logits, probabilities or scores"
                      + (f" (got {', '.join(given)})" if given else ""))
    labels = arrays.get("labels")
    if need_labels and labels is None:
        raise invalid("labels are required")
    if not need_labels and labels is not None:
        raise invalid("this endpoint takes no labels")
    return Decoded(fields, given[0], arrays[given[0]], labels)


def _scores(decoded: Decoded) -> cal.Scores:
    try:
        return cal.to_scores(decoded.values, decoded.kind)
    except ValueError as exc:
        raise invalid(str(exc)) from exc


def _labels(decoded: Decoded, scores: cal.Scores) -> np.ndarray:
    try:
        return cal.inputs.check_labels(decoded.labels, scores.n, scores.k)
    except ValueError as exc:
        raise invalid(str(exc)) from exc


def version_view(name: str, row: VersionRow, aliases: list[str]) -> dict:
    return {
        "name": name,
        "version": row.version,
        "method": row.method,
        "options": orjson.loads(row.params_json)["options"],
        "input": row.input_kind,
        "n_classes": row.n_classes,
        "n_samples": row.n_samples,
        "class_names": row.class_names,
        "parameters": row.summary,
        "diagnostics": row.diagnostics,
        "report": row.report,
        "description": row.description,
        "tags": row.tags,
        "tensor_names": row.tensor_names,
        "aliases": aliases,
        "checksum": row.checksum,
        "created_at": row.created_at,
    }


def _json_safe(value):
    """Replace non-finite floats (e.g. an infinite objective) by None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class CalibrationService:
    def __init__(self, db: Database, cache_size: int, max_body_bytes: int, device: str = "cpu",
                 job_stale_seconds: float = 300.0):
        self.db = db
        self.job_stale = timedelta(seconds=job_stale_seconds)
        self.device = Device(device)
        self.cache = CalibratorCache(cache_size)
        self.max_body_bytes = max_body_bytes
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="job")

    # -- fitting ----------------------------------------------------------------------------

    def fit(self, name: str, incoming: Incoming) -> dict:
        store.check_name(name)
        decoded = decode(incoming, FitFields, need_labels=True, max_bytes=self.max_body_bytes)
        fields: FitFields = decoded.fields
        scores = _scores(decoded)
        labels = _labels(decoded, scores)
        options = dict(fields.options)
        if options.setdefault("input", decoded.kind) != decoded.kind:
            raise invalid(f"options.input is {options['input']!r} but the body sends {decoded.kind}")
        if fields.class_names is not None and len(fields.class_names) != scores.k:
            raise invalid(f"class_names has {len(fields.class_names)} names for {scores.k} classes")
        try:
            calibrator = cal.create(fields.method, options)
            calibrator.fit_scores(scores, labels, warn=False)
            params = calibrator.to_dict()
            summary = _json_safe(calibrator.summary())
            report = reports.comparison(scores.probabilities, calibrator.predict_scores(scores), labels)
            if calibrator.method == "auto":
                report["comparison"] = {**calibrator.comparison_.to_dict(),
                                        "selection": calibrator.selection_.to_dict()}
        except ValueError as exc:
            raise invalid(str(exc)) from exc
        params_json = store.canonical_json(params)
        fields_row = {
            "method": calibrator.method,
            "input_kind": decoded.kind,
            "n_classes": scores.k,
            "n_samples": scores.n,
            "class_names": fields.class_names,
            "params_json": params_json,
            "checksum": store.checksum(params_json),
            "summary": summary,
            "diagnostics": params["diagnostics"],
            "report": _json_safe(report),
            "description": fields.description,
            "tags": fields.tags,
            "tensor_names": fields.tensor_names.model_dump() if fields.tensor_names else None,
        }
        with self.db.write() as session:
            row = store.create_version(session, name, fields_row)
            view = version_view(name, row, [])
        loaded = Loaded(calibrator, fields_row["class_names"], fields_row["tensor_names"])
        self.cache.put(store.Resolved(name, row.version, row.checksum, row.id), loaded)
        return view

    # -- reading ----------------------------------------------------------------------------

    def get_version(self, name: str, version: int) -> dict:
        with self.db.read() as session:
            row = store.get_version(session, name, version)
            aliases = [a for a, v in store.aliases_of(session, row.calibrator_id).items() if v == version]
            return version_view(name, row, aliases)

    def list_versions(self, name: str, page_size: int, page_token: str | None) -> dict:
        with self.db.read() as session:
            calibrator, rows, token = store.list_versions(session, name, page_size, page_token)
            aliases = store.aliases_of(session, calibrator.id)
            by_version: dict[int, list[str]] = {}
            for alias, version in aliases.items():
                by_version.setdefault(version, []).append(alias)
            return {"name": name,
                    "versions": [version_view(name, r, by_version.get(r.version, [])) for r in rows],
                    "next_page_token": token}

    def list_calibrators(self, page_size: int, page_token: str | None) -> dict:
        with self.db.read() as session:
            rows, token = store.list_calibrators(session, page_size, page_token)
            return {"calibrators": [store.calibrator_overview(session, r) for r in rows],
                    "next_page_token": token}

    def get_calibrator(self, name: str) -> dict:
        with self.db.read() as session:
            return store.get_calibrator(session, name)

    # -- serving ----------------------------------------------------------------------------

    def resolve(self, name: str, version: int | None = None, alias: str | None = None):
        """The version a reference means and its loaded calibrator (one query; the version is
        loaded once per (name, version, checksum))."""
        resolved, loaded = self.resolve_loaded(name, version, alias)
        return resolved, loaded.calibrator

    def resolve_loaded(self, name: str, version: int | None = None, alias: str | None = None):
        resolved = store.resolve(self.db, name, version=version, alias=alias)

        def load() -> Loaded:
            with self.db.read() as session:
                params_json, class_names, tensor_names = store.load_for_serving(session, resolved.version_id)
            return Loaded(load_calibrator(resolved, params_json), class_names, tensor_names)

        return resolved, self.cache.get(resolved, load)

    def _check_kind(self, calibrator: cal.Calibrator, decoded: Decoded, resolved) -> None:
        if decoded.kind != calibrator.input:
            raise invalid(f"calibrator {resolved.name!r} version {resolved.version} was fitted on "
                          f"{calibrator.input}; send {calibrator.input}, not {decoded.kind}")

    def calibrate(self, ref: tuple, incoming: Incoming) -> tuple[bytes, str]:
        resolved, loaded = self.resolve_loaded(*ref)
        calibrator = loaded.calibrator
        decoded = decode(incoming, CalibrateFields, need_labels=False, max_bytes=self.max_body_bytes,
                         default_kind=calibrator.input)
        self._check_kind(calibrator, decoded, resolved)
        scores = _scores(decoded)
        try:
            probabilities = self.device.predict(calibrator, scores)
        except ValueError as exc:
            raise invalid(str(exc)) from exc
        if wants(incoming.accept, NPY_TYPE):
            return write_npy(probabilities), NPY_TYPE
        outputs = decoded.fields.outputs
        out: dict = {"name": resolved.name, "version": resolved.version}
        if "probabilities" in outputs:
            out["probabilities"] = probabilities
        if "predicted_class" in outputs:
            predicted = cal.predicted_class(probabilities, getattr(scores, scores.source))
            out["predicted_class"] = predicted
            names = loaded.class_names
            if names:
                out["predicted_class_name"] = [names[i] for i in predicted]
        if "confidence" in outputs:
            out["confidence"] = probabilities.max(axis=1)
        return dump_json(out), JSON_TYPE

    def report(self, ref: tuple, incoming: Incoming) -> tuple[bytes, str]:
        resolved, calibrator = self.resolve(*ref)
        decoded = decode(incoming, EvaluationFields, need_labels=True, max_bytes=self.max_body_bytes,
                         default_kind=calibrator.input)
        self._check_kind(calibrator, decoded, resolved)
        scores = _scores(decoded)
        labels = _labels(decoded, scores)
        fields: EvaluationFields = decoded.fields
        try:
            calibrated = self.device.predict(calibrator, scores)
        except ValueError as exc:
            raise invalid(str(exc)) from exc
        for media, fmt in IMAGE_TYPES.items():
            if wants(incoming.accept, media):
                return self._figure(resolved, scores.probabilities, calibrated, labels, fields.n_bins, fmt), media
        report = reports.comparison(scores.probabilities, calibrated, labels, fields.n_bins,
                                    fields.bootstrap, fields.confidence, fields.seed)
        return dump_json({"name": resolved.name, "version": resolved.version, **report}), JSON_TYPE

    def _figure(self, resolved, raw, calibrated, labels, n_bins, fmt) -> bytes:
        try:
            from calibration.plot import reliability_figure
        except ImportError as exc:  # pragma: no cover - matplotlib is an optional extra
            raise Problem(406, "images need the 'plot' extra (matplotlib) on the server") from exc
        return reliability_figure({"before": raw, "after": calibrated}, labels, n_bins=n_bins, format=fmt,
                                  title=f"{resolved.name} v{resolved.version}")

    def metrics(self, incoming: Incoming) -> bytes:
        decoded = decode(incoming, EvaluationFields, need_labels=True, max_bytes=self.max_body_bytes)
        scores = _scores(decoded)
        labels = _labels(decoded, scores)
        fields: EvaluationFields = decoded.fields
        result = reports.evaluation(scores.probabilities, labels, fields.n_bins, fields.bootstrap,
                                    fields.confidence, fields.seed)
        return dump_json({"n_samples": scores.n, "n_classes": scores.k, "n_bins": fields.n_bins, **result})

    # -- comparison, in the request or as a background job -----------------------------------

    def _compare_inputs(self, incoming: Incoming) -> tuple[CompareFields, cal.Scores, np.ndarray]:
        decoded = decode(incoming, CompareFields, need_labels=True, max_bytes=self.max_body_bytes)
        scores = _scores(decoded)
        labels = _labels(decoded, scores)
        fields: CompareFields = decoded.fields
        try:
            selection.prepare(scores.n, scores.k, fields.methods, fields.folds, scores.source)
        except ValueError as exc:
            raise invalid(str(exc)) from exc
        return fields, scores, labels

    def compare(self, incoming: Incoming) -> dict:
        return self._run_compare(*self._compare_inputs(incoming))

    def _run_compare(self, fields: CompareFields, scores: cal.Scores, labels: np.ndarray, progress=None) -> dict:
        try:
            comparison = cal.compare(getattr(scores, scores.source), labels, fields.methods, fields.folds,
                                     fields.seed, scores.source, progress)
        except ValueError as exc:
            raise invalid(str(exc)) from exc
        try:
            chosen = cal.select(comparison, fields.preserve_accuracy).to_dict()
        except ValueError:
            chosen = None
        return _json_safe({**comparison.to_dict(), "selection": chosen})

    def start_compare_job(self, incoming: Incoming) -> dict:
        """Validate now (bad input is a 4xx, not a failed job), then compare in the background."""
        inputs = self._compare_inputs(incoming)
        job_id = uuid.uuid4().hex
        with self.db.write() as session:
            session.execute(delete(JobRow).where(JobRow.status != "running",
                                                 JobRow.updated_at < utcnow() - JOB_RETENTION))
            session.add(JobRow(id=job_id, kind="compare", status="running", percent=0.0))
        self.executor.submit(self._run_job, job_id, inputs)
        return self.get_job(job_id)

    def _run_job(self, job_id: str, inputs) -> None:
        """Run a job, writing its progress every 5% and a heartbeat (``updated_at``) every tenth
        of the stale time: a job whose heartbeat stops (its process died) is reported failed."""
        reported = [0.0]
        done = threading.Event()

        def heartbeat() -> None:
            while not done.wait(self.job_stale.total_seconds() / 10):
                try:
                    self._update_job(job_id)
                except Exception as exc:  # the database is away: try again at the next beat
                    logger.warning("job %s heartbeat failed: %s", job_id, str(exc).splitlines()[0])

        beating = threading.Thread(target=heartbeat, name=f"job-{job_id[:8]}-heartbeat", daemon=True)
        beating.start()
        try:
            self._run_job_body(job_id, inputs, reported)
        finally:
            done.set()
            beating.join()

    def _run_job_body(self, job_id: str, inputs, reported: list[float]) -> None:
        def progress(done: int, total: int) -> None:
            percent = round(100.0 * done / total, 1)
            if percent - reported[0] >= JOB_PROGRESS_STEP and done < total:
                reported[0] = percent
                self._update_job(job_id, percent=percent)

        try:
            result = self._run_compare(*inputs, progress=progress)
        except Problem as problem:
            self._update_job(job_id, status="failed", error={"status": problem.status, "title": problem.title,
                                                             "detail": problem.detail})
        except Exception:  # a bug: the job says so instead of staying "running" for ever
            logger.exception("job %s failed", job_id)
            self._update_job(job_id, status="failed", error={"status": 500, "title": "Internal Server Error",
                                                             "detail": "the job failed unexpectedly"})
        else:
            self._update_job(job_id, status="succeeded", percent=100.0, result=result)

    def _update_job(self, job_id: str, **values) -> None:
        with self.db.write() as session:
            session.execute(update(JobRow).where(JobRow.id == job_id).values(**values, updated_at=utcnow()))

    def get_job(self, job_id: str) -> dict:
        row = self._job_row(job_id)
        if row.status == "running" and row.updated_at < utcnow() - self.job_stale:
            self._fail_lost_job(job_id)
            row = self._job_row(job_id)
        return {"id": row.id, "kind": row.kind, "status": row.status, "percent": row.percent,
                "result": row.result, "error": row.error, "created_at": row.created_at,
                "updated_at": row.updated_at}

    def _job_row(self, job_id: str) -> JobRow:
        with self.db.read() as session:
            row = session.get(JobRow, job_id) if len(job_id) <= 32 else None
        if row is None:
            raise Problem(404, f"no job {job_id!r} (finished jobs are kept for {JOB_RETENTION})")
        return row

    def _fail_lost_job(self, job_id: str) -> None:
        """Mark a running job whose heartbeat stopped as failed (only if it still is: the
        worker may have finished it, or beaten, since it was read)."""
        lost = {"status": 503, "title": "Worker lost",
                "detail": f"the process running this job stopped (no heartbeat for {self.job_stale}); "
                          "send the request again"}
        with self.db.write() as session:
            session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == "running",
                                                 JobRow.updated_at < utcnow() - self.job_stale)
                            .values(status="failed", error=lost, updated_at=utcnow()))

    # -- writes -----------------------------------------------------------------------------

    def delete_calibrator(self, name: str) -> None:
        with self.db.write() as session:
            store.delete_calibrator(session, name)

    def delete_version(self, name: str, version: int) -> None:
        with self.db.write() as session:
            store.delete_version(session, name, version)

    def set_alias(self, name: str, alias: str, incoming: Incoming) -> dict:
        store.check_alias(alias)
        if media_type(incoming.content_type) != JSON_TYPE:
            raise Problem(415, f"send {JSON_TYPE}")
        request = _fields(AliasRequest, parse_json(incoming.body))
        with self.db.write() as session:
            return store.set_alias(session, name, alias, request.version)

    def delete_alias(self, name: str, alias: str) -> None:
        with self.db.write() as session:
            store.delete_alias(session, name, alias)
