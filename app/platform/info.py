"""The server's name and version, as reported by /v2 and the OpenAPI document."""

from importlib.metadata import PackageNotFoundError, version

SERVER_NAME = "calibration-service"


def server_version() -> str:
    try:
        return version("calibration-service")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        return "0.0.0"
