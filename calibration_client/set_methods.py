"""The client's methods of prediction sets (fit a conformal set predictor of a version, list, get and
delete them), shared by ``Client`` and ``AsyncClient`` as the rest; the sets themselves come from
``calibrate(..., outputs=["set"], coverage=...)``."""

from __future__ import annotations

from collections.abc import Sequence

from . import _protocol as protocol
from . import _sets as sets


class SetMethods:
    def _run(self, operation):  # pragma: no cover - defined by the two clients
        raise NotImplementedError

    def fit_set_predictor(self, name: str, version: int, logits=None, labels=None, *, input: str = "logits",
                          coverage: float | Sequence[float] = 0.9, score: str = "aps",
                          class_conditional: bool = False, k_reg: int = 0, lam: float = 0.0,
                          randomized: bool = False, seed: int = 0, observations: dict | None = None,
                          adaptive: str | None = None, adaptive_gamma: float | None = None) -> dict:
        """Fit a conformal set predictor of ``name``'s ``version`` on held-out labelled rows
        (``logits`` or, with ``input``, probabilities, and ``labels``: rows the calibrator was
        not fitted on), or on the calibrator's stored observations (``observations``: a query such
        as ``{"source": "upload"}`` or ``{"last": 5000}``). ``coverage``: one level or several
        (e.g. ``[0.9, 0.95]``); ``score``: ``lac``, ``aps`` or ``raps`` (with ``k_reg`` and
        ``lam``); ``class_conditional``: coverage for every class; ``adaptive``: ``"aci"`` (step
        ``adaptive_gamma``) or ``"dtaci"`` keeps the served coverage under drift, its threshold
        following the labels of the rows the version served. Returns the stored set predictor (its
        ``id``, thresholds per level, counts, digest)."""
        return self._run(sets.fit_set_predictor(name, version, logits, labels, input, coverage, score,
                                                class_conditional, k_reg, lam, randomized, seed, observations,
                                                adaptive, adaptive_gamma))

    def set_predictors(self, name: str, version: int) -> list[dict]:
        """The set predictors of ``name``'s ``version``, newest first."""
        return self._run(sets.set_predictors(name, version))

    def set_predictor(self, name: str, version: int, set_predictor: int) -> dict:
        return self._run(sets.set_predictor(name, version, set_predictor))

    def delete_set_predictor(self, name: str, version: int, set_predictor: int) -> None:
        return self._run(protocol.delete(f"/v1/calibrators/{protocol._segment(name)}/versions/{int(version)}"
                                         f"/set-predictors/{int(set_predictor)}"))
