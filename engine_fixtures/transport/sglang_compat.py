"""SGLang's own ``ShmPointerMMData`` (0.5.16 through 0.5.23), unpatched or with the buffer copy.

Contract:
- ``find_shm_class()`` imports ``sglang.srt.managers.mm_utils`` and returns a ``ShmClassLookup``:
  the class (or None with the reason and the fix), SGLang's version, and the layout (``0.5.16`` or
  ``0.5.19+``, which initialises ``_materialization_error`` first). Two kinds of None: SGLang is not
  installed or not importable here (``skip_reason``: tests skip), or it is installed and the module or the
  class is not where this suite looks (``error``: a release with another layout, e.g. 0.6; tests fail with
  what moved and which suite supports which releases, and nothing is measured).
- ``buffer_copy_init(original)`` builds the replacement ``__init__`` from SGLang's own source with
  exactly one change: the two copy lines ``dst = torch.frombuffer(shm.buf, dtype=torch.uint8)`` /
  ``dst.copy_(tensor.view(torch.uint8).reshape(-1))`` become ``shm.buf[:nbytes] =
  tensor.view(torch.uint8).reshape(-1).numpy()``. Everything else (attribute init, posix_fallocate,
  unlink on failure, SGLang's segment names) is SGLang's code. If the copy lines are not found the
  function raises ``ConfigError`` instead of guessing.
- ``apply_copy_arm(cls, arm)`` installs a counting wrapper around the chosen ``__init__`` (``torch``:
  SGLang's original, checked to still copy with torch; ``buffer``: the rewrite); ``COPY_CALLS[arm]`` counts
  constructions in this process, which proves which implementation ran. ``restore(cls)`` undoes it;
  ``copy_arm(cls, arm)`` does both.
This module imports only the standard library at import time (safe inside every engine process).
"""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from engine_fixtures import sglang_version
from engine_fixtures.errors import ConfigError
from engine_fixtures.transport.arms import COPY_ARMS

MODULE = sglang_version.MM_UTILS_MODULE
CLASS_NAME = sglang_version.SHM_CLASS
TESTED_VERSIONS = sglang_version.SUPPORTED
ARMS = COPY_ARMS  # the registry's copy arms (transport.arms)
_ORIGINAL_ATTR = "_perf_original_init"
_ARM_ATTR = "_perf_copy_arm"
_COPY_RE = re.compile(
    r"^(?P<indent>[ \t]+)dst = torch\.frombuffer\(shm\.buf, dtype=torch\.uint8\)[ \t]*\n"
    r"[ \t]+dst\.copy_\(tensor\.view\(torch\.uint8\)\.reshape\(-1\)\)[ \t]*$",
    re.MULTILINE,
)
BUFFER_LINE = "shm.buf[:nbytes] = tensor.view(torch.uint8).reshape(-1).numpy()"
COPY_CALLS: Counter[str] = Counter()


@dataclass(frozen=True)
class ShmClassLookup:
    cls: type | None
    reason: str  # why cls is None (fact and fix), or where it was found
    version: str | None
    layout: str | None  # sglang_version.SHM_LAYOUT_0_5_16 or SHM_LAYOUT_0_5_19
    moved: bool = False  # SGLang is installed and importable, but not in a layout this suite knows

    @property
    def skip_reason(self) -> str | None:
        """Why SGLang's class cannot be used here (not installed, or a dependency missing): a skip."""
        return self.reason if self.cls is None and not self.moved else None

    @property
    def error(self) -> str | None:
        """What moved in the installed release: an error, never a skip (the suite would measure nothing)."""
        return self.reason if self.moved else None


def _module_gone(exc: BaseException, module: str) -> bool:
    """Whether ``exc`` says ``module`` itself (or a package on its path below ``sglang``) does not exist."""
    name = getattr(exc, "name", None) or ""
    return (isinstance(exc, ModuleNotFoundError) and name.startswith("sglang.")
            and (module == name or module.startswith(name + ".")))


def find_shm_class() -> ShmClassLookup:
    """Locate SGLang's ``ShmPointerMMData``; never raises."""
    version = sglang_version.installed()
    try:
        # SGLang's import chain emits DeprecationWarnings (e.g. torch.jit.script_method on torch 2.11); with
        # the suite's filterwarnings=error they would turn an importable SGLang into a skip.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(MODULE)
    except Exception as exc:  # ImportError, or a missing transitive dependency failing at load
        if version is not None and _module_gone(exc, MODULE):
            return ShmClassLookup(None, sglang_version.unsupported(f"there is no module {MODULE} ({exc})", version),
                                  version, None, moved=True)
        return ShmClassLookup(None, f"cannot import {MODULE} (sglang {version or 'not installed'}): "
                              f"{type(exc).__name__}: {exc}; install SGLang {TESTED_VERSIONS[0]}.."
                              f"{TESTED_VERSIONS[-1]} (GPU runner: pip install 'sglang-perf-suite[gpu]'; CPU "
                              "box: tox -e sglang0523-cpu, or torch 2.14.1 and pip install --no-deps sglang plus "
                              "the exact set in constraints/sglang-cpu-<version>.txt)", version, None)
    cls = getattr(module, CLASS_NAME, None)
    if cls is None:
        return ShmClassLookup(None, sglang_version.unsupported(f"{MODULE} has no {CLASS_NAME} (it moved or was "
                                                               "renamed)", version), version, None, moved=True)
    init = original_init(cls)
    layout = sglang_version.shm_layout(init.__code__.co_names)
    return ShmClassLookup(cls, f"{MODULE}.{CLASS_NAME} of sglang {version}", version, layout)


def original_init(cls: type) -> Callable[..., None]:
    """SGLang's unpatched ``__init__`` (also while a copy arm is applied)."""
    return cls.__dict__.get(_ORIGINAL_ATTR, cls.__dict__["__init__"])


def rewrite_copy_source(source: str) -> str:
    """Return ``source`` with the torch copy lines replaced by the buffer copy; ConfigError if absent."""
    new, count = _COPY_RE.subn(lambda m: m["indent"] + BUFFER_LINE, source)
    if count != 1:
        raise ConfigError(sglang_version.unsupported(
            f"{MODULE}.{CLASS_NAME}.__init__ has the torch copy lines {count} times (expected once: "
            f"`dst = torch.frombuffer(shm.buf, ...)` / `dst.copy_(...)`), so the copy changed and neither copy "
            f"arm would measure what it names (the rewrite lives in {__name__})", sglang_version.installed()))
    return new


def check_torch_copy(original: Callable[..., None]) -> Callable[..., None]:
    """``original`` itself, once its source is shown to hold the torch copy lines; ConfigError otherwise."""
    rewrite_copy_source(textwrap.dedent(inspect.getsource(original)))
    return original


def buffer_copy_init(original: Callable[..., None]) -> Callable[..., None]:
    """Compile SGLang's ``__init__`` with only the copy line changed, in SGLang's module globals."""
    code = original.__code__
    if code.co_freevars or "nbytes" not in code.co_varnames:
        raise ConfigError(sglang_version.unsupported(
            f"{MODULE}.{CLASS_NAME}.__init__ has closures or no 'nbytes' local (the rewrite in {__name__} "
            "needs both as in 0.5.16..0.5.23)", sglang_version.installed()))
    source = rewrite_copy_source(textwrap.dedent(inspect.getsource(original)))
    namespace: dict[str, Any] = {}
    # Named by module and function, never by file: two builds at different paths (an A/B's reference kept copy and
    # the candidate) must give the profile's differential one function, not a "new" one on each side.
    filename = f"<perf buffer copy of {original.__module__}.{original.__qualname__}>"
    exec(compile(source, filename, "exec"), original.__globals__, namespace)
    fn = namespace["__init__"]
    fn.__qualname__ = original.__qualname__
    fn.__defaults__ = original.__defaults__
    return fn


def _counting(arm: str, init: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        COPY_CALLS[arm] += 1  # counted after success: a construction that raised copied nothing

    __init__.__qualname__ = init.__qualname__
    __init__.__wrapped__ = init  # type: ignore[attr-defined]
    return __init__


def apply_copy_arm(cls: type, arm: str) -> None:
    """Switch ``cls`` to the ``arm`` copy (``torch`` or ``buffer``) with a counting wrapper."""
    if arm not in ARMS:
        raise ConfigError(f"unknown copy arm {arm!r}: use one of {', '.join(ARMS)}")
    original = original_init(cls)
    # Both arms need SGLang's torch copy lines: "torch" is named after them and "buffer" replaces them.
    init = check_torch_copy(original) if arm == "torch" else buffer_copy_init(original)
    setattr(cls, _ORIGINAL_ATTR, original)
    setattr(cls, _ARM_ATTR, arm)
    cls.__init__ = _counting(arm, init)  # type: ignore[misc]


def active_arm(cls: type) -> str | None:
    """The applied arm, or None when ``cls`` is SGLang's unpatched class."""
    return cls.__dict__.get(_ARM_ATTR)


def restore(cls: type) -> None:
    """Put SGLang's original ``__init__`` back (no-op when unpatched)."""
    if _ORIGINAL_ATTR in cls.__dict__:
        cls.__init__ = cls.__dict__[_ORIGINAL_ATTR]  # type: ignore[misc]
        delattr(cls, _ORIGINAL_ATTR)
        delattr(cls, _ARM_ATTR)


@contextmanager
def copy_arm(cls: type, arm: str) -> Iterator[type]:
    """Apply ``arm`` for the block and restore SGLang's class afterwards, also on error."""
    apply_copy_arm(cls, arm)
    try:
        yield cls
    finally:
        restore(cls)
