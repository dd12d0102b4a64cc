"""``.npy`` and ``.npz`` bodies, written and read with numpy and never unpickled. numpy is imported
by the functions that handle arrays, so that a caller that sends none (a command line's listing)
does not load it."""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

NPY = "application/x-npy"
NPZ = "application/x-npz"
INPUT_KINDS = ("logits", "probabilities", "scores")


def as_array(value: Any, what: str) -> np.ndarray:
    """``value`` as a numpy array (lists, numpy arrays, CPU tensors); object arrays are refused,
    since they cannot be sent without pickling."""
    import numpy as np

    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise ValueError(f"{what} must be numeric, not an array of Python objects")
    return array


def encode_npy(array: np.ndarray) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def decode_npy(data: bytes) -> np.ndarray:
    """One ``.npy`` array; a pickled (object) array raises ``ValueError``, it is never loaded."""
    import numpy as np

    return np.load(io.BytesIO(data), allow_pickle=False)


def encode_npz(arrays: dict[str, np.ndarray]) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise ValueError(f"{name} must be numeric, not an array of Python objects")
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def load_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file (by member name) or of an ``.npy`` file (as ``{"": array}``),
    read without unpickling."""
    import numpy as np

    with open(path, "rb") as file:
        data = file.read()
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    return {"": decode_npy(data)}


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    import numpy as np

    np.save(path, np.asarray(array), allow_pickle=False)
