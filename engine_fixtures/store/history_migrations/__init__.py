"""Alembic revisions of the run-history schema (``store.history_schema``), applied through ``store.history_db``.

Why alembic rather than a hand-kept version table: SQLite cannot ``ALTER`` most column changes, and alembic's
batch mode (copy the table, swap it in) is the maintained answer for that; its ``alembic_version`` table is
what an operator of a fleet's PostgreSQL already knows; and ``render_as_batch`` plus offline SQL come free.
There is no ``env.py``: ``store.history_db`` drives alembic's ``EnvironmentContext`` on its own connection.

A new revision: copy ``versions/0001_initial.py`` to ``NNNN_what.py``, set ``revision``/``down_revision``,
write ``upgrade()`` with ``op.batch_alter_table`` (SQLite), and move ``history_schema.SCHEMA_REVISION``.
"""
