"""The BLAS threads of the processes a process spawns (the job pool's, the job workers'): numpy's
BLAS reads its thread count from the environment when it is imported, so it is set before they start."""

from __future__ import annotations

import os

BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_blas_threads(threads: int) -> None:
    """Give processes spawned from now on ``threads`` BLAS threads each (they read these variables
    when they import numpy), unless the environment already says."""
    for variable in BLAS_VARIABLES:
        os.environ.setdefault(variable, str(threads))
