"""Comparisons of methods by cross-validation, in the request or as a background job, on domain
values (a decoded batch of ``CompareSpec``); the service's part that ``/v1/compare`` uses."""

from __future__ import annotations

import numpy as np

import calibration as cal

from ..jobs.inputs import job_input
from ..jobs.runner import JobProgress
from ..platform.errors import refused_as
from ..registry.serving import Serving
from ..wire.batches import ArrayBatch, validated
from ..wire.costs import check_fit_parameters, estimated_fit_seconds
from .values import CompareSpec


class Comparisons:
    def __init__(self, service: Serving):
        self.service = service

    def _comparison_inputs(self, batch: ArrayBatch[CompareSpec]):
        """The fields, validated inputs, labels and candidates of a comparison, checked once."""
        inputs, labels = validated(batch)
        fields = batch.fields
        with refused_as():
            candidates = cal.prepare_comparison(inputs.n, inputs.k, fields.methods, fields.folds, inputs.source)
        check_fit_parameters("auto", {"candidates": [c.to_dict() for c in candidates], "folds": fields.folds,
                                      "input": inputs.source}, inputs.n, inputs.k, self.service.max_parameters,
                             self.service.limits.entries)
        return fields, inputs, labels, candidates

    def compare(self, batch: ArrayBatch[CompareSpec]) -> dict:
        return self._run_comparison(*self._comparison_inputs(batch)[:3])

    def compare_or_submit(self, batch: ArrayBatch[CompareSpec], asked: bool) -> tuple[bool, dict]:
        """Check the comparison once, then ``(True, job)`` when the caller ``asked`` for a job or
        its estimated cost exceeds the sync budget, else ``(False, the comparison)``."""
        fields, inputs, labels, candidates = self._comparison_inputs(batch)
        # every candidate on every fold, and the reference temperature scaling of the selection's guards
        seconds = sum(estimated_fit_seconds(c.method, c.options, inputs.n, inputs.k)
                      for c in [*candidates, cal.candidate("temperature")]) * fields.folds
        if self.service.jobs is not None and (asked or seconds > self.service.sync_budget_seconds):
            request, payload = job_input(batch, labels, fields.to_dict())
            return True, self.service.jobs.submit("compare", None, request, payload)
        return False, self._run_comparison(fields, inputs, labels)

    def compare_as_job(self, batch: ArrayBatch[CompareSpec], job: JobProgress, fan_out=None) -> dict:
        """The comparison of a job; with ``fan_out(x, labels, methods, folds, seed, kind) -> Comparison``
        (``app.jobs.fan_out``), as part jobs, merged."""
        fields, inputs, labels, _ = self._comparison_inputs(batch)
        if fan_out is not None:
            return self._selected(fields, fan_out(getattr(inputs, inputs.source), labels, fields.methods,
                                                  fields.folds, fields.seed, inputs.source))
        return self._run_comparison(fields, inputs, labels, progress=job.folds)

    def _run_comparison(self, fields: CompareSpec, inputs: cal.InputBatch, labels: np.ndarray,
                        progress=None) -> dict:
        with refused_as():
            comparison = cal.compare(getattr(inputs, inputs.source), labels, fields.methods, fields.folds,
                                     fields.seed, inputs.source, progress)
        return self._selected(fields, comparison)

    @staticmethod
    def _selected(fields: CompareSpec, comparison: cal.Comparison) -> dict:
        try:
            chosen = cal.select(comparison, fields.preserve_accuracy).to_dict()
        except ValueError:
            chosen = None
        return cal.json_safe({**comparison.to_dict(), "selection": chosen})
