"""The run-history tests run every test against both back ends: an SQLite file and a real PostgreSQL server.

PostgreSQL: ``TEST_POSTGRES_URL`` (``.ci/run`` starts a server from the distribution's packages and sets it),
else a throwaway server started here from the installed binaries (``perf_tests.support.postgres``). Only
where neither exists do the PostgreSQL cases skip, with the reason and the fix. Each test gets a fresh schema
of its own (``search_path``), so tests never see each other's runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg  # noqa: F401  (see below)
import pytest
import sqlalchemy as sa

from engine_fixtures.store.history_db import resolve_url
from perf_tests.support import postgres

PG_ENV = "TEST_POSTGRES_URL"
# psycopg is imported here, before any in-process pytester run: pytester drops the modules a run imported when
# it ends, and a re-imported psycopg has new exception classes while its C extension keeps raising the old ones,
# which SQLAlchemy then fails to recognise as driver errors (a test artefact; nothing unloads modules in a run).


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    url = os.environ.get(PG_ENV, "").strip()
    if url:
        yield url
        return
    if postgres.bindir() is None:
        pytest.skip(f"no PostgreSQL server for the run-history tests: set {PG_ENV}=postgresql://USER@HOST/DB or "
                    f"install the server ({postgres.INSTALL_HINT}) and the tests start one; .ci/run does")
    root = Path(tempfile.mkdtemp(prefix="perf-pg-"))
    try:
        url = postgres.start(root)
    except (OSError, RuntimeError, KeyError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"could not start a PostgreSQL server from {postgres.bindir()} ({exc}); set {PG_ENV} instead")
    try:
        yield url
    finally:
        postgres.stop(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty run history on each back end."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'history.sqlite'}"
        return
    base = resolve_url(request.getfixturevalue("postgres_url"), tmp_path)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    try:
        with admin.begin() as conn:
            conn.execute(sa.schema.CreateSchema(schema))
        opts = f"{base.query.get('options', '')} -csearch_path={schema}".strip()
        yield base.update_query_dict({"options": opts}).render_as_string(hide_password=False)
        with admin.begin() as conn:
            conn.execute(sa.schema.DropSchema(schema, cascade=True))
    finally:
        admin.dispose()
