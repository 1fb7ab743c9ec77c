"""Connecting to the run history: URL -> SQLAlchemy engine, and the schema revision check (alembic).

- ``resolve_url(option, results_dir)``: ``--perf-history-url`` unset -> an SQLite file
  ``<results_dir>/history.sqlite`` (no set-up); ``none`` -> no history; ``sqlite:///PATH`` or
  ``postgresql://USER:PASSWORD@HOST:PORT/DB`` (driver psycopg 3). Anything else is a ``HistoryError`` that names
  the option and the accepted forms. Passwords never appear in a message (``shown(url)``).
- ``connect(url)``: an engine with timeouts on everything that waits: PostgreSQL ``connect_timeout`` and
  ``statement_timeout``; SQLite's busy timeout. SQLite runs in WAL mode and begins every writing transaction
  with ``BEGIN IMMEDIATE`` (pysqlite's own transaction handling would start it lazily and lose DDL atomicity),
  so concurrent writers queue on the busy timeout instead of failing half-way; readers begin a plain ``BEGIN``.
  An SQLite file that cannot be there (a file in the way of its directory, a read-only location:
  ``store.files.place_problem``) is refused before anything is created.
- Errors name the fix for the back end: for PostgreSQL the server and the URL's user, password and database; for
  SQLite the file (not a database, not writable, its directory).
- ``ensure_schema(engine)``: an empty database gets the schema at head, created in one transaction (when eight
  writers race on a fresh PostgreSQL database the losers roll back and find it created); a store at an older
  known revision, an unknown revision or without a revision table is refused with the command that fixes it.
  ``upgrade(engine)`` is that command's work (``perf-baseline migrate --history``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from engine_fixtures.errors import PerfError
from engine_fixtures.redact import mask_url, scrub
from engine_fixtures.store.files import place_problem
from engine_fixtures.store.history_schema import SCHEMA_REVISION

OPTION = "--perf-history-url (PERF_HISTORY_URL)"
FORMS = "sqlite:///PATH, postgresql://USER:PASSWORD@HOST:PORT/DB or 'none'"
DEFAULT_FILE = "history.sqlite"
MIGRATE_HINT = "perf-baseline migrate --history --history-url URL"
CONNECT_TIMEOUT_S = 10
STATEMENT_TIMEOUT_MS = 120_000
SQLITE_BUSY_TIMEOUT_S = 60.0
MIGRATIONS = Path(__file__).with_name("history_migrations")
READ_ONLY = "perf_history_read_only"  # execution option of read-only connections
SCHEMA_LOCK_KEY = 0x5E7F_5C4E  # PostgreSQL advisory lock that serialises creating the schema


class HistoryError(PerfError):
    """The run history cannot be opened or written; the message names the option and the fix."""


def shown(url: URL | str) -> str:
    """The URL as it may appear in a message or a log: every secret masked, an unparsable one not shown
    (``redact.mask_url``)."""
    return mask_url(url)


def resolve_url(option: str | None, results_dir: Path) -> URL | None:
    """The history URL for an option value (None: the default SQLite file; 'none': no history)."""
    if option is None or option.strip() == "":
        return URL.create("sqlite", database=str(Path(results_dir) / DEFAULT_FILE))
    if option.strip().lower() == "none":
        return None
    try:
        url = make_url(option.strip())
    except (ArgumentError, ValueError):  # ValueError: a port that is no number (a raw ":" in a password)
        raise HistoryError(f"Invalid {OPTION} {shown(option)!r}: not a database URL; use {FORMS}") from None
    backend = url.get_backend_name()
    if backend == "postgresql":
        if url.get_driver_name() not in ("psycopg", "psycopg2", "pg8000") or "+" not in url.drivername:
            url = url.set(drivername="postgresql+psycopg")
        if not url.database:
            raise HistoryError(f"Invalid {OPTION} {shown(url)!r}: the URL names no database; use {FORMS}")
        return url
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise HistoryError(f"Invalid {OPTION} {shown(url)!r}: an in-memory SQLite history is lost when the "
                               f"run ends; give a file (sqlite:///PATH) or use {FORMS}")
        return url
    raise HistoryError(f"Invalid {OPTION} {shown(url)!r}: {backend} is not supported; use {FORMS}")


def connect(url: URL) -> Engine:
    """An engine for ``url`` with timeouts; nothing is connected yet."""
    if url.get_backend_name() == "sqlite" and (why := place_problem(Path(url.database), "file")) is not None:
        raise HistoryError(f"{why}: the run history ({OPTION}) cannot be written there; {sqlite_fix(url)}")
    try:
        if url.get_backend_name() == "sqlite":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
            sa.event.listen(engine, "connect", _sqlite_on_connect)
            sa.event.listen(engine, "begin", _sqlite_begin)
            return engine
        query = dict(url.query)
        timeout = f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"
        args = {"options": " ".join(filter(None, [str(query.get("options", "")), timeout]))}
        if "connect_timeout" not in query:
            args["connect_timeout"] = CONNECT_TIMEOUT_S
        return sa.create_engine(url.difference_update_query(["options"]), connect_args=args, pool_pre_ping=True)
    except NoSuchModuleError as exc:
        raise HistoryError(f"{OPTION} {shown(url)!r}: no database driver for it ({exc}); reinstall the suite "
                           "(`pip install -e .`) so that psycopg is installed") from None
    except (ArgumentError, ImportError, OSError) as exc:
        raise HistoryError(f"{OPTION} {shown(url)!r} cannot be used ({exc}); use {FORMS}") from None


@contextmanager
def fresh_file_removed_on_failure(engine: Engine, url: URL) -> Iterator[None]:
    """SQLite creates its file at the first connection: where the first write then fails (a full disk), the file it
    created is removed with its -wal, -shm and -journal, never left 0 bytes long; a file that was there stays."""
    path = Path(url.database) if url.get_backend_name() == "sqlite" else None
    existed = path is None or path.exists()
    try:
        yield
    except BaseException:
        engine.dispose()  # closes the connection that holds the file
        if not existed:
            for leftover in (path, *(path.with_name(path.name + end) for end in ("-wal", "-shm", "-journal"))):
                leftover.unlink(missing_ok=True)
        raise


def _sqlite_on_connect(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None  # the "begin" listener below emits BEGIN itself
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    """Writers take the write lock up front (they queue on the busy timeout instead of failing to upgrade a read
    lock half-way); readers (``READ_ONLY`` execution option) read a WAL snapshot without a lock."""
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")


def sqlite_fix(url: URL) -> str:
    return (f"point {OPTION} at an SQLite file this user can write (sqlite:///PATH), or pass --perf-history-url none "
            "to keep no history")


@contextmanager
def translated(url: URL, doing: str) -> Iterator[None]:
    """Turn a driver's failure into a ``HistoryError`` naming the option and the fix for its back end: the server
    and the URL's credentials for PostgreSQL, the file for SQLite."""
    try:
        yield
    except DBAPIError as exc:
        detail = (str(exc.orig) if exc.orig is not None else str(exc)).strip().splitlines()[0]
        problem = scrub(f"{type(exc.orig).__name__}: {detail}", url)  # should the driver echo a secret
        if url.get_backend_name() == "sqlite" and type(exc) is sa.exc.DatabaseError:  # not an SQLite file at all
            raise HistoryError(f"{url.database} is not an SQLite database this suite can read ({problem}): the run "
                               f"history ({OPTION}) cannot {doing} it; move the file away or "
                               f"{sqlite_fix(url)}; `perf-baseline import DIR` rebuilds a history from results "
                               "files") from None
        if url.get_backend_name() == "sqlite" and "disk is full" in detail:
            raise HistoryError(f"cannot {doing} the run history file {url.database} ({OPTION}): {problem}; free space "
                               f"there, or {sqlite_fix(url)}") from None
        if url.get_backend_name() == "sqlite" and isinstance(exc, sa.exc.OperationalError):
            raise HistoryError(f"cannot {doing} the run history file {url.database} ({OPTION}): {problem}; check "
                               f"that this user can read and write it and its directory, or "
                               f"{sqlite_fix(url)}") from None
        if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            fix = ("check that the server is running and reachable and that the URL's user, password and database "
                   "are right, or pass --perf-history-url none to keep no history")
        else:
            fix = (f"the database refused it; if the store was changed by hand, point {OPTION} at another database "
                   "and rebuild it with `perf-baseline import DIR`")
        raise HistoryError(f"cannot {doing} the run history at {shown(url)} ({OPTION}): {problem}; {fix}") from None


def known_revisions() -> list[str]:
    return sorted(r.revision for r in ScriptDirectory(str(MIGRATIONS)).walk_revisions())


def revision_of(conn: sa.Connection) -> tuple[str | None, bool]:
    """(revision recorded in alembic_version or None, whether any history table exists).

    The tables are looked at first: a creator commits them and their revision in one transaction, so once the tables
    are visible the revision read after them is too (PostgreSQL's READ COMMITTED gives each statement a new snapshot;
    read the other way round, a creator committing between the two reads looked like a foreign store)."""
    has_tables = sa.inspect(conn).has_table("runs")
    return MigrationContext.configure(conn).get_current_revision(), has_tables


def check_revision(current: str | None, has_tables: bool, url: URL) -> None:
    """Refuse a store this suite cannot read as it is, naming the command."""
    if current == SCHEMA_REVISION:
        return
    known = known_revisions()
    where = f"the run history at {shown(url)} ({OPTION})"
    if current is None and has_tables:
        raise HistoryError(f"{where} has history tables but no schema revision (alembic_version); it was not "
                           "created by this suite: point the option at another database or drop those tables")
    if current in known:
        raise HistoryError(f"{where} is at schema revision {current}, older than this suite's {SCHEMA_REVISION}; "
                           f"migrate it with `{MIGRATE_HINT}` (back it up first)")
    raise HistoryError(f"{where} is at schema revision {current!r}, which this suite does not know (it knows "
                       f"{', '.join(sorted(known))}); a newer suite wrote it: upgrade sglang-perf-suite, then migrate "
                       f"with `{MIGRATE_HINT}` if it says so")


def _run_upgrade(conn: sa.Connection) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    config.attributes["connection"] = conn
    command.upgrade(config, SCHEMA_REVISION)


def ensure_schema(engine: Engine, url: URL) -> None:
    """Create the schema in an empty database; refuse any revision but this suite's."""
    with translated(url, "open"):
        for attempt in (1, 2):
            try:
                with engine.begin() as conn:
                    if conn.dialect.name == "postgresql":  # concurrent first runs create the schema one at a time
                        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})")
                    current, has_tables = revision_of(conn)
                    if current is None and not has_tables:
                        _run_upgrade(conn)
                        return
                check_revision(current, has_tables, url)
                return
            except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
                if attempt == 2:  # a concurrent creator wins once; a second failure is real
                    raise


def upgrade(engine: Engine, url: URL) -> tuple[str | None, str]:
    """Migrate the store to this suite's revision; returns (from, to)."""
    with translated(url, "migrate"), engine.begin() as conn:
        current, has_tables = revision_of(conn)
        if current == SCHEMA_REVISION:
            return current, SCHEMA_REVISION
        if (current is None and has_tables) or (current is not None and current not in known_revisions()):
            check_revision(current, has_tables, url)  # raises: nothing this suite can migrate
        _run_upgrade(conn)
        return current, SCHEMA_REVISION
