"""The calibration service: FastAPI routes, codecs, persistence and operations."""
