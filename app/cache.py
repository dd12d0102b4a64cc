"""Fitted calibrators (with their class and tensor names) kept in memory, keyed by
(name, version, checksum).

Versions are immutable, so a cached calibrator never goes stale; the checksum in the key keeps
a name that was deleted and re-created (its versions restart at 1) from hitting old entries.
Parameters are verified against their checksum before they are loaded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from calibration import Calibrator, from_dict

from .errors import IntegrityFailure
from .store import ResolvedVersion, checksum


def load_calibrator(resolved: ResolvedVersion, params_json: str) -> Calibrator:
    """Parse stored parameters after checking them against the stored checksum."""
    where = f"calibrator {resolved.name!r} version {resolved.version}"
    if checksum(params_json) != resolved.checksum:
        raise IntegrityFailure(f"the stored parameters of {where} do not match their checksum; refusing to serve")
    try:
        return from_dict(orjson.loads(params_json))
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise IntegrityFailure(f"the stored parameters of {where} cannot be loaded: {exc}") from exc


@dataclass(frozen=True)
class LoadedVersion:
    """A stored version ready to serve: which version it is, its calibrator, and the class and
    ``/v2`` tensor names served with it."""

    resolved: ResolvedVersion
    calibrator: Calibrator
    class_names: list[str] | None = None
    tensor_names: dict | None = None

    @property
    def name(self) -> str:
        return self.resolved.name

    @property
    def version(self) -> int:
        return self.resolved.version


class CalibratorCache:
    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[tuple, LoadedVersion] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(resolved: ResolvedVersion) -> tuple:
        return resolved.name, resolved.version, resolved.checksum

    def get(self, resolved: ResolvedVersion, load: Callable[[], LoadedVersion]) -> LoadedVersion:
        key = self._key(resolved)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        loaded = load()
        self.put(loaded)
        return loaded

    def put(self, loaded: LoadedVersion) -> None:
        key = self._key(loaded.resolved)
        with self._lock:
            self._items[key] = loaded
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
