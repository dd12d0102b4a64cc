"""The Open Inference Protocol (KServe v2 / Triton REST) for calibrators: its tensor codecs and the /v2
routes."""
