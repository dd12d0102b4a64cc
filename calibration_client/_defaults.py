"""What the client and its command line both need before either has loaded httpx or numpy."""

DEFAULT_URL = "http://127.0.0.1:8000"
