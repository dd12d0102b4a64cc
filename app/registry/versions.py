"""Writing a version: the one function that stores a fitted calibrator as the next version of a
name, for a fit and for an online update alike. Its parameters are stored as canonical JSON (sorted
keys, so equal parameters give equal text and equal digests), with the calibrator's summary and
diagnostics beside them, and the row is sealed with its digest (``app.registry.integrity``). A stored
version is shown by the API as ``VersionOut`` describes it (``version_view``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy.orm import Session

import calibration as cal

from . import store
from .integrity import StoredVersion
from .rows import VersionRow


@dataclass(frozen=True)
class NewVersion:
    """A fitted ``calibrator`` and what describes it. ``params`` is its ``to_dict()`` (with the
    diagnostics to store, e.g. an online update's message); ``report`` is made JSON-safe on storing."""

    calibrator: Any
    params: dict
    input_kind: str
    n_classes: int
    n_samples: int
    report: dict = field(default_factory=dict)
    class_names: list[str] | None = None
    description: str | None = None
    tags: dict[str, str] | None = None
    tensor_names: dict[str, Any] | None = None


def write_version(session: Session, name: str, version: NewVersion, key: bytes | None) -> VersionRow:
    """Store ``version`` as the next version of ``name`` (creating the name), sealed with ``key``."""
    return store.create_version(session, name, {
        "method": version.calibrator.method,
        "input_kind": version.input_kind,
        "n_classes": version.n_classes,
        "n_samples": version.n_samples,
        "class_names": version.class_names,
        "params_json": store.canonical_json(version.params),
        "summary": cal.json_safe(version.calibrator.summary()),
        "diagnostics": version.params["diagnostics"],
        "report": cal.json_safe(version.report),
        "description": version.description,
        "tags": version.tags,
        "tensor_names": version.tensor_names,
    }, key)


def version_view(name: str, row: VersionRow | StoredVersion, aliases: list[str]) -> dict:
    """A stored version (its row, or its record as read and checked) as the API shows it."""
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
