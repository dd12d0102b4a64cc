"""The application ``calibration-service serve`` runs (``app.main.create_served_app``) is
``create_app``'s, whose start-up ends by freezing what it leaves alive out of the cyclic
collector's generations (``gc.freeze``), after everything the start-up builds (the prediction
log's writer, the scheduler) is running, with the collector off from the factory's call to that
freeze; and it serves as ``create_app``'s does."""

import gc

from fastapi.testclient import TestClient

from app.main import create_served_app
from app.platform.migrate import upgrade
from app.settings import Settings


def test_the_served_app_freezes_what_its_start_up_leaves_alive(sqlite_url):
    upgrade(sqlite_url)
    gc.unfreeze()
    app = create_served_app(Settings(database_url=sqlite_url, job_engine="embedded"))
    assert gc.get_freeze_count() == 0  # not before the start-up
    try:
        assert not gc.isenabled()  # the start-up builds what it keeps: no collections until the freeze
        with TestClient(app) as client:
            frozen = gc.get_freeze_count()
            assert frozen > 10000  # every object alive then: the application and the process around it
            assert gc.isenabled()  # and collections again after it
            assert client.get("/readyz").json()["status"] == "ready"
            assert client.get("/v1/calibrators").status_code == 200
    finally:
        gc.enable()  # whatever failed above, the test process collects again
        gc.unfreeze()  # the test process builds many applications: this one is collectable again
