"""``auto`` on float32 input: its cross-validation folds index the float32 array (no float64
copy of the whole batch), and it chooses the same method with the same parameters as on the
float64 copy."""

import numpy as np
import pytest

import calibration as cal
from tests.core.memory import synthetic, traced_peak
from tests.helpers import DATA

CANDIDATES = ["temperature", "expectation_consistency", "ensemble_temperature"]


def test_auto_on_float32_holds_no_float64_copy():
    """The folds are the comparison's, whatever the candidates: temperature scaling alone (each
    candidate's own float32 fit is bounded in test_float32_memory.py). 2.5x; 5.5x with a float64
    copy of the input in the comparison."""
    logits, labels = synthetic(10000, 100)
    x = logits.astype(np.float32)
    peak = traced_peak(lambda: cal.create("auto", {"candidates": ["temperature"]}).fit(x, labels))
    assert peak < 3.0 * x.nbytes  # the float32 folds (1x); a float64 copy alone is 2x


def without_fit_time(params):
    chosen = {**params["chosen"], "diagnostics": {**params["chosen"]["diagnostics"], "seconds": None}}
    return {**params, "chosen": chosen}


@pytest.mark.parametrize("kind", ["probabilities", "logits"])
def test_auto_on_float32_data_chooses_as_on_its_float64_copy(kind):
    # float32 probabilities; 1500 rows (was 3000): one row block either way (3000 x 100 is under
    # BLOCK_ENTRIES), so the same paths, and the comparison is bit for bit at any size
    with np.load(DATA / "cifar100_wrn16-4_val.npz") as data:
        probabilities, labels = data["probs"][:1500], data["labels"][:1500]
    x = probabilities if kind == "probabilities" else np.log(np.maximum(probabilities, 1e-30)).astype(np.float32)
    assert x.dtype == np.float32
    options = {"input": kind, "candidates": CANDIDATES}
    narrow = cal.create("auto", options).fit(x, labels)
    wide = cal.create("auto", options).fit(x.astype(np.float64), labels)
    assert narrow.summary()["chosen"] == wide.summary()["chosen"]
    assert without_fit_time(narrow.to_dict()["params"]) == without_fit_time(wide.to_dict()["params"])
    for mine, theirs in zip(narrow.comparison_.results, wide.comparison_.results, strict=True):
        assert {m: v for m, v in mine.per_fold.items() if m != "fit_seconds"} == {
            m: v for m, v in theirs.per_fold.items() if m != "fit_seconds"}
        assert mine.tail_risk == theirs.tail_risk
    np.testing.assert_allclose(narrow.predict_proba(x), wide.predict_proba(x.astype(np.float64)), rtol=0, atol=1e-12)
