"""Monitoring: calibration quality per window of observations, anytime-valid drift alarms and their
power analysis, label shift, and alarms told to webhooks through an outbox."""
