"""Composition of calibrators (Mix-n-Match §3.4): ``g_m ∘ ... ∘ g_1``.

Each step is fitted on the calibrated output of the steps before it, on the same labelled
data, e.g. temperature scaling then IROvA ("IROvA-TS"), TS then IRM, ETS then IRM. The first
step reads the composition's input kind; every later step reads the probabilities of the step
before (taking logits as ``log(max(p, 1e-12))`` where it needs them). A composition of
accuracy-preserving steps is accuracy-preserving.

Ties in the returned dtype. A monotone step keeps each row's order only weakly once rounded:
IRM's strict slope of 1e-9 is lost in a float32 output (or against an O(1) value), and a
softmax of logits one ulp apart may round to equal values, so that a plain first-index argmax
of the output could pick a class whose input was smaller (TS then IRM on float32 input changed
it for about a third of the rows of near-tied logits). So, when the last step is
accuracy-preserving, ``predict_proba`` ends as IRM's does, with ``strict_top`` in the returned
dtype: each row's top entry is raised by one ulp where an entry with a smaller reference value
ties with it. The reference is the composition's input when every step is accuracy-preserving
(then a plain argmax of the output is the input's), and otherwise the last step's input (the
earlier steps' output, computed once more in float64: the last step keeps its argmax).

Option ``steps``: a non-empty list of ``{"method": name, "options": {...}}``; the steps'
``input`` options are set by the composition and may not be given.

Backends: each step predicts on the input's device; the steps are fitted on a host copy.
"""

from __future__ import annotations

import numpy as np

from ..base import Calibrator, FitDiagnostics
from ..inputs import InputBatch, validate_inputs
from ..options import INPUT_OPTION, Option
from ..registry import create, from_dict
from .isotonic import strict_top


class Composition(Calibrator):
    """A chain of calibrators, each fitted on the previous one's output."""

    method = "composition"
    description = (
        "Composition (Zhang et al. 2020): a chain of calibrators, each fitted on the previous "
        "one's output, e.g. temperature then isotonic_one_vs_all (IROvA-TS)."
    )
    options_spec = (
        INPUT_OPTION,
        Option("steps", list, [], "The chain: a list of {method, options}, applied in order.",
               max_items=10),
    )

    def __init__(self, **options):
        super().__init__(**options)
        steps = self.options["steps"]
        if not steps:
            raise ValueError("option 'steps' must list at least one calibrator")
        self.steps = []
        for position, step in enumerate(steps):
            where = f"steps[{position}]"
            if not isinstance(step, dict) or set(step) - {"method", "options"} or "method" not in step:
                raise ValueError(f"{where} must be an object with 'method' and optional 'options'")
            step_options = step.get("options") or {}
            if not isinstance(step_options, dict):
                raise ValueError(f"{where}.options must be an object")
            if "input" in step_options:
                raise ValueError(f"{where}.options may not set 'input': the composition sets it")
            kind = self.input if position == 0 else "probabilities"
            try:
                self.steps.append(create(step["method"], {**step_options, "input": kind}))
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from exc
        self.accuracy_preserving = all(step.accuracy_preserving for step in self.steps)

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        total = FitDiagnostics(True, 0, "")
        messages = []
        for index, step in enumerate(self.steps):
            step.fit_batch(scores, labels, warn=False)
            if index < len(self.steps) - 1:  # the next step's inputs (none after the last: they were 2x the input)
                scores = InputBatch(probabilities=step._predict(scores))
            total.converged &= step.diagnostics_.converged
            total.iterations += step.diagnostics_.iterations
            messages.append(f"{step.method}: {step.diagnostics_.message}")
        total.message = "; ".join(messages)
        return total

    def _predict(self, scores: InputBatch, steps=None) -> np.ndarray:
        for step in self.steps if steps is None else steps:
            scores = InputBatch(probabilities=step._predict(scores))
        return scores.probabilities

    def predict_proba(self, x):
        """As ``Calibrator.predict_proba``; then, where the last step is accuracy-preserving,
        ``strict_top`` in the returned dtype (see the module docstring)."""
        probabilities = super().predict_proba(x)
        if not self.steps[-1].accuracy_preserving:
            return probabilities
        scores = validate_inputs(x, self.input)
        if self.accuracy_preserving:
            reference = getattr(scores, scores.source)
        else:
            reference = self._predict(scores.in_float64(), self.steps[:-1])
        return strict_top(probabilities, reference)

    def _params(self) -> dict:
        return {"steps": [step.to_dict() for step in self.steps]}

    def _set_params(self, params: dict) -> None:
        stored = params.get("steps")
        if not isinstance(stored, list) or len(stored) != len(self.steps):
            raise ValueError(f"stored composition needs {len(self.steps)} fitted steps")
        self.steps = [from_dict(step) for step in stored]

    def summary(self) -> dict:
        return {"steps": [{"method": s.method, **s.summary()} for s in self.steps]}
