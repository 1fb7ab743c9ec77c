"""``--perf-promote``: a green run that judged the installed build keeps it as this runner's reference build.

The nightly's last step (an input of the GPU workflow, off by default): the build the nightly just judged green
becomes the one the next ``--perf-reference stored`` A/B judges a change against (``store.reference_build``), so the
A/B always compares a pull request, or tomorrow's build, with the last good one. Refused, with one line saying why,
where the run is not green, judged nothing, was an A/B or carried an injected slowdown: none of those says the
installed build is good.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

from engine_fixtures.errors import PerfError
from engine_fixtures.options import Settings
from engine_fixtures.store.reference_build import ReferenceStore


def installed_build() -> str:
    """The installed SGLang as a build the store can keep: the venv it is installed in (``venv:DIR``), else the
    directory it is imported from (``site:DIR``, an unpacked site on ``PYTHONPATH``)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise PerfError("--perf-promote: SGLang is not importable here, so there is no installed build to keep")
    site = Path(next(iter(spec.submodule_search_locations))).parent
    if sys.prefix != sys.base_prefix and site.is_relative_to(sys.prefix):
        return f"venv:{sys.prefix}"
    return f"site:{site}"


def refusal(settings: Settings, green: bool, judged: bool) -> str | None:
    """Why this run may not promote the installed build, or None."""
    if not green:
        return "the run is not green"
    if not judged:
        return "it judged nothing"
    if settings.reference is not None or not settings.candidate.is_default:
        return "it was an A/B of two builds (promote the candidate with `perf-baseline reference promote`)"
    if settings.inject is not None:
        return "it carried an injected slowdown"
    return None


def promote_installed(settings: Settings, machine_key: str, green: bool, judged: bool) -> str:
    """Keep the installed build if ``refusal`` allows: the line to print either way; PerfError if keeping fails."""
    why = refusal(settings, green, judged)
    if why is not None:
        return f"--perf-promote: the installed build was not promoted: {why}"
    build = installed_build()
    stored = ReferenceStore(Path(settings.baseline_dir), machine_key).promote(
        build, note=f"--perf-promote after a green run, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    return (f"--perf-promote: kept the installed build ({build}, SGLang {stored.sglang_version or 'version unknown'}) "
            "as this runner's reference build; the next --perf-reference stored A/B judges against it")
