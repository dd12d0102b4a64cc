"""Set predictors of calibrator versions: fit, list, get, delete, and the sets a served version
gives at a coverage level.

A set predictor is split conformal (``calibration.SetPredictor``; Vovk et al. 2005, Lei et al. 2018)
on the version's own calibrated probabilities: the held-out labelled rows (posted, or the
calibrator's stored observations) are calibrated by the version, scored with LAC ``1 - p_y``, APS
(Romano et al. 2020) or RAPS (Angelopoulos et al. 2021), and the threshold of level ``alpha = 1 -
coverage`` is the ``m``-th smallest score, ``m = ceil((n + 1)(1 - alpha))``; the set of a new row is
``{y : s(x, y) <= q}`` and holds its true class with probability at least ``1 - alpha`` when the rows
are exchangeable. A level that ``n`` rows cannot give (``m > n``; per class when class-conditional)
is refused rather than stored with an infinite threshold.

Serving picks, for a coverage level, the newest set predictor of the served version that was fitted
at that level (or the one asked for by id); loaded set predictors are cached by id and digest (they
never change once stored). Randomised APS/RAPS sets draw one fresh uniform per served row.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np
import orjson

import calibration as cal

from ..platform.db import Database
from ..platform.errors import IntegrityFailure, InvalidInput, NotFound
from ..registry.cache import LoadedVersion
from ..registry.names import Reference
from ..registry.service import CalibrationService
from ..wire.batches import ArrayBatch, validated
from . import adaptive, adaptive_store, store
from .values import SetPredictorSpec

LEVEL_DIGITS = 12  # coverage levels match when equal to this many decimals (0.9 is 1 - 0.1 as given)


def alpha_of(coverage: float) -> float:
    """The miscoverage level ``alpha = 1 - coverage``, rounded so that ``0.9`` gives exactly ``0.1``."""
    return round(1.0 - coverage, LEVEL_DIGITS)


def too_few_rows(counts: list[int], coverage: list[float]) -> str | None:
    """Why ``counts`` held-out rows (one count, or one per class) cannot give every coverage level
    (``ceil((n + 1)(1 - alpha)) > n``), or ``None``."""
    for level in coverage:
        alpha = alpha_of(level)
        start = max(1, math.floor((1 - alpha) / alpha) - 2)  # n >= (1 - alpha) / alpha, up to rounding
        needed = next(n for n in range(start, start + 10) if cal.quantile_rank(n, alpha) <= n)
        short = [j for j, n in enumerate(counts) if n < needed]
        if short:
            where = (f"{counts[0]} held-out rows" if len(counts) == 1 else
                     f"class(es) {', '.join(map(str, short[:10]))}{' ...' if len(short) > 10 else ''} have fewer "
                     f"than {needed} held-out rows (counts {[counts[j] for j in short[:10]]})")
            return (f"coverage {level} needs at least {needed} held-out rows"
                    f"{' per class' if len(counts) > 1 else ''} (the threshold is the ceil((n + 1) * {level})-th "
                    f"smallest of n scores, which must be <= n); {where}: send more rows or ask a lower coverage")
    return None


class SetPredictorCache:
    """Loaded set predictors, least recently used first out, at most ``size``."""

    def __init__(self, size: int):
        self.size = max(1, size)
        self._items: OrderedDict[tuple, cal.SetPredictor] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple, load) -> cal.SetPredictor:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        predictor = load()
        with self._lock:
            self._items[key] = predictor
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return predictor


def view(name: str, version: int, row) -> dict:
    """A stored set predictor as the API shows it."""
    params = orjson.loads(row.params_json)
    options = dict(row.options)
    return {"id": row.id, "name": name, "version": version, "score": row.score, "coverage": list(row.coverage),
            "class_conditional": bool(options.pop("class_conditional", False)), "options": options,
            "thresholds": params["thresholds"], "counts": params["counts"], "n_samples": row.n_samples,
            "source": row.source, "checksum": row.checksum, "created_at": row.created_at}


class ConformalService:
    def __init__(self, db: Database, registry: CalibrationService, integrity_key: bytes | None,
                 cache_size: int = 256):
        self.db = db
        self.registry = registry
        self.integrity_key = integrity_key
        self.cache = SetPredictorCache(cache_size)
        self.adaptive = adaptive.AdaptiveSets(db, cache_size)
        self._adaptive_ids: dict[int, bool] = {}  # set predictor id: fitted adaptive (fixed once stored)

    def _is_adaptive(self, predictor_id: int) -> bool:
        known = self._adaptive_ids.get(predictor_id)
        if known is None:
            with self.db.read() as session:
                known = bool(adaptive_store.of_predictors(session, [predictor_id]))
            if len(self._adaptive_ids) > 4096:
                self._adaptive_ids.clear()
            self._adaptive_ids[predictor_id] = known
        return known

    def _version(self, name: str, version: int) -> LoadedVersion:
        return self.registry.serving(Reference.pinned(name, version))

    # -- fitting ----------------------------------------------------------------------------

    def fit(self, name: str, version: int, batch: ArrayBatch[SetPredictorSpec]) -> dict:
        """Fit a set predictor on held-out labelled rows calibrated by ``name``'s ``version`` and store it."""
        loaded = self._version(name, version)
        fields = batch.fields
        if batch.kind is None:
            index = self.registry.observations.fit_index(name, fields.data)
            batch = self.registry.observations.load(fields, index)
            source = {"kind": "observations", "query": fields.data.to_dict(exclude_none=True)}
        else:
            source = {"kind": "rows"}
        expected = loaded.calibrator.input
        if batch.kind != expected:
            raise InvalidInput(f"calibrator {name!r} version {version} was fitted on {expected}; its set predictor "
                               f"needs {expected}, not {batch.kind}")
        inputs, labels = validated(batch)
        probabilities = self.registry.predict(loaded, inputs)
        k = probabilities.shape[1]
        counts = np.bincount(labels, minlength=k).tolist() if fields.class_conditional else [len(labels)]
        refused = too_few_rows(counts, fields.coverage)
        if refused is not None:
            raise InvalidInput(refused)
        if fields.adaptive is not None and (fields.class_conditional or fields.randomized):
            raise InvalidInput("adaptive sets are marginal and non-randomised: leave class_conditional and "
                               "randomized false with `adaptive`")
        options = {"k_reg": fields.k_reg, "lam": fields.lam, "randomized": fields.randomized,
                   "class_conditional": fields.class_conditional}
        try:
            predictor = cal.SetPredictor.fit(probabilities, labels, seed=fields.seed, score=fields.score,
                                             alphas=[alpha_of(c) for c in fields.coverage], **options)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from exc
        stored_options = {**options, "seed": fields.seed}
        if fields.adaptive is not None:
            stored_options |= {"adaptive": fields.adaptive, "adaptive_gamma": fields.adaptive_gamma}
        row_fields = {"score": fields.score, "options": stored_options,
                      "coverage": [float(c) for c in fields.coverage],
                      "params_json": orjson.dumps(predictor.to_dict(), option=orjson.OPT_SORT_KEYS).decode(),
                      "source": {**source, "rows": len(labels)}, "n_samples": len(labels)}
        with self.db.write() as session:
            row = store.insert(session, name, version, loaded.resolved.version_id, row_fields, self.integrity_key)
            if fields.adaptive is not None:  # rows labelled up to now were served before it: not applied
                watermark = self.registry.observations.online.watermark(session, loaded.resolved.calibrator_id)
                adaptive.start(session, row.id, fields.adaptive, fields.adaptive_gamma,
                               {float(c): alpha_of(c) for c in fields.coverage}, predictor, probabilities, labels,
                               watermark["through_chunk"])
            return view(name, version, row)

    # -- reading and deleting ---------------------------------------------------------------

    def list(self, name: str, version: int) -> dict:
        """The version's set predictors, newest first; damaged ones named in ``damaged`` with why."""
        version_id = self._version(name, version).resolved.version_id
        intact, damaged = [], []
        with self.db.read() as session:
            for row in store.of_version(session, version_id):
                try:
                    intact.append(view(name, version, store.verified(name, version, row, self.integrity_key)))
                except IntegrityFailure as failure:
                    damaged.append({"id": row.id, "detail": failure.detail})
        return {"name": name, "version": version, "set_predictors": intact, "damaged": damaged}

    def get(self, name: str, version: int, predictor_id: int) -> dict:
        version_id = self._version(name, version).resolved.version_id
        with self.db.read() as session:
            row = store.get(session, name, version, version_id, predictor_id)
            shown = view(name, version, store.verified(name, version, row, self.integrity_key))
        states = adaptive.states(self.db, [predictor_id])
        return {**shown, "adaptive": [adaptive.view(state) for state in states]} if states else shown

    def delete(self, name: str, version: int, predictor_id: int) -> None:
        version_id = self._version(name, version).resolved.version_id
        with self.db.write() as session:
            store.remove(session, name, version, version_id, predictor_id)

    # -- serving ----------------------------------------------------------------------------

    def for_calibrate(self, loaded: LoadedVersion, outputs: list[str], coverage: float | None,
                      predictor_id: int | None, one_array: bool) -> tuple[int, cal.SetPredictor] | None:
        """The ``(id, set predictor)`` a calibrate call asks for when its ``outputs`` include ``set``
        (at ``coverage``; the only output of a ``one_array`` answer, an ``.npy``), else ``None``;
        ``coverage`` and ``set_predictor`` without ``set`` are refused."""
        if "set" not in outputs:
            if coverage is not None or predictor_id is not None:
                raise InvalidInput("`coverage` and `set_predictor` choose the prediction sets: add 'set' to outputs")
            return None
        if coverage is None:
            raise InvalidInput("outputs 'set' needs `coverage`: a coverage level the version's set predictor was "
                               "fitted at (e.g. 0.9)")
        if one_array and set(outputs) != {"set"}:
            raise InvalidInput("an .npy answer is one array: ask outputs=set alone for the (n, k) uint8 set mask, "
                               "or JSON (or /v2) for sets beside probabilities")
        return self.predictor_for(loaded, coverage, predictor_id)

    def levels(self, loaded: LoadedVersion) -> list[float]:
        """The coverage levels the served version's set predictors were fitted at, ascending."""
        with self.db.read() as session:
            candidates = store.levels_of_version(session, loaded.resolved.version_id)
        return sorted({round(c, LEVEL_DIGITS) for _, levels, _ in candidates for c in levels})

    def predictor_for(self, loaded: LoadedVersion, coverage: float,
                      predictor_id: int | None = None) -> tuple[int, cal.SetPredictor]:
        """The set predictor that serves ``loaded`` at ``coverage``: the one with id ``predictor_id``, else
        the version's newest fitted at that level; a 404 naming the level when there is none."""
        if not (math.isfinite(coverage) and 0 < coverage < 1):
            raise InvalidInput(f"coverage must lie in (0, 1), got {coverage}")
        name, version, version_id = loaded.name, loaded.version, loaded.resolved.version_id
        level = round(coverage, LEVEL_DIGITS)
        with self.db.read() as session:
            candidates = store.levels_of_version(session, version_id)
        fitted = sorted({round(c, LEVEL_DIGITS) for _, levels, _ in candidates for c in levels})
        chosen = [(i, checksum) for i, levels, checksum in candidates
                  if (predictor_id is None or i == predictor_id) and level in {round(c, LEVEL_DIGITS) for c in levels}]
        if not chosen:
            if predictor_id is not None and predictor_id not in {i for i, _, _ in candidates}:
                raise NotFound(f"calibrator {name!r} version {version} has no set predictor {predictor_id}")
            which = f"set predictor {predictor_id}" if predictor_id is not None else "no set predictor"
            raise NotFound(f"calibrator {name!r} version {version}: {which} at coverage {coverage} "
                           f"(fitted levels: {fitted or 'none'}); fit one with POST /v1/calibrators/{name}/versions/"
                           f"{version}/set-predictors")
        chosen_id, checksum = chosen[0]

        def load() -> cal.SetPredictor:
            with self.db.read() as session:
                row = store.verified(name, version, store.get(session, name, version, version_id, chosen_id),
                                     self.integrity_key)
                params_json = row.params_json
            try:
                return cal.SetPredictor.from_json(params_json)
            except (ValueError, KeyError) as exc:
                raise IntegrityFailure(f"set predictor {chosen_id} of calibrator {name!r} version {version} cannot "
                                       f"be loaded: {exc}", calibrator=name, version=version) from exc

        return chosen_id, self.cache.get((version_id, chosen_id, checksum), load)

    def mask(self, predictor: cal.SetPredictor, probabilities: np.ndarray, coverage: float,
             predictor_id: int | None = None) -> np.ndarray:
        """The boolean ``(n, k)`` set mask of calibrated ``probabilities`` at ``coverage`` (a level of
        ``predictor``, stored as ``predictor_id``): at the adaptive state's current level when it was
        fitted with ``adaptive`` (``app.conformal.adaptive``), else at its split-conformal threshold;
        randomised scores draw one fresh uniform per row."""
        if predictor_id is not None and self._is_adaptive(predictor_id):
            served = self.adaptive.sets(predictor_id, coverage, LEVEL_DIGITS, predictor, probabilities)
            if served is not None:
                return served
        uniforms = (np.random.default_rng().random(len(probabilities))
                    if predictor.randomized and predictor.score != "lac" else None)
        try:
            return predictor.predict_sets(probabilities, alpha_of(coverage), uniforms=uniforms)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from exc

    def sets(self, loaded: LoadedVersion, probabilities: np.ndarray, coverage: float,
             predictor_id: int | None = None) -> tuple[int, np.ndarray]:
        """``(set predictor id, boolean mask (n, k))`` of calibrated ``probabilities`` served by ``loaded``."""
        chosen_id, predictor = self.predictor_for(loaded, coverage, predictor_id)
        return chosen_id, self.mask(predictor, probabilities, coverage, chosen_id)
