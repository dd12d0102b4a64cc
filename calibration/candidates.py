"""The candidates of a comparison: a label, a registry method and its options.

Default candidates (``default_candidates``): temperature, ensemble_temperature,
expectation_consistency, isotonic_multiclass, isotonic_one_vs_all and IROvA-TS always
(platt too when k = 2); vector scaling when ``n >= 10 · 2k`` and Dirichlet calibration when
``n >= 10 · (k² + k)`` (at least ten samples per fitted parameter). Matrix scaling is not a
default: it has Dirichlet's parameter count, and unregularised on logits its optimum often
does not exist (on cifar10_resnet50_cross_entropy it does not converge in 1000 iterations).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .registry import METHODS, create

SAMPLES_PER_PARAMETER = 10
MAX_CANDIDATES = 20  # each is fitted once per fold

#: Named candidates beyond plain registry methods.
NAMED_CANDIDATES: dict[str, dict] = {
    "irova_ts": {
        "method": "composition",
        "options": {"steps": [{"method": "temperature"}, {"method": "isotonic_one_vs_all"}]},
    },
}


@dataclass(frozen=True)
class Candidate:
    """A method to try: a label, a registry method and its options."""

    name: str
    method: str
    options: dict = field(default_factory=dict)

    def create(self, input_kind: str):
        return create(self.method, {**self.options, "input": input_kind})

    def to_dict(self) -> dict:
        return {"name": self.name, "method": self.method, "options": self.options}


def candidate(spec) -> Candidate:
    """A candidate from a name (``"irova_ts"`` or any registry method with default options) or
    a ``{"method", "options", "name"}`` object."""
    if isinstance(spec, str):
        if spec in NAMED_CANDIDATES:
            return Candidate(spec, **NAMED_CANDIDATES[spec])
        spec = {"method": spec}
    if not isinstance(spec, dict) or "method" not in spec or set(spec) - {"method", "options", "name"}:
        raise ValueError("a candidate is a method name or an object with 'method' and optional 'options', 'name'")
    method, options = spec["method"], spec.get("options") or {}
    if method == "auto":
        raise ValueError("'auto' cannot be a candidate of itself")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    if not isinstance(options, dict) or "input" in options:
        raise ValueError(f"options of candidate {method!r} must be an object without 'input'")
    name = spec.get("name") or method
    if not isinstance(name, str):
        raise ValueError("a candidate's name must be a string")
    return Candidate(name, method, dict(options))


def default_candidates(n: int, k: int) -> list[Candidate]:
    """The default candidate set for ``n`` samples of ``k`` classes (rule in the module docstring)."""
    names = ["temperature", "ensemble_temperature", "expectation_consistency",
             "isotonic_multiclass", "isotonic_one_vs_all", "irova_ts"]
    if k == 2:
        names.append("platt")
    if n >= SAMPLES_PER_PARAMETER * 2 * k:
        names.append("vector")
    if n >= SAMPLES_PER_PARAMETER * (k * k + k):
        names.append("dirichlet")
    return [candidate(name) for name in names]
