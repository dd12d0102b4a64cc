"""Calibration metrics over probabilities ``(n, k)`` (or binary ``(n,)``, the probability of
class 1) and integer labels. Each docstring states exactly what is computed."""
