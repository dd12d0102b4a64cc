import pytest

from tests.helpers import DATA, make_reference_input


def pytest_configure(config):
    if not DATA.is_dir():
        raise pytest.UsageError(
            f"the shared data sets are missing: {DATA} (set CALIBRATION_SHARED_DIR)"
        )


@pytest.fixture(scope="session")
def reference():
    return make_reference_input()
