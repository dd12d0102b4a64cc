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

from calibration import Calibrator, from_dict

from .problems import Problem
from .store import Resolved, checksum


class IntegrityFailure(Problem):
    def __init__(self, detail: str):
        super().__init__(500, detail, title="Stored calibrator failed its integrity check")


def load_calibrator(resolved: Resolved, params_json: str) -> Calibrator:
    """Parse stored parameters after checking them against the stored checksum."""
    where = f"calibrator {resolved.name!r} version {resolved.version}"
    if checksum(params_json) != resolved.checksum:
        raise IntegrityFailure(f"the stored parameters of {where} do not match their checksum; refusing to serve")
    import orjson

    try:
        return from_dict(orjson.loads(params_json))
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise IntegrityFailure(f"the stored parameters of {where} cannot be loaded: {exc}") from exc


@dataclass(frozen=True)
class Loaded:
    """A stored version ready to serve."""

    calibrator: Calibrator
    class_names: list[str] | None = None
    tensor_names: dict | None = None


class CalibratorCache:
    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[tuple, Loaded] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, resolved: Resolved, load: Callable[[], Loaded]) -> Loaded:
        key = (resolved.name, resolved.version, resolved.checksum)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        loaded = load()
        self.put(resolved, loaded)
        return loaded

    def put(self, resolved: Resolved, loaded: Loaded) -> None:
        key = (resolved.name, resolved.version, resolved.checksum)
        with self._lock:
            self._items[key] = loaded
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
