"""Issue #19: ``trust_exact.LeanSubproblem`` is scipy's ``trust-exact`` step for step, holding three
n×n matrices instead of five: the same iterates, bit for bit, on non-convex problems whose
subproblems take every branch (failed factorisations, trial shifts, steps inside the region)
and on vector-scaling fits of real classifier outputs; and a lower traced peak."""

import tracemalloc

import numpy as np
import pytest
import scipy
from scipy.optimize import minimize, rosen, rosen_der, rosen_hess

import calibration as cal
from calibration import trust_exact
from calibration.trust_exact import LeanSubproblem, minimize_trust_exact
from tests.helpers import load_split


def both(fun, x0, hess, options):
    lean = minimize_trust_exact(fun, x0, hess, options)
    scipy = minimize(fun, x0, jac=True, hess=hess, method="trust-exact", options=options)
    return lean, scipy


def same(lean, scipy):
    np.testing.assert_array_equal(lean.x, scipy.x)
    assert (lean.fun, lean.nit, lean.status) == (scipy.fun, scipy.nit, scipy.status)


def test_lean_subproblem_is_in_use_with_the_scipy_it_copies():
    if scipy.__version__ != "1.17.1":
        pytest.skip(f"scipy {scipy.__version__}: LEAN is on only where solve's source is the copied one")
    assert trust_exact.LEAN


def test_a_float32_hessian_and_a_missing_one_are_scipy_s_business():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((12, 12))
    hessian = (a @ a.T - 3 * np.eye(12)).astype(np.float32)  # indefinite: shifted factorisations

    def quartic(x):
        return 0.5 * x @ hessian @ x + 0.25 * np.sum(x ** 4), hessian @ x + x ** 3

    for _ in range(10):
        same(*both(quartic, rng.standard_normal(12), lambda x: hessian + np.diag(3 * x ** 2).astype(np.float32),
                   {"gtol": 1e-8}))
    with pytest.raises(ValueError, match="Hessian"):
        minimize_trust_exact(quartic, np.ones(12), "2-point", {})


def test_every_branch_of_the_subproblem_gives_scipy_s_iterates(monkeypatch):
    branches = set()
    failed, singular = LeanSubproblem._singular_leading_submatrix, LeanSubproblem._factor

    def record_failure(self, shift, U, k):
        branches.add("factorisation failed")
        return failed(self, shift, U, k)

    def record_factor(self, lam):
        result = singular(self, lam)
        branches.add("factored" if result[1] == 0 else "not positive definite")
        return result

    monkeypatch.setattr(LeanSubproblem, "_singular_leading_submatrix", record_failure)
    monkeypatch.setattr(LeanSubproblem, "_factor", record_factor)
    rng = np.random.default_rng(0)

    def rosenbrock(x):
        return rosen(x), rosen_der(x)

    for start in range(12):  # the Rosenbrock function: indefinite Hessians away from its valley
        x0 = rng.uniform(-2, 2, 4 + start)
        same(*both(rosenbrock, x0, rosen_hess, {"gtol": 1e-10, "maxiter": 500}))
    a = rng.standard_normal((30, 30))
    quartic_hessian = a @ a.T / 30 - 2 * np.eye(30)  # indefinite at the start: a non-convex quartic

    def quartic(x):
        return 0.5 * x @ quartic_hessian @ x + 0.25 * np.sum(x ** 4), quartic_hessian @ x + x ** 3

    for _ in range(5):
        x0 = rng.standard_normal(30)
        same(*both(quartic, x0, lambda x: quartic_hessian + np.diag(3 * x ** 2), {"gtol": 1e-12}))
    assert branches == {"factored", "not positive definite", "factorisation failed"}


@pytest.mark.parametrize("name", ["cifar10_resnet50_cross_entropy", "cifar100_wrn16-4"])
def test_vector_scaling_fits_equal_scipy_s_trust_exact(name, monkeypatch):
    kind, x, labels = load_split(name, "val")
    lean = cal.create("vector", {"input": kind}).fit(x, labels)
    monkeypatch.setattr(trust_exact, "LEAN", False)  # scipy's own trust-exact
    plain = cal.create("vector", {"input": kind}).fit(x, labels)
    np.testing.assert_array_equal(lean.weights_, plain.weights_)
    np.testing.assert_array_equal(lean.bias_, plain.bias_)
    assert lean.diagnostics_.iterations == plain.diagnostics_.iterations


def test_vector_scaling_on_many_classes_holds_fewer_hessian_sized_matrices(monkeypatch):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 400, 400)
    logits = rng.standard_normal((400, 400))
    logits[np.arange(400), labels] += 4.0
    hessian_bytes = (2 * 400) ** 2 * 8  # 5 MB; the logits are 1.3 MB
    batch = cal.validate_inputs(logits / 0.5, "logits")

    def peak(lean: bool):
        monkeypatch.setattr(trust_exact, "LEAN", lean)
        tracemalloc.start()
        fitted = cal.create("vector", {"input": "logits", "max_iterations": 3}).fit_batch(batch, labels, warn=False)
        try:
            return tracemalloc.get_traced_memory()[1], fitted
        finally:
            tracemalloc.stop()

    (lean_peak, lean), (plain_peak, plain) = peak(True), peak(False)
    np.testing.assert_array_equal(lean.weights_, plain.weights_)
    assert plain_peak - lean_peak > hessian_bytes  # 5.0 -> 3.8 of them (the fit's own, building the next, are left)
