import os

import pytest
from threadpoolctl import threadpool_limits

from tests.helpers import DATA, make_reference_input

# one BLAS thread per test process: pytest-xdist runs two processes on this 2-core machine, and
# OpenBLAS's own threads on top of them thrash (a k = 40 Dirichlet fit test: 32 s against 0.9 s
# at a load average of 2). numpy is already loaded here, so the limit is set through
# threadpoolctl; the environment variables reach the servers and workers the tests start.
# A value in the environment wins.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
threadpool_limits(int(os.environ["OPENBLAS_NUM_THREADS"]))


def pytest_configure(config):
    if not DATA.is_dir():
        raise pytest.UsageError(
            f"the shared data sets are missing: {DATA} (set CALIBRATION_SHARED_DIR)"
        )


@pytest.fixture(scope="session")
def reference():
    return make_reference_input()
