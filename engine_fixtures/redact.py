"""Secrets kept out of what the suite prints and stores: a URL's password (a history URL comes from a secret)."""

from __future__ import annotations

import re


def mask_password(text: str) -> str:
    """``scheme://user:PASSWORD@host`` -> ``scheme://user:***@host``."""
    return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)
