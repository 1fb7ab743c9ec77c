"""Secrets kept out of what the suite prints and stores: a URL's password (a history URL comes from a secret).

- ``mask_value(value)``: ``scheme://user:PASSWORD@host`` -> ``scheme://user:***@host`` in one value (an option's
  value, one argument, a URL in a message), masked up to its last ``@`` (a host holds none), so a password with
  a raw ``@`` or a space in it is masked whole; also a ``password=`` query parameter.
- ``command_line(argv=None)``: the one capture of this process's command line (``sys.argv``), shell-quoted, each
  argument through ``mask_value``, for everything that stores it: the results JSON (and so the run history), the
  run record, the machine lock.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Sequence

MASK = "***"
_IN_VALUE = re.compile(r"(://[^:/@]*:).*@")
_QUERY = re.compile(r"([?&](?:ssl)?password=)[^&\s]*", re.IGNORECASE)


def mask_value(value: str) -> str:
    """One value (an argument, an option's value) with its password masked."""
    return _QUERY.sub(rf"\1{MASK}", _IN_VALUE.sub(rf"\1{MASK}@", value))


def command_line(argv: Sequence[str] | None = None) -> str:
    """This process's command line (or ``argv``), shell-quoted, every secret masked, as UTF-8 text: bytes of an
    argument that are not UTF-8 are written ``\\xff`` (a lone surrogate cannot be stored in the run history)."""
    args = sys.argv if argv is None else argv
    return shlex.join(mask_value(os.fsencode(a).decode("utf-8", "backslashreplace")) for a in args)
