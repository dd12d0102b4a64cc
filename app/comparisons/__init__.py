"""Comparisons of calibration methods by cross-validation, in the request or as a job, and the stateless
metrics endpoints."""
