"""A throwaway PostgreSQL server from the distribution's binaries, for the run history's self-tests.

Standard library only, so ``.ci/run`` starts it with the system Python before any virtual environment exists::

    python3 -m perf_tests.support.postgres start DIR   # prints the URL; export it as TEST_POSTGRES_URL
    python3 -m perf_tests.support.postgres stop DIR

The cluster lives in DIR (``initdb --auth=trust``), listens on a Unix socket in DIR only (no TCP port to
collide with, nothing reachable from outside) and runs as the ``postgres`` user when started by root (the
server refuses root). ``pg_ctl start --wait`` returns when the server accepts connections; ``createdb`` makes
the database. The tests' fixture uses the same ``start``/``stop`` when TEST_POSTGRES_URL is not set.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

DB = "perf_history"
START_TIMEOUT_S = 60
INSTALL_HINT = "apt-get install -y postgresql (Debian/Ubuntu)"


def bindir() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``: $PG_BINDIR, PATH, or the newest /usr/lib/postgresql/N/bin."""
    env = os.environ.get("PG_BINDIR")
    if env and (Path(env) / "initdb").exists():
        return Path(env)
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    return Path(versions[-1]).parent if versions else None


def _user() -> str | None:
    """Run the server as ``postgres`` when we are root (PostgreSQL refuses to run as root)."""
    return "postgres" if os.geteuid() == 0 else None


def _run(args: list[str], user: str | None, timeout: float) -> None:
    out = subprocess.run(args, user=user, capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({out.returncode}): {(out.stderr or out.stdout).strip()}")


def url_for(root: Path) -> str:
    return f"postgresql+psycopg://postgres@/{DB}?host={root / 'sock'}"


def start(root: Path) -> str:
    """Create and start a cluster in ``root``; returns its URL."""
    binaries = bindir()
    if binaries is None:
        raise FileNotFoundError(f"no PostgreSQL server binaries (initdb) found; install them: {INSTALL_HINT}")
    user = _user()
    root = Path(root).resolve()
    data, sock = root / "data", root / "sock"
    sock.mkdir(parents=True, exist_ok=True)
    if user is not None:
        info = pwd.getpwnam(user)
        for p in (root, sock):
            os.chown(p, info.pw_uid, info.pw_gid)
    if not (data / "PG_VERSION").exists():
        _run([str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
              "--no-sync"], user, START_TIMEOUT_S)
    opts = f"-c listen_addresses='' -k {sock} -c max_connections=100"
    _run([str(binaries / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-o", opts, "-w",
          "-t", str(START_TIMEOUT_S), "start"], user, START_TIMEOUT_S + 10)
    _run([str(binaries / "createdb"), "-h", str(sock), "-U", "postgres", DB], user, 30)
    return url_for(root)


def stop(root: Path) -> None:
    binaries = bindir()
    data = Path(root).resolve() / "data"
    if binaries is None or not (data / "postmaster.pid").exists():
        return
    _run([str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"], _user(), 70)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print(f"usage: python -m perf_tests.support.postgres start|stop DIR ({__doc__.splitlines()[0]})",
              file=sys.stderr)
        return 2
    if argv[0] == "start":
        print(start(Path(argv[1])))
    else:
        stop(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
