"""Alembic's environment for the run history: migrate on the connection ``store.history_db`` hands over.

Only ever run through ``alembic.command.upgrade`` with ``config.attributes["connection"]`` set (alembic's
"sharing a connection" recipe), inside the caller's transaction.
"""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
