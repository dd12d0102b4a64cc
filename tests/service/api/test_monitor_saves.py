"""Two alarms evaluations of one calibrator may run at once (the embedded pool's processes, several
workers). A monitor is stored only if no other evaluation moved it since it was read; that holds for
a monitor that had no row when read too: an evaluation that read none must not overwrite the row a
later, quicker one created meanwhile (which had already raised its alarm), or the alarm is cleared and
raised, and sent to the webhook, a second time (seen in a live run: two deliveries of one alarm)."""

from __future__ import annotations

import calibration as cal
from app.monitoring import alarms
from app.monitoring import store as alarm_store
from app.registry import reads as registry
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS

OPTIONS = {"alpha": 0.01, "tolerance": 0.02, "half_life": 1000.0, "max_bet": 0.5, "class_tolerance": 0.02}


def test_an_evaluation_that_read_no_monitor_does_not_overwrite_one_created_meanwhile(client):
    assert client.post("/v1/calibrators/raced/versions", json={
        "method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}).status_code == 201
    db = client.app.state.service.db
    with db.read() as session:
        calibrator_id = registry.calibrator(session, "raced").id
    quicker, slower = cal.DriftTest(**OPTIONS), cal.DriftTest(**OPTIONS)
    assert alarms._save(db, ("raced", calibrator_id), 1, "labelled", quicker, 7, None, None, 0, {}, [])
    assert not alarms._save(db, ("raced", calibrator_id), 1, "labelled", slower, 5, None, None, 0, {}, [])
    with db.read() as session:
        assert alarm_store.monitor(session, calibrator_id, 1, "labelled").last_chunk_id == 7
