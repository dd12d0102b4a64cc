"""The drift monitors' and prediction sets' Prometheus gauges, read from the stored monitors (so that
every replica reports the same)."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from ..platform.db import Database
from . import coverage_monitors
from . import store as alarm_store


class QualityCollector:
    """``calibration_quality_ece`` per calibrator and version, ``calibration_drift_log_e_value``
    and ``calibration_drift_alarm`` per calibrator, version and signal (``labelled``,
    ``label_free``, ``coverage@<level>``), and ``calibration_set_miscoverage`` per calibrator, version
    and coverage level, read from the monitors (so every replica reports the same)."""

    def __init__(self, db: Database):
        self.db = db

    def collect(self):
        try:
            with self.db.read() as session:
                rows = alarm_store.every_monitor(session)
                sets = alarm_store.coverage_states(session, coverage_monitors.PREFIX)
        except Exception:  # the database is away or unmigrated: /readyz says so
            return
        ece = GaugeMetricFamily("calibration_quality_ece", "ECE of the newest labelled rows a version served",
                                labels=["calibrator", "version"])
        log_e = GaugeMetricFamily("calibration_drift_log_e_value", "Log e-value of the drift e-process",
                                  labels=["calibrator", "version", "signal"])
        alarm = GaugeMetricFamily("calibration_drift_alarm", "1 once the drift e-process reached 1/alpha",
                                  labels=["calibrator", "version", "signal"])
        for name, version, signal, value, log_e_value, alarmed in rows:
            if value is not None:
                ece.add_metric([name, str(version)], value)
            log_e.add_metric([name, str(version), signal], log_e_value)
            alarm.add_metric([name, str(version), signal], 1.0 if alarmed else 0.0)
        miscoverage = GaugeMetricFamily("calibration_set_miscoverage", "Recent miss rate of a version's prediction "
                                        "sets (exponentially weighted, the coverage alarm's half-life)",
                                        labels=["calibrator", "version", "coverage"])
        for name, version, signal, state in sets:
            miscoverage.add_metric([name, str(version), signal[len(coverage_monitors.PREFIX):]], float(state["mean"]))
        yield from (ece, log_e, alarm, miscoverage)
