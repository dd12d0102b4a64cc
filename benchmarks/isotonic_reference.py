"""Isotonic maps against scikit-learn's exact PAVA (issue #35 item 7), before and after.

On every shared set (``<data>/*_val.npz``: fitted on the validation split, predicted on the test
split), IRM and IROvA as ``calibration`` fits them and as scikit-learn's
``IsotonicRegression(out_of_bounds="clip")`` does (IRM: one map on all ``(p_ij, [y_i = j])``, then
``g(p) + 1e-9·p`` normalised, as Mix-n-Match's code; IROvA: one map per class, normalised, a row
mapped to all zeros uniform): the knots (IRM: ours / scikit-learn's; IROvA: in all classes, and the
classes whose knots differ: another count, or a knot more than 1e-12 away), the largest
``|Δp|`` between the two on the test split, and the mean NLL on the validation and test splits
as the relative difference ours − scikit-learn's with a paired bootstrap 95% interval (2000
resamples of rows). NLL floors the true class's probability at 1e-12 (log(1/ε) = 27.6 nats), so
that a probability of exactly 0 (IROvA on test rows) counts but stays finite; the rows at 0 are
counted.

"before" is the ``calibration`` package of another revision (``--before``, default ``main``,
taken with ``git archive`` and imported in a subprocess), "after" the working tree's::

    python benchmarks/isotonic_reference.py --before main [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FLOOR = 1e-12
RESAMPLES = 2000


def sklearn_probabilities(p_val, labels, p_test, method):
    """Scikit-learn's fit on the validation split: (validation, test) probabilities and the knots."""
    from sklearn.isotonic import IsotonicRegression

    onehot = (np.arange(p_val.shape[1])[None, :] == labels[:, None]).astype(np.float64)

    def fitted(x, y):
        return IsotonicRegression(out_of_bounds="clip").fit(x, y)

    def normalised(mapped):
        sums = mapped.sum(axis=1, keepdims=True)
        mapped = np.where(sums > 0, mapped, 1.0)
        return mapped / mapped.sum(axis=1, keepdims=True)

    if method == "isotonic_multiclass":
        g = fitted(p_val.ravel(), onehot.ravel())
        out = [normalised(g.predict(p.ravel()).reshape(p.shape) + 1e-9 * p) for p in (p_val, p_test)]
        return out, [(g.X_thresholds_, g.y_thresholds_)]
    maps = [fitted(p_val[:, j], onehot[:, j]) for j in range(p_val.shape[1])]
    out = [normalised(np.stack([g.predict(p[:, j]) for j, g in enumerate(maps)], axis=1)) for p in (p_val, p_test)]
    return out, [(g.X_thresholds_, g.y_thresholds_) for g in maps]


def row_nll(p, labels):
    return -np.log(np.maximum(p[np.arange(len(labels)), labels], FLOOR))


def relative_difference(ours, theirs, rng):
    """Mean of ``ours - theirs`` over the sklearn mean, with a paired bootstrap 95% interval."""
    diff, base = ours - theirs, theirs.mean()
    boot = []
    for _ in range(0, RESAMPLES, 100):  # 100 resamples at a time
        rows = rng.integers(0, len(diff), (100, len(diff)))
        boot.append(diff[rows].mean(axis=1) / theirs[rows].mean(axis=1))
    boot = np.concatenate(boot)
    return [diff.mean() / base, *np.quantile(boot, [0.025, 0.975]).tolist()]


def measure(data: Path) -> dict:
    """Every set's numbers for the ``calibration`` this interpreter imports."""
    import calibration as cal

    def load(path):
        with np.load(path) as d:
            kind = "logits" if "logits" in d else "probabilities"
            return kind, d["logits" if kind == "logits" else "probs"], d["labels"]

    out = {"calibration": cal.__file__, "sets": {}}
    for val_path in sorted(data.glob("*_val.npz")):
        name = val_path.name.removesuffix("_val.npz")
        kind, x_val, y_val = load(val_path)
        _, x_test, y_test = load(data / f"{name}_test.npz")
        p_val = cal.validate_inputs(x_val, kind).probabilities
        p_test = cal.validate_inputs(x_test, kind).probabilities
        rng = np.random.default_rng(0)
        for method in ("isotonic_multiclass", "isotonic_one_vs_all"):
            ours = cal.create(method, {"input": kind}).fit(x_val, y_val)
            knots = [(ours.knots_x_, ours.knots_y_)] if method == "isotonic_multiclass" else ours.knots_
            (ref_val, ref_test), ref_knots = sklearn_probabilities(p_val, y_val, p_test, method)
            ours_val, ours_test = ours.predict_proba(x_val), ours.predict_proba(x_test)
            differing = sum(len(a) != len(b) or max(np.abs(a - b).max(), np.abs(c - d).max()) > 1e-12
                            for (a, c), (b, d) in zip(knots, ref_knots, strict=True))
            out["sets"][f"{name}|{method}"] = {
                "knots": sum(len(a) for a, _ in knots), "sklearn_knots": sum(len(b) for b, _ in ref_knots),
                "maps_differing": int(differing), "maps": len(knots),
                "max_dp_test": float(np.abs(ours_test - ref_test).max()),
                "sets_over_1e-6": bool(np.abs(ours_test - ref_test).max() > 1e-6),
                "nll_val": [float(row_nll(ours_val, y_val).mean()), float(row_nll(ref_val, y_val).mean())],
                "nll_test": [float(row_nll(ours_test, y_test).mean()), float(row_nll(ref_test, y_test).mean())],
                "zeros_test": [int(np.sum(ours_test[np.arange(len(y_test)), y_test] == 0)),
                               int(np.sum(ref_test[np.arange(len(y_test)), y_test] == 0))],
                "rel_val": relative_difference(row_nll(ours_val, y_val), row_nll(ref_val, y_val), rng),
                "rel_test": relative_difference(row_nll(ours_test, y_test), row_nll(ref_test, y_test), rng),
            }
    return out


def before(revision: str, data: Path) -> dict:
    """``measure`` on ``revision``'s ``calibration`` package, in a subprocess that imports it."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "calibration"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", "--data", str(data)],
                              cwd=tmp, env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"},
                              check=True, capture_output=True, text=True)
        result = json.loads(done.stdout)
        if not result["calibration"].startswith(tmp):
            raise RuntimeError(f"the subprocess imported {result['calibration']}, not {revision}'s package")
        return result


def percent(values) -> str:
    mean, low, high = (100 * v for v in values)
    if max(abs(low), abs(high)) < 5e-9:
        return f"{mean:+.1e}%"
    return f"{mean:+.2e}% [{low:+.2e}, {high:+.2e}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--before", default="main", help="git revision whose calibration package is 'before'")
    parser.add_argument("--measure", action="store_true", help="print this interpreter's numbers as JSON")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.data.resolve())))
        return
    sys.path.insert(0, str(REPO))
    from benchmarks._common import environment, write

    old, new = before(args.before, args.data.resolve()), measure(args.data.resolve())
    header = ["set", "method", "knots ours/sklearn (before)", "knots ours/sklearn (after)",
              "maps differing before/after", "max abs Δp test (before)", "max abs Δp test (after)",
              "val NLL sklearn", "Δ val NLL (before)", "Δ val NLL (after)",
              "test NLL sklearn", "Δ test NLL (before)", "Δ test NLL (after)",
              "test rows at p = 0: sklearn/before/after"]
    rows = []
    for key, after in new["sets"].items():
        was = old["sets"][key]
        name, method = key.split("|")
        rows.append([name, "IRM" if method == "isotonic_multiclass" else "IROvA",
                     f"{was['knots']}/{was['sklearn_knots']}", f"{after['knots']}/{after['sklearn_knots']}",
                     f"{was['maps_differing']}/{after['maps_differing']} of {after['maps']}",
                     f"{was['max_dp_test']:.2e}", f"{after['max_dp_test']:.2e}",
                     f"{after['nll_val'][1]:.4f}", percent(was["rel_val"]), percent(after["rel_val"]),
                     f"{after['nll_test'][1]:.4f}", percent(was["rel_test"]), percent(after["rel_test"]),
                     f"{after['zeros_test'][1]}/{was['zeros_test'][0]}/{after['zeros_test'][0]}"])
    over = [sum(r["sets_over_1e-6"] for r in run["sets"].values()) for run in (old, new)]
    notes = (f"Command: `python benchmarks/isotonic_reference.py --before {args.before}` "
             f"(before: `{args.before}`'s calibration package; after: the working tree). "
             f"Maps whose test probabilities differ from scikit-learn's by more than 1e-6: "
             f"{over[0]} of {len(rows)} before, {over[1]} after. Δ NLL is (ours − scikit-learn's) / "
             f"scikit-learn's mean NLL, with a paired bootstrap 95% interval over rows ({RESAMPLES} "
             f"resamples); NLL floors the true class's probability at {FLOOR:g}.")
    write("isotonic_reference", "Isotonic maps vs scikit-learn's exact PAVA, before and after issue #35 item 7",
          header, rows, environment(["numpy", "scipy", "scikit-learn"]), notes)


if __name__ == "__main__":
    main()
