"""``ResolvedVersion``: the value a reference resolves to, passed from the registry to serving, the
cache and the prediction log."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResolvedVersion:
    """The version a reference points at, with what is needed to load it (its row id) and to
    trust it (its checksum)."""

    name: str
    version: int
    checksum: str
    version_id: int
    calibrator_id: int = 0
    log_rate: float = 0.0  # share of calibrate requests the prediction log keeps (0: logging off)
