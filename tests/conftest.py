import gc
import os

import pytest
from threadpoolctl import threadpool_limits

from app.platform import allocator
from tests.helpers import DATA, make_reference_input

# one BLAS thread per test process: pytest-xdist runs four processes on this 2-core machine, and
# OpenBLAS's own threads on top of them thrash (a k = 40 Dirichlet fit test: 32 s against 0.9 s
# at a load average of 2). numpy is already loaded here, so the limit is set through
# threadpoolctl; the environment variables reach the servers and workers the tests start.
# A value in the environment wins.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
threadpool_limits(int(os.environ["OPENBLAS_NUM_THREADS"]))
# glibc's mmap and trim thresholds fixed in each test process, as the service fixes them in its own
# (``app.platform.allocator``): by default a freed temporary of a few hundred KiB goes back to the
# system and the next one is faulted in again, page by page, which on this VM made ``np.exp`` of a
# fresh 50 000-entry copy 6x slower than of the array itself (380 against 60 us). Without this the
# thresholds of a test process depended on whether an earlier test had built the app
# (``create_app`` fixes them). Only this process: the servers and workers the tests start fix their own.
allocator.fix_thresholds()


def pytest_addoption(parser):
    parser.addoption("--full-sweeps", action="store_true", default=bool(os.environ.get("CALIBRATION_FULL_SWEEPS")),
                     help="also run the cases marked `sweep` (a real-data sweep's full form; "
                          "or set CALIBRATION_FULL_SWEEPS=1)")


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_TorchFilesTogether(), "torch-files-together")
    if not DATA.is_dir():
        raise pytest.UsageError(
            f"the shared data sets are missing: {DATA} (set CALIBRATION_SHARED_DIR)"
        )


@pytest.fixture(scope="session")
def reference():
    return make_reference_input()


# The test files that import torch (~2.9 CPU-s an import, in each test process that makes one): one
# work unit of ``--dist loadfile`` (``pytest_xdist_make_scheduler`` below), so one worker imports it
# instead of each worker that drew one of them. test_layers checks the list against the test files.
TORCH_FILES = ("tests/core/test_backends.py", "tests/core/test_isotonic_reference.py",
               "tests/core/test_numerics_isotonic.py", "tests/service/api/test_device.py")


class _TorchFilesTogether:
    """Registered where pytest-xdist runs: its ``loadfile`` scheduling with the torch files one scope."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        class Scheduling(LoadFileScheduling):
            def _split_scope(self, nodeid: str) -> str:
                path = super()._split_scope(nodeid)
                return TORCH_FILES[0] if path in TORCH_FILES else path

        return Scheduling(config, log)


# The longest test files, longest first (sums of their tests' durations in a whole run; mypy's with a
# cold cache). pytest-xdist's ``--dist loadfile`` hands whole files to idle workers in collection order
# (``--no-loadscope-reorder`` in pyproject keeps it from re-sorting them by their number of tests), so
# these go first and the short files fill in at the end instead of one long file running alone on one
# worker.
LONGEST_FIRST = (
    "tests/test_examples_postgres.py", "tests/test_examples_sqlite.py", "tests/service/fuzz/test_fuzz.py",
    "tests/service/live/test_live.py",
    "tests/service/live/test_fan_out.py", "tests/service/live/test_dashboard.py",
    "tests/service/live/test_online_loop.py", "tests/service/live/test_jobs.py",
    "tests/service/api/test_conformal_online.py", "tests/service/live/test_faults.py", "tests/test_typing.py",
    "tests/client/test_cli.py", "tests/service/live/test_quality.py", "tests/service/live/test_promotion.py",
    "tests/service/live/test_prediction_log_pipe.py", "tests/service/live/test_request_budgets.py",
    "tests/service/live/test_conformal_live.py", "tests/service/live/test_isolation.py",
    "tests/client/test_client.py", "tests/service/api/test_api.py", "tests/service/api/test_observations.py",
    "tests/service/live/test_compare.py", "tests/service/api/test_webhooks.py", "tests/client/test_cli_loop.py",
    "tests/service/live/test_races.py", "tests/client/test_power.py", "tests/core/test_selection_guard.py",
    "tests/service/api/test_conformal_api.py", "tests/core/test_selection.py", "tests/core/test_float32_memory.py",
    "tests/service/live/test_dashboard_browser.py", "tests/core/test_backends.py",
    "tests/service/live/test_idempotency_lease.py", "tests/service/live/test_access.py",
    "tests/service/unit/test_prediction_epochs.py", "tests/service/api/test_online_calibrator.py",
    "tests/service/fuzz/test_hostile_live.py", "tests/service/live/test_set_charts_browser.py",
    "tests/service/api/test_dashboard_health.py", "tests/service/api/test_prediction_log.py",
    "tests/service/live/test_resolutions.py", "tests/core/test_fold_memory.py",
    "tests/service/live/test_load_smoke.py", "tests/service/api/test_input_check.py",
    "tests/core/test_brier_warm_start.py", "tests/service/live/test_docs_offline.py",
    "tests/core/test_large_vocabulary.py",
)


def pytest_collection_finish(session):
    """Freeze what collection leaves alive (the libraries, every collected module and its
    parameters) out of the cyclic collector's generations (``gc.freeze``): a full collection, which
    the core makes after each cross-validation fold (``calibration.comparison``), then walks only
    what the tests have made since, not the whole process (in a worker that collected every test
    file, a quarter of a million objects)."""
    gc.collect()
    gc.freeze()


def pytest_runtest_logfinish(nodeid, location):
    """Freeze again where a test unfroze (``test_served_app`` does), once its objects are gone."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--full-sweeps"):
        skip = pytest.mark.skip(reason="full sweep: run with --full-sweeps (the bounded cases ran)")
        for item in items:
            if "sweep" in item.keywords:
                item.add_marker(skip)
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
