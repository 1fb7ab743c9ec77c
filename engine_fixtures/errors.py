"""Exceptions for expected, user-fixable problems.

Every message names what went wrong *and* the fix (asv's ``UserError`` style). Tracebacks of these
are noise to the user, so the pytest plugin shows them as one-line failures.
"""

from __future__ import annotations


class PerfError(Exception):
    """Base class: an expected problem whose message tells the user what to do."""


class ConfigError(PerfError):
    """A bad option, ini key, env variable or marker value; the message says where it came from."""


class QuotaError(ConfigError, ValueError):
    """A CPU quota that is not None and not > 0 cores (``quota.checked_cores``, the one check)."""


class QuotaNotPermitted(PerfError):
    """No writable cgroup CPU controller (v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``)."""


class ProcessStartError(PerfError):
    """A supervised process exited or timed out before it became ready."""


class ProcessCrashed(PerfError):
    """A supervised process died while it was being measured."""


class ProcessStopError(PerfError):
    """A supervised process ignored SIGTERM and had to be SIGKILLed: it did not shut down cleanly."""


class MachineBusy(PerfError):
    """Another perf run holds this machine's lock past the timeout (two measuring runs corrupt each other)."""


class LeakError(PerfError):
    """A process, /dev/shm segment or cgroup outlived the thing that created it."""


class BaselineError(PerfError):
    """A baseline file is missing, corrupted, or in a format this version cannot read."""


class MeasurementError(PerfError):
    """A measurement is invalid (for example zero completed requests); never reported as a number."""


class NotApplicable(PerfError):
    """A declared arm this run cannot serve as declared (a quota arm under ``--perf-cpu-quota none``): its test
    skips with the reason, never runs it without what it is reported under."""


class PerformanceRegression(AssertionError):
    """A judged metric got significantly worse than its baseline or reference (a test failure, not a usage error)."""


class InvariantViolated(PerformanceRegression):
    """A same-run invariant between arms does not hold (e.g. the buffer copy no longer beats torch's)."""


class Inconclusive(AssertionError):
    """The measurement budget ran out before the data could decide: not a pass (strict mode fails on it)."""


class StaleBaseline(AssertionError):
    """A significant improvement: the stored baseline no longer describes this build (strict mode fails on it)."""
