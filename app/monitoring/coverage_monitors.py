"""Coverage alarms and adaptive thresholds, brought up to date by the alarms evaluation (scheduled
``alarms`` jobs and ``POST .../alarms/evaluate``) on the labelled rows each version served.

**Coverage alarm** (signal ``coverage@<level>``, one per version and coverage level of its serving set
predictor): ``calibration.CoverageAlarm``, a test by betting of ``E[e_t | past] <= alpha + tolerance``
on the miscoverage indicators ``e_t = [y_t not in C(x_t)]`` of the split-conformal sets, in the order the
labels came; by Ville's inequality it alarms with probability at most ``delta`` (the evaluation's
``alpha``) over the whole stream while the sets keep their level. It is stored as a drift monitor
(``app.monitoring.rows``), so that it is shown, exported and delivered to the webhook as they are; a
new serving set predictor, or other options, start it again from the first row.

**Adaptive thresholds** (``app.conformal.adaptive``): each state of a serving set predictor fitted with
``adaptive`` is updated on the rows stored since its watermark.

**One pass** (``Feed``): every monitor that takes a version's labelled rows in an evaluation (the drift
monitor, the adaptive thresholds, the coverage alarms) registers with the watermark it continues after
(the newest observation chunk it applied; 0 from the first row), and ``Feed.run`` reads the chunks after
each distinct watermark once, and each batch of them once (``batches``: calibrated through the version, in
arrival order), handing the same arrays to every monitor of that watermark in turn. A monitor sees exactly
the batches it would see on its own (they are cut from its watermark on), so its updates, and its state,
are the same.

**The ECE of the newest rows** (``recent_ece``, for ``alarms``): it depends on each row only through
its top-label confidence and whether the top label is right, so a process keeps those two vectors of
the last window it computed, per chunk (``Window``), by database, calibrator and version (at most
``KEPT`` a database, ``ECE_ROWS`` x 16 bytes each). An evaluation reads and calibrates only the chunks
its window holds that the kept one lacks (the new rows) and computes the ECE of the whole window with
``calibration.ece``'s kernel on the same values in the same order: the same float. The kept window
is used only when its digest is the one the monitor stored (``ece_window``), so a monitor started
again, another process's evaluation or a restart reads the window in full, as before.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

import calibration as cal

from ..conformal import adaptive
from ..conformal.service import alpha_of
from ..observations import reads as observations
from ..observations.chunks import pieces
from ..platform.db import Database
from ..registry.serving import Serving
from . import coverage
from .quality import calibrated_groups

PREFIX = "coverage@"
FEED_ENTRIES = 1 << 22  # rows x classes read at once while feeding a monitor
Consumer = Callable[[np.ndarray, np.ndarray], None]
KEPT = 64  # ECE windows kept a database
N_BINS = 15  # calibration.ece's default


def signal_of(level: float) -> str:
    return f"{PREFIX}{level:g}"


def is_coverage(signal: str) -> bool:
    return signal.startswith(PREFIX)


def view(row) -> dict:
    """A coverage alarm's level, set predictor and running miscoverage estimate (none for drift monitors)."""
    if not is_coverage(row.signal):
        return {}
    requested = row.state["requested"]
    return {"coverage": requested["coverage"], "set_predictor_id": requested["set_predictor_id"],
            "miscoverage_bound": row.state["alpha"] + row.state["tolerance"],
            "recent_miscoverage": row.state["mean"]}


def residuals(service: Serving, name: str, version: int, session, entries: list) -> tuple[np.ndarray, np.ndarray]:
    """The calibrated probabilities through ``version`` of the rows of ``entries`` and their labels
    (rows of a deleted version left out)."""
    inputs, labels = observations.load(session, entries)
    _, calibrated, usable = calibrated_groups(service, name, entries[0].kind, inputs,
                                              np.full(len(labels), version, dtype=np.int64))
    return calibrated, labels[usable]


def batches(service: Serving, name: str, version: int, chunks: list) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The calibrated probabilities and labels of the rows of ``chunks`` (``version``'s feedback, in
    arrival order) through ``version``, in batches of under twice ``FEED_ENTRIES`` entries, or of the
    read budget if smaller (a larger chunk in pieces)."""
    batch, entries = [], 0
    limit = min(FEED_ENTRIES, service.max_read_entries)
    parts = [part for chunk in chunks for part in pieces(chunk.index_entry(), limit)]
    for position, part in enumerate(parts):
        batch.append(part)
        entries += part.rows * part.n_classes
        if entries >= limit or position == len(parts) - 1:
            with service.db.read() as session:
                probs, labels = residuals(service, name, version, session, batch)
            if len(labels):
                yield probs, labels
            batch, entries = [], 0


class Feed:
    """The feedback rows ``version`` of calibrator ``name`` served, for the monitors of one evaluation."""

    def __init__(self, service: Serving, name: str, calibrator_id: int, version: int):
        self.service, self.name, self.calibrator_id, self.version = service, name, calibrator_id, version
        self._chunks: dict[int, list] = {}
        self._consumers: dict[int, list[Consumer]] = {}

    def chunks(self, after: int) -> list:
        """The version's feedback chunks with an id above ``after``, in arrival order (read once per
        ``after`` in an evaluation)."""
        if after not in self._chunks:
            with self.service.db.read() as session:
                self._chunks[after] = observations.observation_chunks(session, self.calibrator_id, "feedback",
                                                                      self.version, after)
        return self._chunks[after]

    def add(self, after: int, consumer: Consumer) -> None:
        """Have ``run`` call ``consumer(probs, labels)`` with each batch of the rows after chunk ``after``."""
        self._consumers.setdefault(after, []).append(consumer)

    def run(self) -> None:
        """Read and calibrate each watermark's rows once, in batches, and hand each batch to its consumers
        in the order they were added."""
        for after, consumers in self._consumers.items():
            for probs, labels in batches(self.service, self.name, self.version, self.chunks(after)):
                for consumer in consumers:
                    consumer(probs, labels)
        self._consumers = {}


def adaptive_updates(service, version: int, serving: dict, feed: Feed) -> list[tuple]:
    """Register with ``feed`` (``Feed`` of ``version``) the rows ``version`` served
    since each adaptive state's watermark, for the states of its serving set predictors (``serving``:
    ``coverage.serving_predictors``); after ``feed.run()``, ``store_adaptive`` stores them."""
    wanted = {(pid, level) for level, (pid, _) in serving.items()}
    pending = []
    for state in adaptive.states(service.db, sorted({pid for pid, _ in wanted})):
        if not any(pid == state["set_predictor_id"] and round(level, 12) == round(state["coverage"], 12)
                   for pid, level in wanted):
            continue
        chunks = feed.chunks(state["last_chunk_id"])
        if not chunks:
            continue
        online, covered = adaptive.loaded(state["state"]), list[np.ndarray]()
        feed.add(state["last_chunk_id"], _adapting(online, covered))
        pending.append((state, online, covered, chunks[-1].id))
    return pending


def _adapting(online, covered: list[np.ndarray]) -> Consumer:
    """The consumer that updates ``online`` on a batch and keeps whether each row's set covered it."""
    def consume(probs: np.ndarray, labels: np.ndarray) -> None:
        covered.append(online.update(probs, labels).covered)
    return consume


def store_adaptive(service, pending: list[tuple]) -> int:
    """Store the states ``adaptive_updates`` registered, once fed; how many were stored."""
    stored = 0
    for state, online, covered, last in pending:
        stored += adaptive.advance(service.db, state, online, np.concatenate(covered) if covered else
                                   np.zeros(0, dtype=bool), last)
    return stored


def alarm_outcomes(version: int, serving: dict, known: dict, options: dict,
                   feed: Feed) -> list[tuple[str, tuple, bool]]:
    """``(signal, outcome, same)`` per coverage level of ``version``'s serving set predictors: the alarm
    registered with ``feed`` for the rows since its last evaluation (from the first row when it is new
    or its options or set predictor changed; ``same`` then False), as ``alarms._save`` takes it once
    ``feed.run()`` fed it."""
    outcomes = []
    for level, (predictor_id, predictor) in serving.items():
        signal = signal_of(level)
        state, after = known.get((version, signal), (None, 0))
        requested = {"alpha": options["alpha"], "tolerance": options["tolerance"],
                     "half_life": options["half_life"], "set_predictor_id": predictor_id, "coverage": level}
        same = state is not None and state.get("requested") == requested
        start = after if same else 0
        chunks = feed.chunks(start)
        if not same and not chunks:
            continue
        alarm = cal.CoverageAlarm.from_dict(state) if same else cal.CoverageAlarm(
            alpha=alpha_of(level), tolerance=options["tolerance"], delta=options["alpha"],
            half_life=options["half_life"])
        feed.add(start, _miscoverage(alarm, predictor, alpha_of(level)))
        outcomes.append((signal, (alarm, chunks[-1].id if chunks else after, None, 0, {"requested": requested}),
                         same))
    return outcomes


def _miscoverage(alarm: cal.CoverageAlarm, predictor: cal.SetPredictor, alpha: float) -> Consumer:
    """The consumer that feeds ``alarm`` the miscoverage of ``predictor``'s sets at ``alpha`` on a batch."""
    def consume(probs: np.ndarray, labels: np.ndarray) -> None:
        covered, _ = coverage.set_outcomes(predictor, probs, labels, alpha)
        alarm.update((~covered).astype(np.float64))
    return consume


@dataclass(frozen=True)
class Part:
    """Rows ``skip`` to ``n_rows`` of one chunk: their top-label confidence and correctness."""

    skip: int
    n_rows: int
    confidence: np.ndarray
    correct: np.ndarray


@dataclass(frozen=True)
class Window:
    """The window whose index has digest ``digest``: its parts by chunk id."""

    digest: str
    parts: dict[int, Part]


_kept: weakref.WeakKeyDictionary[Database, OrderedDict[tuple[int, int], Window]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _get(db: Database, key: tuple[int, int], digest: str | None) -> Window | None:
    with _lock:
        windows = _kept.get(db)
        if windows is None or key not in windows or windows[key].digest != digest:
            return None
        windows.move_to_end(key)
        return windows[key]


def _put(db: Database, key: tuple[int, int], window: Window) -> None:
    with _lock:
        windows = _kept.setdefault(db, OrderedDict())
        windows[key] = window
        windows.move_to_end(key)
        while len(windows) > KEPT:
            windows.popitem(last=False)


def recent_ece(service: Serving, name: str, calibrator_id: int, version: int, session, index: list,
               stored_window: str | None, window: str) -> tuple[float | None, int]:
    """``(ECE, rows)`` of the rows of ``index`` (the newest labelled rows ``version`` served, digest
    ``window``) through ``version``, read in ``session``; ``stored_window``: the digest the monitor
    stored with its last ECE. ``calibration.ece(probs, labels)`` of the whole window, to the bit."""
    key = (calibrator_id, version)
    kept = _get(service.db, key, stored_window)
    parts: dict[int, Part] = {}
    missing = []
    for ref in index:
        part = kept.parts.get(ref.id) if kept is not None else None
        if part is not None and part.n_rows == ref.n_rows and part.skip <= ref.skip:
            start = ref.skip - part.skip  # a copy once it slides, so that the older rows are freed
            parts[ref.id] = part if not start else Part(ref.skip, ref.n_rows, part.confidence[start:].copy(),
                                                        part.correct[start:].copy())
        else:
            missing.append(ref)
    if missing:
        probs, labels = residuals(service, name, version, session, missing)
        if len(labels) != sum(ref.n_rows - ref.skip for ref in missing):  # rows left out: the whole window, kept not
            probs, labels = residuals(service, name, version, session, index)
            return _window_ece(*cal.top_label_outcomes(probs, labels))
        confidence, correct = cal.top_label_outcomes(probs, labels)
        at = 0
        for ref in missing:
            size = ref.n_rows - ref.skip
            parts[ref.id] = Part(ref.skip, ref.n_rows, confidence[at:at + size].copy(), correct[at:at + size].copy())
            at += size
    ordered = [parts[ref.id] for ref in index]
    _put(service.db, key, Window(window, parts))
    confidence = np.concatenate([part.confidence for part in ordered])
    correct = np.concatenate([part.correct for part in ordered])
    return _window_ece(confidence, correct)


def _window_ece(confidence: np.ndarray, correct: np.ndarray) -> tuple[float | None, int]:
    """``calibration.ece`` (equal-width bins, L1) of a window's top-label confidences and correctness,
    and its number of rows (``None`` and 0 for an empty window)."""
    return (cal.ece_of_outcomes(confidence, correct, N_BINS), len(confidence)) if len(confidence) else (None, 0)
