"""Composition of calibrators (Mix-n-Match §3.4): ``g_m ∘ ... ∘ g_1``.

Each step is fitted on the calibrated output of the steps before it, on the same labelled
data, e.g. temperature scaling then IROvA ("IROvA-TS"), TS then IRM, ETS then IRM. The first
step reads the composition's input kind; every later step reads the probabilities of the step
before (taking logits as ``log(max(p, 1e-12))`` where it needs them). A composition of
accuracy-preserving steps is accuracy-preserving.

Option ``steps``: a non-empty list of ``{"method": name, "options": {...}}``; the steps'
``input`` options are set by the composition and may not be given.

Backends: each step predicts on the input's device; the steps are fitted on a host copy.
"""

from __future__ import annotations

import numpy as np

from ..base import Calibrator, FitDiagnostics
from ..inputs import InputBatch
from ..options import INPUT_OPTION, Option
from ..registry import create, from_dict


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
        for step in self.steps:
            step.fit_batch(scores, labels, warn=False)
            scores = InputBatch(probabilities=step._predict(scores))
            total.converged &= step.diagnostics_.converged
            total.iterations += step.diagnostics_.iterations
            messages.append(f"{step.method}: {step.diagnostics_.message}")
        total.message = "; ".join(messages)
        return total

    def _predict(self, scores: InputBatch) -> np.ndarray:
        for step in self.steps:
            scores = InputBatch(probabilities=step._predict(scores))
        return scores.probabilities

    def _params(self) -> dict:
        return {"steps": [step.to_dict() for step in self.steps]}

    def _set_params(self, params: dict) -> None:
        stored = params.get("steps")
        if not isinstance(stored, list) or len(stored) != len(self.steps):
            raise ValueError(f"stored composition needs {len(self.steps)} fitted steps")
        self.steps = [from_dict(step) for step in stored]

    def summary(self) -> dict:
        return {"steps": [{"method": s.method, **s.summary()} for s in self.steps]}
