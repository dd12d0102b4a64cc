"""The API tests build the application in the test process (``TestClient``), and it writes the
prediction log on a thread (``CALIBRATION_LOG_WRITER=thread``) unless a test's settings say
otherwise: the writer process, the default as deployed, is a Python process of its own (~0.7 CPU-s
to start: SQLAlchemy and numpy), started anew by each test's application that logs. The same
``LogBuffer`` writes on either; the process and its pipe are tested by
tests/service/live/test_prediction_log_pipe.py, and the live servers run the process as deployed."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def log_writer_on_a_thread(monkeypatch):
    monkeypatch.setenv("CALIBRATION_LOG_WRITER", "thread")
