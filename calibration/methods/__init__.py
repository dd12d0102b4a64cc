"""One module per calibration method (or per family sharing one model)."""
