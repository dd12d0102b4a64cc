"""``compare(..., only_folds=...)``: the folds run apart concatenate to the whole comparison (what
the service's fan-out relies on)."""

from __future__ import annotations

import math

import pytest

import calibration as cal
from tests.helpers import make_reference_input


def test_folds_run_apart_concatenate_to_the_whole():
    logits, labels = make_reference_input(n=600, k=4, seed=2)
    methods = ["temperature", "isotonic_multiclass", "vector"]
    whole = cal.compare(logits, labels, methods, folds=4, seed=3)
    parts = [cal.compare(logits, labels, methods, folds=4, seed=3, only_folds=[fold]) for fold in range(4)]
    for metric in whole.uncalibrated:
        if metric != "fit_seconds":
            assert [v for p in parts for v in p.uncalibrated[metric]] == whole.uncalibrated[metric]
    assert [v for p in parts for v in p.reference_nll] == whole.reference_nll
    for index, result in enumerate(whole.results):
        assert [v for p in parts for v in p.results[index].tail_risk] == result.tail_risk
        for metric, values in result.per_fold.items():
            if metric != "fit_seconds":
                joined = [v for p in parts for v in p.results[index].per_fold[metric]]
                assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(joined, values, strict=True))


def test_only_folds_must_name_folds():
    logits, labels = make_reference_input(n=100, k=3, seed=0)
    with pytest.raises(ValueError, match="only_folds"):
        cal.compare(logits, labels, ["temperature"], folds=3, only_folds=[3])
