"""Conformal prediction sets of calibrator versions: split-conformal set predictors fitted on held-out
labelled rows, stored with their version, and served by ``calibrate`` and ``/v2`` beside the
calibrated probabilities."""
