"""Fitted calibrators (with their class and tensor names) kept in memory, keyed by
(name, version, checksum), and the device they run on.

Versions are immutable, so a cached calibrator never goes stale; the checksum in the key keeps
a name that was deleted and re-created (its versions restart at 1) from hitting old entries.
A version's digest (``app.registry.integrity``) is verified before it is loaded.

The cache holds at most ``size`` entries (``CALIBRATION_CACHE_SIZE``) and at most ``max_bytes``
(``CALIBRATION_CACHE_BYTES``) of them, evicting the least recently used first. An entry's size
is the length of its stored parameters (``params_json``, canonical JSON), known without parsing
anything: a good proxy for its memory where memory matters, as the parameters are numbers in
that JSON (a large histogram's JSON is a little more than its memory); small calibrators are
under-counted by their fixed overhead (a few kB), which the entry cap bounds. A version
larger than the whole budget is served but not kept.

``Device``: where calibrate, report and inference run (``CALIBRATION_DEVICE``).

``cpu`` (the default) is numpy. ``cuda``, ``cuda:N`` and ``torch-cpu`` (torch on the CPU, to
exercise the device path without a GPU) need the ``torch`` extra: the decoded batch is copied
to that device, the calibrator predicts there (``calibration.backend``), and the
probabilities come back to the host to be encoded. Fitted parameters are stored the same way
whatever the device, so a calibrator fitted on one serves on any other. Fits and metrics run on
the host.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import orjson

import calibration as cal
from calibration import Calibrator, from_dict

from ..platform.db import Database
from ..platform.errors import IntegrityFailure
from ..settings import DEVICE_PATTERN
from . import integrity, store
from .names import Reference, ResolvedVersion


def load_calibrator(resolved: ResolvedVersion, record: integrity.VersionRecord, key: bytes | None) -> Calibrator:
    """Parse stored parameters after checking the version's digest (``app.registry.integrity``)."""
    where = f"calibrator {resolved.name!r} version {resolved.version}"
    names = {"calibrator": resolved.name, "version": resolved.version}
    refused = integrity.verify(resolved.checksum, record, key)
    if refused is not None:
        raise IntegrityFailure(f"{where} failed its integrity check: {refused}; refusing to serve", **names)
    try:
        calibrator = from_dict(orjson.loads(record.params_json))
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise IntegrityFailure(f"the stored parameters of {where} cannot be loaded: {exc}", **names) from exc
    return calibrator


@dataclass(frozen=True)
class LoadedVersion:
    """A stored version ready to serve: which version it is, its calibrator, and the class and
    ``/v2`` tensor names served with it."""

    resolved: ResolvedVersion
    calibrator: Calibrator
    class_names: list[str] | None = None
    tensor_names: dict | None = None
    stored_bytes: int = 0  # len(params_json): the cache's measure of its size

    @property
    def name(self) -> str:
        return self.resolved.name

    @property
    def version(self) -> int:
        return self.resolved.version


class CalibratorCache:
    """Least recently used calibrators, at most ``size`` of them and ``max_bytes`` in all (by
    their stored size)."""

    def __init__(self, size: int, max_bytes: int):
        self.size = size
        self.max_bytes = max_bytes
        self.total_bytes = 0
        self._items: OrderedDict[tuple, tuple[LoadedVersion, int]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(resolved: ResolvedVersion) -> tuple:
        return resolved.name, resolved.version, resolved.checksum

    def get(self, resolved: ResolvedVersion, load: Callable[[], LoadedVersion]) -> LoadedVersion:
        key = self._key(resolved)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        loaded = load()
        self.put(loaded)
        return loaded

    def put(self, loaded: LoadedVersion) -> None:
        key = self._key(loaded.resolved)
        nbytes = loaded.stored_bytes
        with self._lock:
            previous = self._items.pop(key, None)
            if previous is not None:
                self.total_bytes -= previous[1]
            if nbytes > self.max_bytes:
                return  # served, never kept: it alone would exceed the budget
            self._items[key] = (loaded, nbytes)
            self.total_bytes += nbytes
            while len(self._items) > self.size or self.total_bytes > self.max_bytes:
                _, (_, evicted) = self._items.popitem(last=False)
                self.total_bytes -= evicted

    def __contains__(self, resolved: ResolvedVersion) -> bool:
        return self._key(resolved) in self._items

    def __len__(self) -> int:
        return len(self._items)


RESOLUTIONS_SIZE = 4096


class Resolutions:
    """``reference -> ResolvedVersion``, valid while ``db.data_version()`` is unchanged.

    Which version a reference means (``name``, ``name@alias``, a pinned version, ``/v2``'s default),
    remembered while the database has not changed.

    **The rule.** An answer of ``store.resolve`` is kept with the database's change counter
    (``Database.data_version``) read *before* the lookup, and reused only while the counter still reads
    the same. Any commit by any connection of any process (a fit, an alias move, a deleted version, a
    changed log rate or ``/v2`` default: every replica or worker sharing the SQLite file) changes the
    counter, so the next call looks the reference up again: there is no staleness window, and a deleted
    version is never served from here. A commit between the counter's read and the lookup is seen at the
    next call (the counter has moved), never hidden under an old counter. On Postgres the counter is the
    registry's generation, moved in the writing transaction itself by every write to the rows a
    resolution reads (migration 0018), so the same holds across processes and replicas: one primary-key
    read a call instead of the resolution's join.

    Where the database gives no counter (an in-memory SQLite database, a Postgres database not migrated
    to 0018) every call looks the reference up. At most ``size`` references are kept; past that, all are
    forgotten at once (the next calls look them up again). Failed lookups (404s) are not kept.
    """

    def __init__(self, db: Database, size: int = RESOLUTIONS_SIZE):
        self.db = db
        self.size = size
        self._items: dict[Reference, tuple[int, ResolvedVersion]] = {}

    def resolve(self, reference: Reference) -> ResolvedVersion:
        counter = self.db.data_version()
        if counter is None:
            return store.resolve(self.db, reference)
        kept = self._items.get(reference)
        if kept is not None and kept[0] == counter:
            return kept[1]
        resolved = store.resolve(self.db, reference)
        if len(self._items) >= self.size:
            self._items.clear()
        self._items[reference] = (counter, resolved)
        return resolved


class Device:
    def __init__(self, name: str):
        if not DEVICE_PATTERN.match(name):
            raise ValueError(f"CALIBRATION_DEVICE must be cpu, torch-cpu, cuda or cuda:N, got {name!r}")
        self.name = name
        self.torch = None
        if name == "cpu":
            return
        try:
            import torch
        except ImportError as exc:
            raise ValueError(f"CALIBRATION_DEVICE={name} needs the torch extra "
                             "(pip install 'calibration-service[torch]')") from exc
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"CALIBRATION_DEVICE={name}, but torch sees no CUDA device")
        self.torch = torch
        self.target = torch.device("cpu" if name == "torch-cpu" else name)
        torch.empty(1, device=self.target)  # fail now, not on the first request, if it is unusable

    def predict(self, calibrator: cal.Calibrator, scores: cal.InputBatch, dtype=None) -> np.ndarray:
        """Calibrated probabilities of a validated host batch, computed on this device (in float64;
        as ``dtype``, a numpy dtype, when given: the float64 answer's cast)."""
        if self.torch is None:
            return calibrator.predict_batch(scores, dtype)
        batch = self.torch.as_tensor(getattr(scores, scores.source), device=self.target)
        host = cal.to_host(calibrator.predict_batch(cal.InputBatch(**{scores.source: batch})))
        return host if dtype is None else host.astype(dtype, copy=False)
