"""How stored things are shown by the API: a version as ``VersionOut`` describes it."""

from __future__ import annotations

import orjson

from ..platform.rows import VersionRow
from .integrity import StoredVersion


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
