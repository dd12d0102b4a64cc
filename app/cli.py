"""``calibration-service``: serve the API, run migrations, manage API keys."""

from __future__ import annotations

import argparse
import os
import sys

from .settings import get_settings


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .migrate import upgrade

    # the worker processes read their settings from the environment: pass the flags on
    for key, value in (("HOST", args.host), ("PORT", args.port), ("WORKERS", args.workers)):
        if value is not None:
            os.environ[f"CALIBRATION_{key}"] = str(value)
    get_settings.cache_clear()
    settings = get_settings()
    if settings.migrate_on_start and not args.no_migrate:
        upgrade(settings.database_url)
    uvicorn.run("app.main:create_app", factory=True, host=settings.host, port=settings.port,
                workers=settings.workers, access_log=False, log_config=None)
    return 0


def migrate(args: argparse.Namespace) -> int:
    from .migrate import downgrade, upgrade

    url = get_settings().database_url
    if args.downgrade:
        downgrade(url, args.downgrade)
    else:
        upgrade(url, args.revision)
    return 0


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="calibration-service",
                                   description="Calibration service for ML classifiers.")
    commands = main.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="start the HTTP API (uvicorn)",
                              description="Start the API. Defaults come from CALIBRATION_HOST, "
                                          "CALIBRATION_PORT and CALIBRATION_WORKERS.")
    run.add_argument("--host", help="bind address (default 127.0.0.1)")
    run.add_argument("--port", type=int, help="port (default 8000)")
    run.add_argument("--workers", type=int, help="worker processes (default 1)")
    run.add_argument("--no-migrate", action="store_true",
                     help="do not run `alembic upgrade head` first (also CALIBRATION_MIGRATE_ON_START=false)")
    run.set_defaults(handler=serve)
    schema = commands.add_parser("migrate", help="apply the database migrations (alembic upgrade head)")
    schema.add_argument("--revision", default="head", help="upgrade to this revision (default head)")
    schema.add_argument("--downgrade", metavar="REVISION", help="downgrade to REVISION (e.g. base) instead")
    schema.set_defaults(handler=migrate)
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
