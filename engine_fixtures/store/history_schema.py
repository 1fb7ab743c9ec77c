"""The run history's tables (SQLAlchemy Core, one definition for SQLite and PostgreSQL).

The results JSON stays the artifact of a run; these tables are the index over runs, rebuildable from the JSON
files with ``perf-baseline import``::

    runs        one row per run: run_id (unique), machine key, runner name, measured_at (UTC), suite commit,
                SGLang and torch versions (all versions as JSON), command, injection, A/B reference, the
                results file it came from and that file's format version
    run_labels  (run, label): the runner's labels, one row each, so "what did runner X measure" is a query
    results     one row per measured scenario of a run: arm (JSON), worst verdict ("outcome"), metadata (JSON)
    metrics     one row per (scenario result, metric): the row's verdict status ("unjudged" when none)
    samples     one row per window: (metric row, warmup or measured, window index, value)

Changing a table means a new alembic revision in ``store/history_migrations/versions`` (and
``SCHEMA_REVISION``); ``store.history`` refuses stores at any other revision, naming the command that migrates.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

SCHEMA_REVISION = "0001"

metadata = MetaData(naming_convention={
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
})

runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(400), nullable=False, unique=True),
    Column("machine_key", String(255), nullable=False),
    Column("runner", String(255), nullable=False, default=""),
    Column("measured_at", DateTime(timezone=False), nullable=False),  # naive UTC on every back end
    Column("date", String(64), nullable=False),  # as written in the results file
    Column("suite_commit", String(64), nullable=False, default=""),
    Column("sglang_version", String(64), nullable=True),
    Column("torch_version", String(64), nullable=True),
    Column("versions", JSON, nullable=False),
    Column("machine", JSON, nullable=False),
    Column("command", Text, nullable=False, default=""),
    Column("injection", String(400), nullable=False, default=""),
    Column("reference", String(400), nullable=False, default=""),
    Column("source", Text, nullable=False, default=""),
    Column("source_format", Integer, nullable=False),
    Column("recorded_at", DateTime(timezone=False), nullable=False),
    Index(None, "machine_key", "measured_at"),
)

run_labels = Table(
    "run_labels", metadata,
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("label", String(255), primary_key=True),
    Index(None, "label"),
)

results = Table(
    "results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("position", Integer, nullable=False),  # order within the run (a scenario may be measured twice)
    Column("scenario", String(1000), nullable=False),
    Column("arm", JSON, nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("metadata", JSON, nullable=False),
    UniqueConstraint("run_pk", "position"),
    Index(None, "scenario"),
)

metrics = Table(
    "metrics", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("result_pk", Integer, ForeignKey("results.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(255), nullable=False),
    Column("status", String(32), nullable=False),
    UniqueConstraint("result_pk", "name"),
    Index(None, "name"),
)

samples = Table(
    "samples", metadata,
    Column("metric_pk", Integer, ForeignKey("metrics.id", ondelete="CASCADE"), primary_key=True),
    Column("warmup", Boolean, primary_key=True),
    Column("window_index", Integer, primary_key=True),
    Column("value", Double, nullable=False),
)
