"""``calibration-service``: serve the API, run migrations, manage API keys."""

from __future__ import annotations

import argparse
import gc
import os
import sys

from .settings import get_settings


def serve(args: argparse.Namespace) -> int:
    # no cyclic collections while the process starts: with one worker, the application's factory in
    # this process turns them back on once its start-up objects are frozen (app.main)
    gc.disable()
    import uvicorn

    # the worker processes read their settings from the environment: pass the flags on
    for key, value in (("HOST", args.host), ("PORT", args.port), ("WORKERS", args.workers)):
        if value is not None:
            os.environ[f"CALIBRATION_{key}"] = str(value)
    get_settings.cache_clear()
    settings = get_settings()
    if settings.migrate_on_start and not args.no_migrate:  # Alembic is imported only to run them
        from .platform.migrate import upgrade

        upgrade(settings.database_url)
    from .platform.server_protocol import HeadDeadlineProtocol

    if settings.workers > 1:  # the workers are other processes: this one supervises them for good
        gc.enable()

    # uvicorn annotates both timeouts as int, but hands them to loop.call_later and asyncio.wait_for,
    # which take fractional seconds (settings allow them)
    uvicorn.run("app.main:create_served_app", factory=True, host=settings.host, port=settings.port,
                http=HeadDeadlineProtocol, workers=settings.workers, access_log=False, log_config=None,
                limit_concurrency=settings.max_connections, h11_max_incomplete_event_size=settings.max_header_bytes,
                timeout_keep_alive=settings.keep_alive_seconds,  # type: ignore[arg-type]
                timeout_graceful_shutdown=settings.shutdown_seconds)  # type: ignore[arg-type]
    return 0


def migrate(args: argparse.Namespace) -> int:
    # (alembic's error from the module that imports alembic as it should be: app.platform.migrate)
    from .platform.migrate import CommandError, describe_losses, downgrade, downgrade_losses, upgrade

    url = get_settings().database_url
    try:
        if args.downgrade:
            losses = downgrade_losses(url, args.downgrade)
            if losses and not args.yes:
                print(f"error: downgrading to {args.downgrade} drops or changes tables that hold "
                      f"{describe_losses(losses)} ({', '.join(losses)}); their data would be lost. "
                      "Run again with --yes to proceed.", file=sys.stderr)
                return 2
            if losses:
                print(f"downgrading to {args.downgrade}: dropping or changing {describe_losses(losses)}",
                      file=sys.stderr)
            downgrade(url, args.downgrade)
        else:
            upgrade(url, args.revision)
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _database():
    from .platform.db import Database

    settings = get_settings()
    return Database(settings.database_url, settings.db_timeout_seconds)


def keys_create(args: argparse.Namespace) -> int:
    from .access.keys import create_key

    try:
        info, key = create_key(_database(), args.name, args.scope)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"created key {info.id} ({info.name}; scopes {' '.join(info.scopes)}). It is shown only now:",
          file=sys.stderr)
    print(key)
    return 0


def keys_revoke(args: argparse.Namespace) -> int:
    from .access.keys import revoke_key

    if not revoke_key(_database(), args.id):
        print(f"error: no active key {args.id!r}", file=sys.stderr)
        return 1
    print(f"revoked key {args.id}", file=sys.stderr)
    return 0


def keys_list(args: argparse.Namespace) -> int:
    from .access.keys import list_keys

    for info in list_keys(_database()):
        state = f"revoked {info.revoked_at:%Y-%m-%d %H:%M}" if info.revoked_at else "active"
        print(f"{info.id}  {' '.join(info.scopes):<16} {state:<24} {info.name}")
    return 0


def sign_versions(args: argparse.Namespace) -> int:
    from .conformal.store import sign_all as sign_set_predictors
    from .registry.version_records import sign_versions as sign

    settings = get_settings()
    if settings.integrity_key is None:
        print("error: set CALIBRATION_INTEGRITY_KEY to the key to sign with", file=sys.stderr)
        return 2
    database = _database()
    key = settings.integrity_key.get_secret_value().encode()
    with database.write() as session:
        signed, refused = sign(session, key)
        signed_sets, refused_sets = sign_set_predictors(session, key)
    refused += refused_sets
    print(f"signed {signed} version(s) and {signed_sets} set predictor(s)"
          + (f"; refused {len(refused)} whose digest does not match: {', '.join(refused)}" if refused else ""),
          file=sys.stderr)
    return 1 if refused else 0


def worker(args: argparse.Namespace) -> int:
    from .worker import run_workers

    return run_workers(args.concurrency)


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
    commands.add_parser("sign-versions", help="sign stored versions with CALIBRATION_INTEGRITY_KEY",
                        description="Re-sign every version whose digest is intact (plain SHA-256, or an "
                                    "HMAC of the older form) over its whole record with the HMAC key in "
                                    "CALIBRATION_INTEGRITY_KEY (after setting the key), and every set "
                                    "predictor whose plain SHA-256 digest is intact.") \
        .set_defaults(handler=sign_versions)
    work = commands.add_parser("worker", help="take jobs (fits, comparisons) from the Postgres queue",
                               description="Start job worker processes (Procrastinate, on DATABASE_URL's "
                                           "Postgres); one process per core by default.")
    work.add_argument("--concurrency", type=int, help="worker processes (default: the number of cores)")
    work.set_defaults(handler=worker)
    schema = commands.add_parser("migrate", help="apply the database migrations (alembic upgrade head)")
    schema.add_argument("--revision", default="head", help="upgrade to this revision (default head)")
    schema.add_argument("--downgrade", metavar="REVISION", help="downgrade to REVISION (e.g. base) instead")
    schema.add_argument("--yes", action="store_true",
                        help="downgrade even when that drops or changes tables holding data (without it the "
                             "command lists what would be lost and exits with 2)")
    schema.set_defaults(handler=migrate)
    keys = commands.add_parser("keys", help="create, list and revoke API keys (stored as hashes)")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser("create", help="create a key and print it once on stdout")
    create.add_argument("--name", required=True, help="who the key is for")
    create.add_argument("--scope", action="append", choices=("read", "write", "admin"), required=True,
                        help="read, write or admin (repeatable; admin includes write, write includes read)")
    create.set_defaults(handler=keys_create)
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id", help="the key id (12 hex digits after cal_)")
    revoke.set_defaults(handler=keys_revoke)
    key_commands.add_parser("list", help="list keys (never their secrets)").set_defaults(handler=keys_list)
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
