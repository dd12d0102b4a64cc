"""The power analysis end to end (issue #35): ``POST /v1/calibrators/{name}/power`` queues a
``power`` job on a live server (SQLite and Postgres, API keys on, the embedded job pool), whose
result — read through ``GET /v1/jobs/{id}`` by the client and printed by ``calibration power`` —
is ``calibration.power`` run on the calibrator's stored observations through its version; the
limits answer 422/413 naming their setting."""

from __future__ import annotations

import json

import numpy as np
import pytest

import calibration as cal
from calibration.power import Shift
from calibration.power import power as core_power
from calibration_client import Client
from calibration_client.cli import app
from calibration_client.errors import InvalidInput, NotFound, PayloadTooLarge
from tests.client.conftest import database, keyed_server
from tests.client.runner import CliRunner

LIMITS = {"CALIBRATION_POWER_MAX_STREAMS": "100", "CALIBRATION_POWER_MAX_LABELS": "20000",
          "CALIBRATION_POWER_MAX_ENTRIES": "10000000"}


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def service(request, tmp_path_factory):
    with database(request.param, tmp_path_factory) as url, \
            keyed_server(url, tmp_path_factory.mktemp("log") / "server.log", env=LIMITS) as running:
        yield running


@pytest.fixture(scope="module")
def client(service, cifar):
    logits, labels = cifar
    with Client(service.url, api_key=service.keys["admin"], retries=0) as client:
        client.fit("pw", logits[:300], labels[:300])
        client.observe("pw", logits, labels)
        yield client


def test_the_job_gives_what_the_core_gives_on_the_stored_rows(client, cifar):
    logits, labels = cifar
    job = client.power("pw", "temperature", 0.3, labels=3000, streams=40, checkpoints=[100, 1000], wait=False)
    assert job.kind == "power" and job.status in ("queued", "running", "succeeded")
    done = client.wait_for_job(job.id, poll=0.2)  # GET /v1/jobs/{id}
    result = done.result
    assert result["name"] == "pw" and result["version"] == 1 and result["rows"] == 400
    local = cal.create("temperature").fit(logits[:300], labels[:300])
    expected = core_power(local.predict_proba, logits.astype(np.float64), "logits", labels,
                          Shift("temperature", 0.3), streams=40, max_labels=3000, checkpoints=[100, 1000])
    for run in ("shifted", "null"):
        assert result[run]["detected"]["alarms"] == expected[run]["detected"]["alarms"]
        assert result[run]["delay"] == expected[run]["delay"]
        assert [w["labels"] for w in result[run]["within"]] == [100, 1000, 3000]
        assert result[run]["drift"] == pytest.approx(expected[run]["drift"], abs=1e-9)
    assert result["shifted"]["detected"]["rate"] == 1.0  # logits x0.3: confidence far below accuracy
    assert result["null"]["detected"]["rate"] <= 0.01 or result["null"]["drift"]["visible_share"] > 0


def test_the_intervals_are_at_the_confidence_asked(client, cifar):
    """``confidence`` reaches the job: all 20 shifted streams alarm, so the Clopper-Pearson interval
    of the detection rate is [((1 - c) / 2) ** (1 / 20), 1], 0.8913 at c = 0.8 (0.8315 at 0.95);
    the delay quantiles' intervals are the core's at the same level."""
    logits, labels = cifar
    result = client.power("pw", "temperature", 0.3, labels=3000, streams=20, confidence=0.8)
    assert result["confidence"] == 0.8
    assert result["shifted"]["detected"]["alarms"] == 20
    assert result["shifted"]["detected"]["low"] == pytest.approx(0.1 ** (1 / 20), abs=1e-12)
    assert result["shifted"]["detected"]["high"] == 1.0
    local = cal.create("temperature").fit(logits[:300], labels[:300])
    expected = core_power(local.predict_proba, logits.astype(np.float64), "logits", labels,
                          Shift("temperature", 0.3), streams=20, max_labels=3000, confidence=0.8)
    for run in ("shifted", "null"):
        assert result[run]["detected"] == pytest.approx(expected[run]["detected"], abs=1e-12)
        assert result[run]["delay"] == expected[run]["delay"]


def test_limits_name_their_setting_and_missing_data_is_404(client, cifar):
    with pytest.raises(InvalidInput, match="CALIBRATION_POWER_MAX_STREAMS"):
        client.power("pw", "temperature", 1.25, streams=101, labels=10)
    with pytest.raises(InvalidInput, match="CALIBRATION_POWER_MAX_LABELS"):
        client.power("pw", "temperature", 1.25, streams=1, labels=20001)
    with pytest.raises(PayloadTooLarge, match="CALIBRATION_POWER_MAX_ENTRIES"):
        client.power("pw", "temperature", 1.25, streams=100, labels=10000)  # x 11 residuals = 1.1e7
    with pytest.raises(InvalidInput, match="tweak_one"):
        client.power("pw", "tweak_one", 1.5, streams=10, labels=100)
    logits, labels = cifar
    client.fit("bare", logits[:100], labels[:100])
    with pytest.raises(NotFound, match="no labelled observations"):
        client.power("bare", "temperature", 1.25, streams=10, labels=100)


def test_the_command_line(service, client):
    runner = CliRunner()
    env = {"CALIBRATION_URL": service.url, "CALIBRATION_API_KEY": service.keys["admin"], "COLUMNS": "200"}
    helped = runner.invoke(app, ["power", "--help"], env=env)
    assert helped.exit_code == 0
    assert "Example: calibration power demo --shift temperature --size 1.25 --labels 50000" in helped.stdout
    said = runner.invoke(app, ["power", "pw", "--shift", "swap", "--size", "1", "--swap-classes", "3,5",
                               "--labels", "2000", "--streams", "20"], env=env)
    assert said.exit_code == 0, said.output
    assert "pw version 1, labelled monitor" in said.stdout and "swap 1.0 on 400 stored rows" in said.stdout
    assert "shifted (20)" in said.stdout and "null (20)" in said.stdout
    answer = runner.invoke(app, ["power", "pw", "--shift", "swap", "--size", "1", "--swap-classes", "3,5",
                                 "--labels", "2000", "--streams", "20", "--json"], env=env)
    parsed = json.loads(answer.stdout)
    assert parsed["shift"] == {"kind": "swap", "size": 1.0, "shift_class": None, "swap_classes": [3, 5]}
    assert f"{parsed['shifted']['detected']['rate']:.3f}" in said.stdout
    refused = runner.invoke(app, ["power", "pw", "--streams", "101", "--labels", "10"], env=env)
    assert refused.exit_code == 1 and "CALIBRATION_POWER_MAX_STREAMS" in refused.output
