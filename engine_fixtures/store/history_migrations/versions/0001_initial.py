"""The first run-history schema: runs, run_labels, results, metrics, samples.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(400), nullable=False),
        sa.Column("machine_key", sa.String(255), nullable=False),
        sa.Column("runner", sa.String(255), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("date", sa.String(64), nullable=False),
        sa.Column("suite_commit", sa.String(64), nullable=False),
        sa.Column("sglang_version", sa.String(64), nullable=True),
        sa.Column("torch_version", sa.String(64), nullable=True),
        sa.Column("versions", sa.JSON, nullable=False),
        sa.Column("machine", sa.JSON, nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("injection", sa.String(400), nullable=False),
        sa.Column("reference", sa.String(400), nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("source_format", sa.Integer, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=False), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("run_id", name="uq_runs_run_id"),
    )
    op.create_index("ix_runs_machine_key_measured_at", "runs", ["machine_key", "measured_at"])
    op.create_table(
        "run_labels",
        sa.Column("run_pk", sa.Integer, nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("run_pk", "label", name="pk_run_labels"),
        sa.ForeignKeyConstraint(["run_pk"], ["runs.id"], name="fk_run_labels_run_pk_runs", ondelete="CASCADE"),
    )
    op.create_index("ix_run_labels_label", "run_labels", ["label"])
    op.create_table(
        "results",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_pk", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("scenario", sa.String(1000), nullable=False),
        sa.Column("arm", sa.JSON, nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_results"),
        sa.ForeignKeyConstraint(["run_pk"], ["runs.id"], name="fk_results_run_pk_runs", ondelete="CASCADE"),
        sa.UniqueConstraint("run_pk", "position", name="uq_results_run_pk_position"),
    )
    op.create_index("ix_results_scenario", "results", ["scenario"])
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("result_pk", sa.Integer, nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_metrics"),
        sa.ForeignKeyConstraint(["result_pk"], ["results.id"], name="fk_metrics_result_pk_results",
                                ondelete="CASCADE"),
        sa.UniqueConstraint("result_pk", "name", name="uq_metrics_result_pk_name"),
    )
    op.create_index("ix_metrics_name", "metrics", ["name"])
    op.create_table(
        "samples",
        sa.Column("metric_pk", sa.Integer, nullable=False),
        sa.Column("warmup", sa.Boolean, nullable=False),
        sa.Column("window_index", sa.Integer, nullable=False),
        sa.Column("value", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("metric_pk", "warmup", "window_index", name="pk_samples"),
        sa.ForeignKeyConstraint(["metric_pk"], ["metrics.id"], name="fk_samples_metric_pk_metrics",
                                ondelete="CASCADE"),
    )


def downgrade() -> None:
    for table in ("samples", "metrics", "results", "run_labels", "runs"):
        op.drop_table(table)
