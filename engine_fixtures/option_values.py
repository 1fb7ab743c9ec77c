"""How an option's text becomes its value: the parsers of ``options.OPTIONS`` and of the CLIs' own flags.

Each parser takes the text as given (command line, environment, ini) and returns the value, or raises
``argparse.ArgumentTypeError`` saying what it expected; ``options.resolve`` adds where the text came from.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from engine_fixtures.inject import Injection, parse_injection

Parser = Callable[[str], Any]


def _number(text: str, kind: Callable[[str], float], what: str, lowest: float, inclusive: bool) -> Any:
    """``text`` as ``kind``, at least ``lowest`` (above it unless ``inclusive``); NaN is refused too."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not (value >= lowest if inclusive else value > lowest):
        raise argparse.ArgumentTypeError(f"must be {'>=' if inclusive else '>'} {lowest:g}, got {value}")
    return value


def parse_positive_int(text: str) -> int:
    return int(_number(text, int, "an integer", 1, inclusive=True))


def parse_positive_float(text: str) -> float:
    return float(_number(text, float, "a number", 0, inclusive=False))


def parse_nonnegative_float(text: str) -> float:
    return float(_number(text, float, "a number", 0, inclusive=True))


def parse_cpus_setting(text: str) -> tuple[int, ...] | str:
    """``auto``, ``off`` or a CPU list (``0-11``, ``0,2,4``)."""
    low = text.strip().lower()
    return low if low in ("auto", "off") else parse_cpu_list(text)


def parse_percent(text: str) -> float:
    """``5`` or ``5%`` -> 0.05."""
    value = parse_positive_float(text.strip().rstrip("%"))
    return value / 100.0


def parse_injection_text(text: str) -> Injection:
    try:
        return parse_injection(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_choice(*choices: str) -> Parser:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    parse.__name__ = "choice"
    return parse


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected yes or no (also true/false, on/off, 1/0), got {text!r}")


def parse_names(text: str) -> tuple[str, ...]:
    """``buffer,stock`` -> names, in the order given, each once; an empty list is an error."""
    names = tuple(dict.fromkeys(filter(None, (p.strip() for p in text.split(",")))))
    if not names:
        raise argparse.ArgumentTypeError(f"expected names separated by commas, like 'buffer,stock', got {text!r}")
    return names


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``0``, ``0,1`` or ``2-5`` -> CPU ids for pinning the load client."""
    cpus: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a CPU list like '0' or '0,2-3', got {text!r}") from None
    if not cpus:
        raise argparse.ArgumentTypeError(f"empty CPU list {text!r}")
    return tuple(cpus)
