"""Array backends: numpy by default, and any Array API library (torch on CPU or CUDA,
array-api-strict, ...) through ``array-api-compat``, as scikit-learn and SciPy do.

A calibrator's ``predict_proba`` and ``fit`` accept such arrays and answer in the same library,
on the same device. Where the work runs:

* prediction runs on the device, in the input's floating dtype (float32 stays float32; integer
  input becomes float64), with the fitted parameters copied to the device;
* fitting works in float64: temperature scaling (NLL), expectation consistency and ensemble
  temperature scaling keep their 1-D solvers on the host and evaluate the O(n k) sums that
  give the loss and its derivatives on the device (``DeviceShiftedLogits``); every other fit
  (vector, matrix, Dirichlet, Platt, isotonic, histogram binning, class temperatures, TS with
  the Brier or ECE objective, compositions, auto) runs on the host from one float64 copy;
* metrics validate the probabilities on the device; Brier, NLL, accuracy and mean confidence
  reduce them there to one number, the binned and kernel metrics to the n-vectors of top-label
  confidence and correctness (which then cross to the host), and classwise ECE and top-N
  accuracy copy them to the host.

torch is never imported here: ``array_api_compat`` recognises a tensor by its type and only
then uses torch, so the numpy path imports neither.
"""

from __future__ import annotations

import numpy as np


def is_numpy(x) -> bool:
    """True for numpy arrays and for anything that is not an Array API array (lists, scalars)."""
    if isinstance(x, np.ndarray | np.generic | list | tuple | int | float):
        return True
    import array_api_compat

    return not array_api_compat.is_array_api_obj(x) or array_api_compat.is_numpy_array(x)


def namespace(x):
    """The namespace to compute with: ``numpy`` itself for numpy input, else the array's
    Array API namespace (``array_api_compat.torch`` for tensors)."""
    if is_numpy(x):
        return np
    import array_api_compat

    return array_api_compat.array_namespace(x)


def device(x):
    if is_numpy(x):
        return "cpu"
    import array_api_compat

    return array_api_compat.device(x)


def on_cpu(x) -> bool:
    """Whether the array lives in host memory (numpy, torch on the CPU, array-api-strict)."""
    if is_numpy(x):
        return True
    import array_api_compat

    return not array_api_compat.is_torch_array(x) or x.device.type == "cpu"


def to_host(x) -> np.ndarray:
    """A numpy copy (or view) of any array, moved from its device."""
    if is_numpy(x):
        return np.asarray(x)
    import array_api_compat

    if array_api_compat.is_torch_array(x):
        return x.detach().cpu().numpy()
    return np.from_dlpack(x)


def from_host(values, like):
    """``values`` (numpy, host) as an array of ``like``'s namespace, device and floating dtype."""
    xp = namespace(like)
    if xp is np:
        return np.asarray(values, dtype=like.dtype)
    return xp.asarray(np.ascontiguousarray(values), dtype=like.dtype, device=device(like))


def floating(x):
    """``x`` in a floating dtype: float arrays stay as they are, integers become float64."""
    xp = namespace(x)
    if xp.isdtype(x.dtype, "real floating"):
        return x
    return xp.astype(x, xp.float64)


def label_entries(values, labels: np.ndarray):
    """``values[i, labels[i]]`` of an (n, k) array, on its device (a take on the flat array)."""
    xp = namespace(values)
    n, k = values.shape
    if xp is np:
        return values[np.arange(n), labels]
    index = xp.asarray(np.arange(n) * k + labels, device=device(values))
    return xp.take(xp.reshape(values, (-1,)), index)


def row_dot(a, b):
    """``<a_i, b_i>`` for each row of two (n, k) arrays, on their device."""
    if isinstance(a, np.ndarray):
        return np.einsum("ij,ij->i", a, b)
    return namespace(a).sum(a * b, axis=1)


def column(a, j: int):
    """Column ``j`` of a 2-D array as a contiguous 1-D array (for numpy, a view)."""
    if isinstance(a, np.ndarray):
        return a[:, j]
    return a[:, j] + 0.0  # torch keeps a column view strided, and searchsorted warns on it
