"""The conformal domain's value, as the service takes it (a frozen dataclass; the routes turn
``app.conformal.schemas.SetPredictorFields`` into it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..observations.values import ObservationSelection


@dataclass(frozen=True)
class SetPredictorSpec:
    """A set predictor's fit: the conformity ``score`` (``lac``, ``aps`` or ``raps``), the ``coverage``
    levels ``1 - alpha``, one threshold per class or not (``class_conditional``), RAPS's ``k_reg`` and
    ``lam``, randomised scores drawn with ``seed``, ``adaptive`` conformal inference (``aci`` with step
    ``adaptive_gamma``, or ``dtaci``; ``None``: fixed thresholds), ``input_check``, and ``data``: the
    stored observations to fit on instead of arrays in the body."""

    coverage: list[float]
    score: str = "aps"
    class_conditional: bool = False
    k_reg: int = 0
    lam: float = 0.0
    randomized: bool = False
    seed: int = 0
    adaptive: str | None = None
    adaptive_gamma: float = 0.005
    input_check: bool = True
    data: ObservationSelection | None = None
