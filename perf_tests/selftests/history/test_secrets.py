"""A password in --perf-history-url is written nowhere: not in the results JSON, the history's command column, the
machine lock, the run record, the summary, the report or any other file the session writes (checked while the
run lives, for the lock and the record, and after it, for every file under its directories)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from urllib.parse import unquote_plus

import pytest

from engine_fixtures import options
from engine_fixtures.redact import command_line
from engine_fixtures.store.history import HistoryError, HistoryStore

pytest_plugins = ("pytester",)

PASSWORD = "Pw-9f3e%40x"  # URL-encoded as a URL needs it ("Pw-9f3e@x" to the server)
SECRETS = (PASSWORD, "Pw-9f3e@x")
UNREACHABLE = "postgresql://perf:{pw}@127.0.0.1:1/perf"  # port 1: refused at once, the history write fails

TEST_FILE = """
import json, os, shutil, stat
from pathlib import Path
import pytest
from engine_fixtures.store.results import RunResult

@pytest.mark.perf
def test_demo(perf_record):
    state, during = Path(os.environ["STATE"]), Path(os.environ["DURING"])
    during.mkdir()
    modes = {}
    for f in [state / "lock", *(state / "runs").glob("*.json")]:
        shutil.copy(f, during / f.name)
        modes[f.name] = stat.S_IMODE(f.stat().st_mode)
    (during / "modes.json").write_text(json.dumps(modes))
    perf_record(RunResult("demo/arm=a/c=4", {"arm": "a", "c": "4"}, {"latency_p50_ms": (100.0, 101.0, 99.0, 100.5)}))
"""


def test_the_command_line_is_captured_with_every_secret_masked() -> None:
    line = command_line(["pytest", "--perf-history-url", "postgresql://u:p@ss w@h/db", "-k", "x y",
                         "--perf-history-url=postgresql://u@h/db?sslpassword=s3cret&sslmode=require"])
    assert line == ("pytest --perf-history-url 'postgresql://u:***@h/db' -k 'x y' "
                    "'--perf-history-url=postgresql://u@h/db?sslpassword=***&sslmode=require'")


def test_the_command_line_capture_is_text_the_history_can_store() -> None:
    """Issue 37, case 1: an argument holding bytes that are not UTF-8 (a lone surrogate in ``sys.argv``) made the
    results JSON's command unstorable: the history row, the summary and the report were lost to a traceback, and
    ``perf-baseline import`` of that JSON failed the same way."""
    line = command_line(["pytest", "-k", os.fsdecode(b"caf\xe9"), "--perf-results-dir", "out"])
    assert line == r"pytest -k 'caf\xe9' --perf-results-dir out"
    assert line.encode("utf-8")

def run_with(p: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, url: str) -> tuple[pytest.RunResult, Path]:
    """A session given ``url`` on its command line; every file under its directories checked; its results file."""
    p.makepyfile(test_demo=TEST_FILE)
    state, out, during = p.path / "state", p.path / "out", p.path / "during"
    monkeypatch.setenv("STATE", str(state))
    monkeypatch.setenv("DURING", str(during))
    args = ["-p", "no:cacheprovider", "--perf-strict", "no", "--perf-state-dir", str(state), "--perf-results-dir",
            str(out), "--perf-baseline-dir", str(p.path / "bl"), "--perf-history-url", url]
    monkeypatch.setattr(sys, "argv", ["pytest", *args])  # as a user typed it: the session captures sys.argv
    r = p.runpytest(*args)
    r.assert_outcomes(skipped=1)
    assert not any(x in r.stdout.str() + r.stderr.str() for x in SECRETS)
    (results,) = out.glob("results-*.json")
    assert ":***@" in json.loads(results.read_text())["command"]  # the URL is there, its password masked
    modes = json.loads((during / "modes.json").read_text())  # the lock and the record while the run lived
    assert modes.pop("lock") == 0o666  # every user's run writes its line into the shared lock
    assert list(modes.values()) == [0o644]  # the run record: read by other users' sweeps, written by none
    files = [f for f in p.path.rglob("*") if f.is_file()]  # results, state, the copies, pytest's temp dirs
    assert {"lock", "summary.md", "report.html", results.name} <= {f.name for f in files}
    leaking = [str(f) for f in files if any(x.encode() in f.read_bytes() for x in SECRETS)]
    assert not leaking, leaking
    for f in files:  # nothing the session wrote is writable by other users, but the shared lock
        if (f.is_relative_to(out) or f.is_relative_to(state)) and f.name != "lock":
            assert not stat.S_IMODE(f.stat().st_mode) & 0o022, f
    return r, results


def test_a_history_that_is_down_is_refused_at_start_without_the_password(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # The run history is opened at start (session.preflight): an unreachable server stops the run before anything is
    # measured, and its error names the URL with the password masked; nothing the session wrote holds it.
    pytester.makepyfile(test_demo=TEST_FILE)
    url = UNREACHABLE.format(pw=PASSWORD)
    args = ["-p", "no:cacheprovider", "--perf-state-dir", str(pytester.path / "state"), "--perf-results-dir",
            str(pytester.path / "out"), "--perf-history-url", url]
    monkeypatch.setattr(sys, "argv", ["pytest", *args])
    r = pytester.runpytest(*args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    text = r.stdout.str() + r.stderr.str()
    assert "perf:***@127.0.0.1:1" in text
    assert not any(x in text for x in SECRETS)
    leaking = [str(f) for f in pytester.path.rglob("*") if f.is_file() and any(x.encode() in f.read_bytes()
                                                                               for x in SECRETS)]
    assert not leaking, leaking


@pytest.mark.parametrize("history_url", ["postgresql"], indirect=True)
def test_no_written_file_nor_the_history_holds_the_password(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, history_url: str) -> None:
    # the throwaway server trusts its socket: the password is ignored and the history is written
    url = history_url.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)
    assert PASSWORD in url, f"expected a URL with user postgres and no password, got {history_url}"
    r, results = run_with(pytester, monkeypatch, url)
    assert "run history: appended" in r.stdout.str()
    with HistoryStore.open(url, pytester.path, create=False) as store:
        (run,) = store.load([json.loads(results.read_text())["run_id"]])
    assert not any(x in run.command for x in SECRETS)
    assert "postgres:***@" in run.command


PW = "S3cr3t-pw"  # in every form below; with "@" and ":" where the form allows them
FORMS = {
    "user-password": "postgresql://perf:S3cr3t-pw@127.0.0.1:1/perf",
    "password-only": "postgresql://:S3cr3t-pw@127.0.0.1:1/perf",
    "driver": "postgresql+psycopg://perf:S3cr3t-pw@127.0.0.1:1/perf",
    "percent-encoded": "postgresql://perf:S3cr3t-pw%40x%3Ay@127.0.0.1:1/perf",
    "raw-at-and-colon": "postgresql://perf:S3cr3t-pw@x:y@127.0.0.1:1/perf",
    "query-password": "postgresql://perf@127.0.0.1:1/perf?password=S3cr3t-pw",
    "query-sslpassword": "postgresql://perf@127.0.0.1:1/perf?sslmode=disable&sslpassword=S3cr3t-pw",
    "query-upper-case": "postgresql://perf@127.0.0.1:1/perf?PASSWORD=S3cr3t-pw",
    "query-encoded": "postgresql://perf@127.0.0.1:1/perf?password=S3cr3t-pw%20%26x",
    "query-only": "postgresql:///perf?host=127.0.0.1&port=1&user=perf&password=S3cr3t-pw",
    "both": "postgresql://perf:S3cr3t-pw@127.0.0.1:1/perf?password=S3cr3t-pw",
    "no-scheme": "perf:S3cr3t-pw@127.0.0.1:1/perf",
    "libpq-key-value": "host=127.0.0.1 port=1 user=perf password=S3cr3t-pw",
    "unsupported-scheme": "mysql://perf:S3cr3t-pw@127.0.0.1:1/perf",
}


@pytest.mark.parametrize("url", FORMS.values(), ids=FORMS.keys())
def test_every_form_of_the_url_is_masked_in_the_header_and_the_error(url: str, tmp_path: Path) -> None:
    """Issue 37, case 3: a URL not in ``user:password@`` form (a query password, no scheme, a libpq key=value
    string) printed its password in clear, in the header, in the error or both. The header line is the plugin's
    ``display`` of the option, the error the one the session stops with at start (``HistoryStore.open``), and the
    command line as the results JSON, the lock and the run record store it."""
    header = options.display(url, options.OPTIONS_BY_NAME["history_url"])
    with pytest.raises(HistoryError) as info:
        HistoryStore.open(url, tmp_path)
    stored = command_line(["pytest", "--perf-history-url", url, f"--history-url={url}"])  # the results' command
    for text in (header, str(info.value), stored):
        assert PW not in unquote_plus(text), text
        assert "***" in text or "not shown" in text, text


def test_a_query_password_is_masked_in_the_session_header_and_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_demo=TEST_FILE)
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--perf-results-dir", str(pytester.path / "out"),
                                     "--perf-history-url", FORMS["query-sslpassword"])
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert PW not in r.stdout.str() + r.stderr.str()
    r.stdout.fnmatch_lines(["perf options: *history_url=postgresql://perf@127.0.0.1:1/perf?sslmode=disable"
                            "&sslpassword=*** (command line --perf-history-url)*"])
    r.stderr.fnmatch_lines(["*cannot open the run history at postgresql+psycopg://perf@127.0.0.1:1/perf?*"
                            "sslpassword=****Connection refused*"])
