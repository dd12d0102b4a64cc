"""Configuration from environment variables: ``DATABASE_URL`` and ``CALIBRATION_*``."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///./calibration.db"
DEVICE_PATTERN = re.compile(r"^(cpu|torch-cpu|cuda(:\d+)?)$")


class Settings(BaseSettings):
    """Every setting the service reads; the configuration table of docs/operations.md lists the same."""

    model_config = SettingsConfigDict(env_prefix="CALIBRATION_", extra="ignore")

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        validation_alias=AliasChoices("DATABASE_URL", "CALIBRATION_DATABASE_URL"),
        description="SQLAlchemy URL; postgresql:// URLs use the psycopg 3 driver.",
    )
    host: str = Field("127.0.0.1", description="Address `serve` binds to.")
    port: int = Field(8000, ge=1, le=65535, description="Port `serve` listens on.")
    workers: int = Field(1, ge=1, le=64, description="uvicorn worker processes.")
    serve_threads: int | None = Field(None, ge=1, le=64, description="Threads per process for calibrate "
                                      "and /v2 inference (other work uses anyio's default pool); by default 2 "
                                      "when there are at least 2 cores per worker, else 1.")
    inline_seconds: float = Field(0.003, ge=0, le=0.05, description="Calibrate and /v2 inference calls "
                                  "estimated to take at most this long (JSON ones five times this) run on the event "
                                  "loop instead of a thread (app/http/hot_path.py), on SQLite only (on Postgres "
                                  "the version lookup is a network round trip); 0: always on a thread.")
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="Largest request body (413 above).")
    cache_size: int = Field(256, ge=1, description="Fitted calibrators kept in memory per process.")
    migrate_on_start: bool = Field(True, description="`serve` runs `alembic upgrade head` before starting.")
    log_level: str = Field("info", description="Log level of the service's JSON logs.")
    api_keys_enabled: bool = Field(False, description="Require API keys with scopes (see `keys create`).")
    ui_form_max_bytes: int = Field(4096, ge=256, le=1 << 20, description="Largest body of a dashboard form "
                                   "post (/ui/login, /ui/logout); 413 above it.")
    ui_trajectory_rows: int = Field(200_000, ge=0, description="Most labelled rows of one version whose drift "
                                    "monitor the dashboard replays to draw its e-value over time (more: not drawn).")
    api_key_cache_seconds: float = Field(5.0, ge=0, description="How long a process trusts a looked-up key "
                                                                "(a revocation takes effect within this).")
    device: str = Field("cpu", pattern=DEVICE_PATTERN.pattern,
                        description="Where calibrate, report and /v2 inference run: cpu (numpy), or with the "
                                    "torch extra cuda, cuda:N or torch-cpu.")
    job_stale_seconds: float = Field(300.0, ge=1, description="A running job whose heartbeat (every tenth of "
                                     "this) stops for this long is reported failed: its process died.")
    db_timeout_seconds: float = Field(30.0, gt=0, description="SQLite busy timeout and Postgres connect timeout.")
    # -- isolation (app/http/admission.py, app/cli.py) -------------------------------------
    work_threads: int = Field(8, ge=1, le=256, description="Threads per process for fits, reports, comparisons "
                              "and metrics (health, listings and calibrate never wait behind them).")
    work_queue: int = Field(32, ge=0, le=10_000, description="Such requests waiting for a thread at most; "
                            "beyond it they get 503 with Retry-After.")
    max_connections: int = Field(1000, ge=1, description="Concurrent connections per process (uvicorn's "
                                 "limit_concurrency); beyond it new ones get 503.")
    max_header_bytes: int = Field(65536, ge=1024, description="Largest request head (h11's incomplete-event "
                                  "limit); a larger one closes the connection.")
    header_seconds: float = Field(10.0, gt=0, description="A connection must send a complete request head "
                                  "within this many seconds of opening (or of beginning its next request); else it "
                                  "is closed: half-sent heads cannot hold connections.")
    body_seconds: float = Field(60.0, gt=0, description="A request's body must arrive within this many seconds "
                                "of its start (408 after, checked every quarter of it, at most every "
                                "second): slow senders cannot hold connections and memory.")
    keep_alive_seconds: float = Field(5.0, gt=0, description="How long an idle keep-alive connection is kept.")
    shutdown_seconds: float = Field(30.0, ge=0, description="On SIGTERM, how long in-flight requests may "
                                    "finish before the process exits; jobs are left to the job engine.")
    integrity_key: SecretStr | None = Field(None, description="Key of the HMAC-SHA256 digest of each stored "
                                            "version (app/registry/integrity.py): without it a database writer can't "
                                            "forge a calibrator. Unset: plain SHA-256.")
    # -- jobs (app/jobs/runner.py) ----------------------------------------------------------------
    job_engine: str = Field("auto", pattern=r"^(auto|embedded|procrastinate)$",
                            description="Where jobs run: `embedded` (a process pool inside the API process), "
                                        "`procrastinate` (workers sharing the Postgres queue), or `auto` "
                                        "(procrastinate on Postgres, embedded on SQLite).")
    job_processes: int = Field(2, ge=1, le=64, description="Processes of the embedded job pool.")
    job_blas_threads: int = Field(1, ge=1, le=256, description="BLAS threads of each job process (worker and "
                                  "embedded pool): the processes are the parallelism; two processes of two BLAS "
                                  "threads each on two cores ran a comparison 2x slower than one. An explicit "
                                  "OPENBLAS_NUM_THREADS/OMP_NUM_THREADS in the environment wins.")
    job_queue_limit: int = Field(100, ge=1, description="Jobs queued or running at most; a new job beyond "
                                 "this is refused with 503 and Retry-After.")
    sync_budget_seconds: float = Field(10.0, ge=0, description="A fit or comparison estimated to take longer "
                                       "than this runs as a job (202) even without Prefer: respond-async.")
    job_fan_out: str = Field("auto", pattern=r"^(auto|on|off)$",
                             description="Comparison jobs run as one part job per fold: `auto` "
                                         "where other workers can take the parts (Procrastinate), `on` also in the "
                                         "embedded pool, `off` never.")
    worker_shutdown_seconds: float = Field(60.0, ge=0, description="How long a stopping worker waits for its "
                                           "job to finish before leaving it to the heartbeat rule.")
    idempotency_seconds: float = Field(86400.0, ge=1, description="How long an Idempotency-Key is remembered.")
    idempotency_lease_seconds: float = Field(30.0, ge=1, le=3600, description="A request being answered "
                                             "under an Idempotency-Key renews its claim every third of this; a "
                                             "retry that finds the claim not renewed for this long (its process "
                                             "died) takes it over and runs again.")
    cache_bytes: int = Field(256 * 1024 * 1024, ge=0, description="Largest total size of the fitted calibrators "
                             "kept in memory per process, counted as the length of their stored parameters "
                             "(canonical JSON); the least recently used are evicted beyond it.")
    # -- request budgets (app/wire/costs.py, checked before the work starts) ---------------------
    max_array_bytes: int = Field(256 * 1024 * 1024, ge=1024, description="Largest decoded size of a request's "
                                 "arrays (from the .npy headers and the .npz declared sizes, before decompressing); "
                                 "413 above.")
    max_json_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Largest JSON body that carries arrays "
                                "(checked before parsing; a parsed number costs far more than its text); 413 above.")
    max_entries: int = Field(1 << 24, ge=1, description="Most array entries (n·k) in one request, from the "
                             "decoded shape before the core reads the values; 413 above.")
    max_parameters: int = Field(2_000_000, ge=1, description="Most fitted parameters a fit may store, estimated "
                                "from n, k and the options before it starts (app/wire/costs.py); 422 above.")

    # -- observations and the prediction log (app/observations/service.py, app/prediction_log/service.py) ------
    max_observation_rows: int = Field(5_000_000, ge=1, description="Observation rows one calibrator may hold; "
                                      "an append beyond it is refused with 413.")
    max_observation_bytes: int = Field(1 << 30, ge=1024, description="Bytes of observation inputs one "
                                       "calibrator may hold (413 beyond).")
    max_read_entries: int = Field(1 << 23, ge=1, description="Most stored entries (rows x classes) one read "
                                  "other than a fit loads: the label-shift estimate (per set: logged rows and "
                                  "labelled rows), quality, an evaluation, each batch of a drift-alarm evaluation; "
                                  "64 MiB as float64. Reads select exact rows; a read asking for more is refused "
                                  "(422/413 naming this setting).")
    max_logged_rows: int = Field(10_000_000, ge=1, description="Logged predictions one calibrator may hold; "
                                 "beyond it its logging stops (calibrate still answers) and the rows not logged "
                                 "are counted, until retention or deletions free room.")
    max_fit_entries: int = Field(1 << 26, ge=1, description="Most entries (n·k) a fit on stored observations "
                                 "reads (413 beyond; select fewer with `last`).")
    log_flush_rows: int = Field(65536, ge=1, description="The prediction log is written once this many rows wait "
                                "(or log_flush_bytes of inputs, or every log_flush_seconds).")
    log_flush_bytes: int = Field(8 << 20, ge=1, description="The prediction log is written once this many bytes of "
                                 "inputs wait (or log_flush_rows rows, or every log_flush_seconds): a write's fixed "
                                 "cost (a transaction, its statements and commit) is then shared by the requests of "
                                 "a few MiB, and a stored chunk stays about this size.")
    log_flush_seconds: float = Field(1.0, gt=0, description="How often the prediction log's buffer is written.")
    log_buffer_bytes: int = Field(256 << 20, ge=0, description="Largest prediction-log buffer per process; rows "
                                  "beyond it are dropped (and counted) rather than slowing calibrate.")
    log_writer: Literal["process", "thread"] = Field(
        "process", description="Who writes the prediction log: a process of its own (the default, on Linux: it "
        "shares no interpreter lock with the hot path) or a thread of each API process. An in-memory SQLite "
        "database, which another process cannot open, always uses the thread.")
    log_ring_bytes: int = Field(16 << 20, ge=1 << 20, description="The shared-memory ring through which each API "
                                "process hands served batches to its log writer process; a batch larger than "
                                "a quarter of it is not logged, and a full ring drops batches (counted).")
    log_writer_cache_bytes: int = Field(
        64 << 20, ge=0, le=1 << 40, description="SQLite's page cache in the log's writer process (0: SQLite's "
        "default, 2 MiB). A writer behind on random client ids writes all it holds in one commit, which touches "
        "many pages of the id index: in a cache too small for them SQLite writes them out mid-commit, some several "
        "times. Not used on Postgres or by the thread writer.")
    log_epoch_ids: int = Field(65536, ge=1, le=1 << 22, description="Index rows (a client id, or a batch of "
                               "generated ids) a writer puts in one epoch of the prediction log's id index "
                               "before it closes it with a Bloom filter of their ids "
                               "(app/prediction_log/epochs.py): random client ids then fill one epoch's pages, not "
                               "random pages of the whole index. A label is looked up in the open epochs and in "
                               "the closed ones whose filter may hold its id.")
    log_epoch_digest_bytes: int = Field(16 << 20, ge=0, le=1 << 34, description="The digests of the ids a log "
                                        "writer wrote into its open epochs (16 bytes an id), kept to build each "
                                        "epoch's Bloom filter when it closes instead of reading its ids back; an "
                                        "epoch whose ids would pass this reads them back (0: every epoch does).")
    log_epoch_idle_seconds: float = Field(3600.0, gt=0, description="Retention closes an open epoch not "
                                          "written for this long (its writer stopped, or has been idle), each in "
                                          "a transaction of its own.")
    log_epoch_filter_bytes: int = Field(256 << 20, ge=0, description="Closed epochs' Bloom filters (about 2 "
                                        "bytes a logged id at the default epoch size) each API process keeps in "
                                        "memory; beyond it they are read from the database at each label request.")
    observation_retention_days: float = Field(0.0, ge=0, description="Observations older than this are deleted "
                                              "(0: kept until deleted).")
    prediction_log_retention_days: float = Field(30.0, ge=0, description="Logged predictions older than this "
                                                 "are deleted, labelled or not (0: kept).")
    online_update_rows: int = Field(100, ge=1, description="An online calibrator (online_platt, "
                                    "online_temperature) stores its next version once this many labelled rows "
                                    "arrived since its latest (app/observations/online_updates.py).")
    schedule_seconds: float = Field(60.0, ge=0, description="How often each API process submits drift-monitor "
                                    "jobs where observations or logged predictions arrived, checks the refit "
                                    "policies (a fired one submits a refit job), then sends the due webhook "
                                    "deliveries; 0 turns all three off.")
    power_max_streams: int = Field(1000, ge=1, description="Most simulated streams of one power analysis "
                                   "(`POST .../power`; 422 above).")
    power_max_labels: int = Field(1_000_000, ge=1, description="Most labels per simulated stream of one power "
                                  "analysis (422 above).")
    power_max_entries: int = Field(2_000_000_000, ge=1, description="Most residuals (streams x labels x (classes + "
                                   "1)) one power analysis may simulate, per run (shifted and null): about 5 "
                                   "minutes of a job's core (413 above).")
    power_rows: int = Field(50_000, ge=1, description="A power analysis samples from the newest this many labelled "
                            "observations (uploads if there are any), fewer where over CALIBRATION_MAX_READ_ENTRIES.")
    alarm_webhook_url: str | None = Field(None, pattern=r"^https?://", description="New drift alarms are POSTed "
                                          "here as JSON (Slack-compatible `text` plus the alarm), one delivery "
                                          "per alarm with a `Webhook-Id`; unset or empty: none.")
    webhook_deadline_seconds: float = Field(10.0, gt=0, le=300, description="Total time one webhook attempt "
                                            "may take (connect, send, the whole answer); cut off after it.")
    webhook_attempts: int = Field(5, ge=1, le=100, description="Attempts per webhook delivery; after the last "
                                  "failed one it is `failed`.")
    webhook_backoff_seconds: float = Field(30.0, ge=0, le=86400, description="Wait before a webhook's second "
                                           "attempt, doubled before each next one.")
    retention_interval_seconds: float = Field(3600.0, gt=0, description="How often the retention settings "
                                              "are applied.")

    @field_validator("alarm_webhook_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        """docker-compose passes an unset host variable on as an empty string."""
        return None if value == "" else value


def serve_threads(settings: Settings, cores: int | None = None) -> int:
    """``settings.serve_threads``, or 2 where each worker has two cores to itself, else 1: a
    second thread overlaps numpy work with Python only where a core is idle (binary calibrate:
    1 worker on 2 cores 77% -> 86% of the floor with 2 threads; 2 workers 84% with 1, 80% with 2)."""
    if settings.serve_threads is not None:
        return settings.serve_threads
    return 2 if (cores or os.cpu_count() or 1) >= 2 * settings.workers else 1


@lru_cache
def get_settings() -> Settings:
    return Settings()
