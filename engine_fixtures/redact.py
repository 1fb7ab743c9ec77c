"""Secrets kept out of what the suite prints and stores: a URL's password (a history URL comes from a secret).

- ``mask_url(url)``: a database URL (text or SQLAlchemy's ``URL``) as it may be printed, parsed the way the driver
  parses it (SQLAlchemy's ``make_url``): its password masked, and every query parameter that names one (libpq's
  ``?password=``, ``&sslpassword=``, in any case); a text SQLAlchemy cannot parse is never printed as it is when it
  could hold a credential (an ``@``, ``:`` or ``=``): it reads ``<a value of N characters that is not a URL, not
  shown>``. ``--perf-history-url`` is shown through it (header, messages) and so is every ``*-url`` argument
  stored with the command line.
- ``mask_value(value)``: any other value (an option's value, one argument): a URL in it through ``mask_url``; one
  SQLAlchemy cannot parse masked ``scheme://user:***@host`` up to its last ``@`` (a host holds none), so a password
  with a raw ``@`` or a space in it is masked whole; also a ``password=`` query parameter.
- ``scrub(text, url)``: a driver's message with every secret of ``url`` masked, should the driver echo one.
- ``command_line(argv=None)``: the one capture of this process's command line (``sys.argv``), shell-quoted, each
  argument masked, as UTF-8 text, for everything that stores it: the results JSON (and so the run history), the
  run record, the machine lock.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"
_IN_VALUE = re.compile(r"(://[^:/@]*:).*@")
_QUERY = re.compile(r"([?&](?:ssl)?password=)[^&\s]*", re.IGNORECASE)
_USERINFO = re.compile(r"(://[^:/@]*:)[^?]*@")  # to the last @ before the query: a raw @ in a password too
_QUERY_SECRET = re.compile(r"([?&][^=&]*password[^=&]*=)[^&]*", re.IGNORECASE)
_SECRET_KEY = re.compile(r"password", re.IGNORECASE)  # libpq's password and sslpassword, as query parameters
_CREDENTIAL = re.compile(r"[@:=]")
_URL_FLAG = re.compile(r"--[\w-]*-url$")  # --perf-history-url, perf-baseline's --history-url


def _parsed(url: Any) -> Any:
    """SQLAlchemy's ``URL`` for ``url`` (already one, or text), or None where it cannot parse it."""
    if not isinstance(url, str):
        return url
    from sqlalchemy.engine import make_url  # only for a value that may be a URL: SQLAlchemy is slow to import
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url.strip())
    except (ArgumentError, ValueError, TypeError):
        return None


def _masked(text: str) -> str:
    return _QUERY_SECRET.sub(rf"\1{MASK}", _USERINFO.sub(rf"\1{MASK}@", text, count=1))


def mask_url(url: Any) -> str:
    """A database URL as it may be printed (see the module docstring); text keeps its own spelling where masking
    it in place leaves none of its secrets (raw or percent-encoded), else it is SQLAlchemy's rendering, masked."""
    parsed = _parsed(url)
    if parsed is None:
        return f"<a value of {len(url)} characters that is not a URL, not shown>" if _CREDENTIAL.search(url) else url
    if isinstance(url, str):
        text = _masked(url)
        if not any(form in text for s in secrets_of(parsed) for form in (s, quote(s, safe=""), quote_plus(s))):
            return text
    query = {k: (MASK if _SECRET_KEY.search(k) else v) for k, v in parsed.query.items()}
    return _masked(parsed.set(query=query).render_as_string(hide_password=True).replace(quote(MASK, safe=""), MASK))


def secrets_of(url: Any) -> tuple[str, ...]:
    """The password and the values of the query parameters that name one (``mask_url``'s), longest first."""
    parsed = _parsed(url)
    if parsed is None:
        return ()
    found = [parsed.password or ""]
    for key, value in parsed.query.items():
        if _SECRET_KEY.search(key):
            found += [value] if isinstance(value, str) else list(value)
    return tuple(sorted({s for s in found if s}, key=len, reverse=True))


def scrub(text: str, url: Any) -> str:
    """``text`` (a driver's message about ``url``) with every secret of ``url`` masked."""
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text


def mask_value(value: str) -> str:
    """One value (an argument, an option's value) with its password masked."""
    if "://" in value and _parsed(value) is not None:
        return mask_url(value)
    return _QUERY.sub(rf"\1{MASK}", _IN_VALUE.sub(rf"\1{MASK}@", value))


def command_line(argv: Sequence[str] | None = None) -> str:
    """This process's command line (or ``argv``), shell-quoted, every secret masked, as UTF-8 text: bytes of an
    argument that are not UTF-8 are written ``\\xff`` (a lone surrogate cannot be stored in the run history)."""
    args = [os.fsencode(a).decode("utf-8", "backslashreplace") for a in (sys.argv if argv is None else argv)]
    out = []
    for before, arg in zip(["", *args], args, strict=False):
        flag, eq, value = arg.partition("=")
        if _URL_FLAG.match(before):
            out.append(mask_url(arg))
        elif eq and _URL_FLAG.match(flag):
            out.append(f"{flag}={mask_url(value)}")
        else:
            out.append(mask_value(arg))
    return shlex.join(out)
