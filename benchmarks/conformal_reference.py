"""Reference values of split-conformal prediction sets computed by MAPIE and TorchCP on every set of
../shared/data (validation split = calibration rows, test split = test rows), for
alpha in {0.05, 0.1, 0.2}: thresholds, mean set sizes and coverage, stored as JSON in
benchmarks/results/conformal_reference.json with the libraries' versions and the conventions used;
tests/core/test_conformal_reference.py compares ``calibration.conformal`` to them.

Probabilities (the same function as the tests, ``tests.helpers.conformal_probabilities``): float64
softmax of the stored logits, or the stored float32 probabilities in float64 divided by their row
sums. Both libraries get these probabilities (TorchCP with ``score_type="identity"``, MAPIE through a
prefit estimator whose ``predict_proba`` returns its input), so every number compares like for like.

**TorchCP** (``SplitPredictor`` / ``ClassConditionalPredictor``, ``calculate_threshold`` then
``predict_with_logits``): threshold = the ``ceil((n + 1)(1 - alpha))``-th smallest calibration score
(``+inf`` when that exceeds ``n``), set = ``{y : s(x, y) <= q}``. Scores LAC, APS and RAPS with
``randomized=False`` (TorchCP's randomised scores draw from torch's global generator, one uniform per
entry at prediction: not reproducible outside torch). Class-conditional LAC and APS. The script sets
torch's default dtype to float64: otherwise ``ClassConditionalPredictor`` stores the thresholds in a
float32 tensor and takes ``alpha`` as a float32 tensor, so ``(n_j + 1)(1 - alpha)`` can round across an
integer and pick a neighbouring order statistic.

**MAPIE** (``SplitConformalClassifier(prefit=True, random_state=0)``): LAC (quantile = the same order
statistic, ``np.quantile(..., method="lower")``; set = ``{y : 1 - p_y - q <= 1e-8}``: MAPIE's
``EPSILON`` tolerance, so entries whose score lies in ``(q, q + 1e-8]`` are in MAPIE's sets and not in
the exact rule: their count is stored as ``entries_within_epsilon``) and APS with
``include_last_label="randomized"``. MAPIE's APS calibration scores are always randomised,
``cumsum - u p_y`` with ``u = RandomState(0).uniform(size=n)``, and its randomised sets keep the last
label iff ``u' >= (cumsum_last - q) / p_last`` with ``u' = RandomState(0).uniform(size=n_test)``: the
rule ``{y : cumsum_y - u' p_y <= q}`` with one uniform per row, which ``calibration.conformal`` computes
with those uniforms given explicitly.

TorchCP needs torchvision, transformers, torch_geometric and torchsort for modules unrelated to
classification sets; it is installed without dependencies (``pip install --no-deps torchcp tqdm``),
the two missing packages its package ``__init__`` imports are stubbed with empty modules, and
nothing of them is called.

Run: ``flock /tmp/cpu.lock .venv/bin/python benchmarks/conformal_reference.py`` (needs
``pip install mapie`` and the TorchCP install above, in the venv only, not project dependencies).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
import types
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers import DATASETS, conformal_probabilities

ALPHAS = [0.05, 0.1, 0.2]
SEED = 0
OUT = Path(__file__).resolve().parent / "results" / "conformal_reference.json"


def raps_options(k: int) -> dict:
    """RAPS's ``k_reg`` and ``lam``: Angelopoulos et al.'s ImageNet defaults (5, 0.01) for 100 classes;
    (1, 0.1) for 10 classes."""
    return {"k_reg": 1, "lam": 0.1} if k <= 10 else {"k_reg": 5, "lam": 0.01}


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for TorchCP's imports unrelated to classification sets."""

    ROOTS = ("torchsort", "torch_geometric", "torchvision", "transformers")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attribute: type(attribute, (), {})
        return module

    def exec_module(self, module):
        pass


def torchcp_rows(pc, yc, pt, yt) -> dict:
    import torch

    sys.meta_path.insert(0, _Stub())
    from torchcp.classification.predictor import ClassConditionalPredictor, SplitPredictor
    from torchcp.classification.score import APS, LAC, RAPS

    torch.set_default_dtype(torch.float64)
    k = pc.shape[1]
    scores = {"lac": LAC(score_type="identity"), "aps": APS(score_type="identity", randomized=False),
              "raps": RAPS(score_type="identity", randomized=False, penalty=raps_options(k)["lam"],
                           kreg=raps_options(k)["k_reg"])}
    cal_p, cal_y, test_p = torch.from_numpy(pc), torch.from_numpy(yc), torch.from_numpy(pt)
    out = {}
    for predictor_class, prefix, names in ((SplitPredictor, "", ("lac", "aps", "raps")),
                                           (ClassConditionalPredictor, "class_conditional_", ("lac", "aps"))):
        for name in names:
            rows = []
            for alpha in ALPHAS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    predictor = predictor_class(scores[name], alpha=alpha)
                    predictor.calculate_threshold(cal_p, cal_y, alpha)
                    sets = predictor.predict_with_logits(test_p).numpy().astype(bool)
                q = predictor.q_hat
                q = [float(v) for v in q.tolist()] if prefix else float(q)
                rows.append({"alpha": alpha, "threshold": _plain(q), **_size_and_coverage(sets, yt)})
            out[prefix + name] = rows
    return out


def mapie_rows(pc, yc, pt, yt) -> dict:
    from mapie.classification import SplitConformalClassifier
    from sklearn.base import BaseEstimator, ClassifierMixin

    class GivenProbabilities(ClassifierMixin, BaseEstimator):
        def fit(self, x, y):
            self.classes_ = np.arange(x.shape[1])
            return self

        def predict_proba(self, x):
            return np.asarray(x)

        def predict(self, x):
            return np.argmax(x, axis=1)

    estimator = GivenProbabilities().fit(pc, yc)
    levels = [1 - a for a in ALPHAS]
    out = {}
    for name, params in (("lac", {}), ("aps_randomized", {"include_last_label": "randomized"})):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mapie = SplitConformalClassifier(estimator, confidence_level=levels, conformity_score=name[:3],
                                             prefit=True, random_state=SEED)
            mapie.conformalize(pc, yc)
            _, sets = mapie.predict_set(pt, conformity_score_params=params or None)
        rows = []
        for j, alpha in enumerate(ALPHAS):
            q = float(np.ravel(mapie._mapie_classifier.quantiles_)[j])
            row = {"alpha": alpha, "threshold": q, **_size_and_coverage(sets[:, :, j], yt)}
            if name == "lac":
                excess = (1.0 - pt) - q
                row["entries_within_epsilon"] = int(((excess > 0) & (excess <= 1e-8)).sum())
            rows.append(row)
        out[name] = rows
    return out


def _plain(q):
    return [_plain(v) for v in q] if isinstance(q, list) else (None if not np.isfinite(q) else q)


def _size_and_coverage(sets: np.ndarray, labels: np.ndarray) -> dict:
    return {"mean_set_size": float(sets.sum(axis=1).mean()), "total_set_size": int(sets.sum()),
            "coverage": float(sets[np.arange(len(labels)), labels].mean())}


def main() -> None:
    results = {}
    for name in DATASETS:
        pc, yc = conformal_probabilities(name, "val")
        pt, yt = conformal_probabilities(name, "test")
        results[name] = {"n_calibration": len(yc), "n_test": len(yt), "raps": raps_options(pc.shape[1]),
                         "torchcp": torchcp_rows(pc, yc, pt, yt), "mapie": mapie_rows(pc, yc, pt, yt)}
        print(name, json.dumps({lib: {m: [round(r["mean_set_size"], 3) for r in rows]
                                      for m, rows in results[name][lib].items()} for lib in ("torchcp", "mapie")}))
    document = {
        "provenance": {
            "script": "benchmarks/conformal_reference.py", "data": "../shared/data (val = calibration, test = test)",
            "versions": {p: version(p) for p in ("mapie", "torchcp", "torch", "numpy", "scikit-learn")},
            "alphas": ALPHAS, "mapie_random_state": SEED,
            "conventions": "see the script's docstring; null thresholds are +inf (all classes)"},
        "sets": results,
    }
    OUT.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
