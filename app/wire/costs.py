"""Coarse estimates of what work will cost, made before it starts, and the request budgets
they are checked against.

* A fit or comparison estimated past ``CALIBRATION_SYNC_BUDGET_SECONDS`` runs as a job
  instead of in the request (``estimated_fit_seconds``).
* A fit whose method would store more than ``CALIBRATION_MAX_PARAMETERS`` fitted numbers is
  refused up front (``check_fit_parameters``, 422): the count is an upper bound from n, k and
  the options (``fitted_parameters``), so Dirichlet calibration of 100000 classes on 3 rows is
  a 422 naming the limit, not a MemoryError.
* Bodies are capped by ``RequestLimits`` (decoded array bytes, JSON bytes, n·k entries), checked
  by ``app.wire.decoding`` from the ``.npy`` headers and declared sizes before any array is decoded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import calibration as cal

from ..platform.errors import InvalidInput

# Defaults of the request budgets (settings CALIBRATION_MAX_*; docs/operations.md "Configuration").
# 256 MiB of decoded arrays: four times the 64 MiB body limit, so that any honest .npz (whose
# compression rarely beats 4:1 on float data) passes, while a zip bomb's declared size is refused.
MAX_ARRAY_BYTES = 256 << 20
# 16 MiB of array-carrying JSON: each number costs ~20 bytes of text and a 24-byte Python float
# plus an 8-byte list slot when parsed; a 64 MiB body peaked at 1.5 GiB, 16 MiB stays near 400 MiB.
MAX_JSON_BYTES = 16 << 20
# 2**24 entries (n·k): a 64 MiB float32 body holds exactly that; each float64 copy the core makes
# of it is 128 MiB (an int8 body of the same size would be 64 million entries, 512 MiB per copy).
MAX_ENTRIES = 1 << 24
# 2 million fitted numbers: ~40 MB of canonical JSON in the stored row and the cache.
MAX_PARAMETERS = 2_000_000


@dataclass(frozen=True)
class RequestLimits:
    """What a request body may hold, checked before it is decoded: its bytes, the bytes of the
    arrays it decodes to, the bytes of array-carrying JSON, and n·k entries."""

    body_bytes: int
    array_bytes: int = MAX_ARRAY_BYTES
    json_bytes: int = MAX_JSON_BYTES
    entries: int = MAX_ENTRIES


# Seconds per input entry (n·k) of one fit, by method: coarse figures measured on this
# project's 2-core machine (5000x10 and 50000x100 sets, fit plus validation report), the basis of
# the sync budget's estimate; a method not listed counts as the slowest.
SECONDS_PER_ENTRY = {
    "temperature": 2e-7, "expectation_consistency": 2e-7, "platt": 2e-7, "histogram_binning": 3e-7,
    "ensemble_temperature": 1e-6, "isotonic_multiclass": 4e-7, "isotonic_one_vs_all": 6e-7,
    "class_temperature": 1e-6, "composition": 1e-6, "vector": 4e-6,
}
SECONDS_PER_ENTRY_AND_CLASS = {"matrix": 4e-7, "dirichlet": 4e-7}  # k² parameters


def estimated_fit_seconds(method: str, options: dict, n: int, k: int) -> float:
    """A coarse estimate of a fit's cost; ``auto`` counts its cross-validation (every candidate and
    the guards' reference temperature scaling on each fold, then the refit). Options the fit itself
    will refuse count as free: the fit then runs in the request and answers with the precise error."""
    if method == "auto":
        try:
            candidates = cal.prepare_comparison(n, k, options.get("candidates") or None, options.get("folds", 5),
                                                options.get("input", "logits"))
        except ValueError:
            return 0.0
        folds = options.get("folds", 5)
        reference = estimated_fit_seconds("temperature", {}, n, k) * folds
        return sum(estimated_fit_seconds(c.method, c.options, n, k) for c in candidates) * (folds + 1) + reference
    if method in SECONDS_PER_ENTRY_AND_CLASS:
        return SECONDS_PER_ENTRY_AND_CLASS[method] * n * k * k
    seconds = SECONDS_PER_ENTRY.get(method, max(SECONDS_PER_ENTRY.values())) * n * k
    if method == "vector":
        # its exact Hessian costs n·(2k)² per iteration: 67 s for 3000 x 1000 (26 iterations), 2.2e-8 n·k²
        seconds = max(seconds, 2.5e-8 * n * k * k)
    if method == "class_temperature":
        # every round tries each grid temperature for each class: the measured figure (at the default
        # 41 x 10) scaled by grid_size x max_rounds, plus ~1.5 µs per try (0.37 s for 1000 x 100 on 40 x 3)
        tries = options.get("grid_size", 41) * options.get("max_rounds", 10)
        seconds = seconds * max(1.0, tries / 410) + 1.5e-6 * tries * k
    if method == "composition":
        steps = options.get("steps") or []
        seconds = max(seconds, sum(estimated_fit_seconds(step.get("method", ""), step.get("options") or {}, n, k)
                                   for step in steps if isinstance(step, dict)))
    return seconds


@lru_cache(maxsize=64)
def isotonic_blocks(pairs: int) -> int:
    """The most constant blocks an isotonic fit of ``pairs`` 0/1 targets can have: their values
    increase strictly and each is a fraction a/b of its block's size b, so B blocks need the B
    smallest denominators of distinct fractions in [0, 1] (φ(d) of denominator d, plus 0 and 1),
    summing to at most ``pairs``; about 0.9·pairs^(2/3)."""
    blocks, left, d = 0, pairs, 1
    while left >= d:
        count = 2 if d == 1 else sum(1 for a in range(1, d) if math.gcd(a, d) == 1)
        take = min(count, left // d)
        blocks, left = blocks + take, left - take * d
        if take < count:
            break
        d += 1
    return max(blocks, 1)


def fitted_parameters(method: str, options: dict, n: int, k: int) -> int:
    """An upper bound on the numbers a fit of ``method`` stores for ``n`` rows of ``k`` classes
    (binary scores count as k = 2). Isotonic maps store two knots (x and y each) per constant
    block (``isotonic_blocks``); a histogram k·n_bins values and k·(n_bins + 1) edges; ``auto``
    its largest candidate; ``composition`` the sum of its steps."""
    if method == "auto":
        candidates = cal.prepare_comparison(n, k, options.get("candidates") or None, options.get("folds", 5),
                                            options.get("input", "logits"))
        return 3 + max(fitted_parameters(c.method, c.options, n, k) for c in candidates)
    if method == "composition":
        return sum(fitted_parameters(step["method"], step.get("options") or {}, n, k)
                   for step in options.get("steps", []))
    if method in ("matrix", "dirichlet"):
        return k * k + k
    if method == "vector":
        return 2 * k
    if method == "class_temperature":
        return k
    if method == "histogram_binning":
        return k * (2 * options.get("n_bins", 15) + 1)
    if method == "isotonic_multiclass":
        return 4 * isotonic_blocks(n * k)
    if method == "isotonic_one_vs_all":
        return 4 * k * isotonic_blocks(n)
    if method in ("temperature", "expectation_consistency", "platt", "ensemble_temperature"):
        return 4
    return k * k + n * k  # a method not listed: counted generously


def solver_entries(method: str, options: dict, n: int, k: int) -> int:
    """Entries of the largest dense matrices a fit's solver holds beyond its inputs: vector
    scaling's exact (2k)² Hessian; matrix and Dirichlet scaling's class blocks and their inverses
    where their solver builds them (``MatrixScaling.solver_entries``); ``auto`` and
    ``composition``: their largest candidate or step."""
    if method == "vector":
        return 4 * k * k
    if method in ("matrix", "dirichlet"):
        return cal.MatrixScaling.solver_entries(k)
    if method == "auto":
        candidates = cal.prepare_comparison(n, k, options.get("candidates") or None, options.get("folds", 5),
                                            options.get("input", "logits"))
        return max(solver_entries(c.method, c.options, n, k) for c in candidates)
    if method == "composition":
        return max((solver_entries(step["method"], step.get("options") or {}, n, k)
                    for step in options.get("steps", [])), default=0)
    return 0


def affordable_auto_options(options: dict, n: int, k: int, limit: int) -> dict:
    """``auto``'s options with, when no candidates are named, the default candidates whose stored
    parameters stay within ``limit`` (on 50000 x 1000 the isotonic maps could store 4.8 million
    numbers: ``auto`` then compares the others instead of refusing the fit)."""
    if options.get("candidates") is not None:
        return options
    try:
        defaults = cal.prepare_comparison(n, k, None, options.get("folds", 5), options.get("input", "logits"))
    except (ValueError, TypeError):
        return options  # the fit refuses these options with its own precise error
    kept = [c.name for c in defaults if fitted_parameters(c.method, c.options, n, k) + 3 <= limit]
    return options if len(kept) in (0, len(defaults)) else {**options, "candidates": kept}


def check_fit_parameters(method: str, options: dict, n: int, k: int, limit: int,
                         max_entries: int = MAX_ENTRIES) -> None:
    """A 422 (``InvalidInput``) before the fit when its stored parameters could exceed ``limit``,
    or its solver's dense matrices ``max_entries`` entries (``solver_entries``)."""
    try:
        count = fitted_parameters(method, options, n, k)
        solver = solver_entries(method, options, n, k)
    except (ValueError, KeyError, TypeError, AttributeError):
        return  # options the fit will refuse with its own precise error
    if solver > max_entries:
        raise InvalidInput(f"fitting {method} on {k} classes needs a {solver}-entry Hessian (vector scaling's "
                           f"(2k)², or its class blocks), over the limit of {max_entries} entries "
                           "(CALIBRATION_MAX_ENTRIES); use fewer classes or a method with fewer parameters")
    if count > limit:
        raise InvalidInput(f"fitting {method} on {n} rows of {k} classes would store up to {count} fitted "
                           f"parameters, over the limit of {limit} (CALIBRATION_MAX_PARAMETERS); "
                           "use fewer classes or bins or a method with fewer parameters")


# A fold's own work in a comparison, in fits of temperature scaling on its training rows: slicing the
# fold, fitting its reference temperature scaling and scoring the uncalibrated model (measured on
# 50000 x 100: 0.77 s per fold against 0.12 s for a temperature candidate). A part that holds some of
# a fold's candidates pays it once more, so the packing splits a fold only where balance needs it.
FOLD_SETUP_FITS = 6.0


def pack_units(unit_seconds: list[float], folds: int, setup_seconds: float, parts: int) -> list[list]:
    """Candidate x fold units packed into at most ``parts`` parts of near-equal estimated cost, longest
    first (LPT): each unit (candidate ``c`` of cost ``unit_seconds[c]`` on fold ``f``) goes to the part
    whose load, with the unit and ``setup_seconds`` if the part has no unit of fold ``f`` yet, is least.
    Returns each non-empty part as ``[[fold, [candidate, ...]], ...]`` in fold and candidate order."""
    units = sorted(((unit_seconds[c], f, c) for f in range(folds) for c in range(len(unit_seconds))),
                   key=lambda unit: (-unit[0], unit[1], unit[2]))
    loads = [0.0] * max(1, parts)
    held: list[dict[int, list[int]]] = [{} for _ in loads]
    for seconds, fold, c in units:
        best = min(range(len(loads)),
                   key=lambda p: (loads[p] + seconds + (0.0 if fold in held[p] else setup_seconds), p))
        loads[best] += seconds + (0.0 if fold in held[best] else setup_seconds)
        held[best].setdefault(fold, []).append(c)
    return [[[fold, sorted(part[fold])] for fold in sorted(part)] for part in held if part]
