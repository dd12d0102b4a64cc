"""Running the Alembic migrations (shipped inside the package as ``app.migrations``)."""

from __future__ import annotations

import logging
import sys
import tempfile
from importlib.resources import files

from sqlalchemy import func, inspect, select, table
from sqlalchemy.engine import Engine

from .revision import current_revision

# Alembic imports Mako, whose HTML error pages highlight source with Pygments where it is installed
# (~0.03 CPU-s of every server start, docs/benchmarks.md, "Process start-up"); migrations render no
# such page: while Alembic is imported, Mako's import of its Pygments plugin fails and Mako falls back
# to plain escaping, which it does without Pygments; later imports of the plugin are left alone
_PYGMENTS_PLUGIN = "mako.ext.pygmentplugin"
_blocked = _PYGMENTS_PLUGIN not in sys.modules
if _blocked:
    sys.modules[_PYGMENTS_PLUGIN] = None  # type: ignore[assignment]
try:
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from alembic.script.revision import ResolutionError
    from alembic.util import CommandError
finally:
    if _blocked:
        del sys.modules[_PYGMENTS_PLUGIN]


def include_name(name, type_, parent_names) -> bool:
    """What autogenerate compares with the models: not Procrastinate's tables, which migration
    0004 creates from the job engine's own schema file."""
    return not (type_ == "table" and name.startswith("procrastinate_"))


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("app.migrations")))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if head is None:  # the package ships its migrations: only a broken install has none
        raise CommandError("no migrations found")
    return head


# what a downgrade would lose, by table, in the order the message names them
LOSS_NAMES = {
    "calibrators": ("calibrator", "calibrators"),
    "calibrator_versions": ("version", "versions"),
    "aliases": ("alias", "aliases"),
    "api_keys": ("API key", "API keys"),
    "jobs": ("job", "jobs"),
    "alias_moves": ("recorded alias move", "recorded alias moves"),
    "observation_chunks": ("chunk of observations", "chunks of observations"),
    "prediction_chunks": ("chunk of logged predictions", "chunks of logged predictions"),
    "logged_predictions": ("logged prediction id", "logged prediction ids"),
    "prediction_epochs": ("epoch of the prediction log", "epochs of the prediction log"),
    "evaluations": ("evaluation", "evaluations"),
    "drift_monitors": ("drift monitor", "drift monitors"),
    "webhook_deliveries": ("webhook delivery", "webhook deliveries"),
    "set_predictors": ("set predictor", "set predictors"),
    "adaptive_sets": ("adaptive set state", "adaptive set states"),
}


def _schema(engine: Engine) -> dict[str, list[tuple[str, str]]]:
    """Every table's columns (name and type), Alembic's own table aside."""
    inspector = inspect(engine)
    return {name: [(c["name"], str(c["type"])) for c in inspector.get_columns(name)]
            for name in inspector.get_table_names() if name != "alembic_version"}


def downgrade_losses(database_url: str, revision: str) -> dict[str, int]:
    """The rows a downgrade to ``revision`` would drop or change, by table: the tables it
    drops or alters (found by running the same migrations on a scratch SQLite database from
    this database's revision down to ``revision`` and comparing the schemas), counted in this
    database; only tables holding rows are named."""
    from .db import make_engine

    engine = make_engine(database_url)
    try:
        current = current_revision(engine)
        if current is None:
            return {}
        alembic_log = logging.getLogger("alembic")
        level = alembic_log.level
        alembic_log.setLevel(logging.WARNING)  # the scratch migrations are no news to the operator
        try:
            return _losses(engine, current, revision)
        finally:
            alembic_log.setLevel(level)
    finally:
        engine.dispose()


def _losses(engine: Engine, current: str, revision: str) -> dict[str, int]:
    from .db import make_engine

    # step by step: a table one revision's downgrade changes is a loss unless that revision
    # declares it lossless (it rewrites the rows in the old form: 0009's and 0010's expand batch
    # index rows into one row per id; 0011 drops the epochs, derived from the index it keeps)
    affected: set[str] = set()
    with tempfile.TemporaryDirectory() as scratch:
        scratch_url = f"sqlite:///{scratch}/schema.db"
        upgrade(scratch_url, current)
        script = ScriptDirectory.from_config(alembic_config(scratch_url))
        try:
            crossed = [script.get_revision(r.revision) for r in script.iterate_revisions(current, revision)
                       if r.revision != revision]
        except ResolutionError as exc:  # an unknown revision: the error alembic's own command gives
            raise CommandError(str(exc)) from exc
        scratch_engine = make_engine(scratch_url)
        before = _schema(scratch_engine)
        for step in crossed:
            below = step.down_revision or "base"
            if not isinstance(below, str):  # the migrations are one line: no merge revision has two parents
                raise CommandError(f"revision {step.revision} merges {', '.join(below)}: not supported")
            downgrade(scratch_url, below)
            after = _schema(scratch_engine)
            lossless = set(getattr(step.module, "lossless_downgrade", ()))
            affected |= {name for name in before if after.get(name) != before[name] and name not in lossless}
            before = after
        scratch_engine.dispose()
    present = set(inspect(engine).get_table_names())
    losses = {}
    with engine.connect() as connection:
        for name in affected:
            if name in present:
                rows = connection.execute(select(func.count()).select_from(table(name))).scalar_one()
                if rows:
                    losses[name] = rows
    order = list(LOSS_NAMES)
    return dict(sorted(losses.items(), key=lambda item: (order.index(item[0]) if item[0] in order else len(order),
                                                          item[0])))


def describe_losses(losses: dict[str, int]) -> str:
    """``{"calibrators": 2, "aliases": 1}`` as "2 calibrators, 1 alias"."""
    parts = []
    for name, rows in losses.items():
        singular, plural = LOSS_NAMES.get(name, (f"row of {name}", f"rows of {name}"))
        parts.append(f"{rows} {singular if rows == 1 else plural}")
    return ", ".join(parts)
