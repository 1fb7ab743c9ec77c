"""Streaming multimodal OpenAI-compatible load generator, run in its own process.

``run_load(url, WorkloadSpec(...)) -> LoadReport``; any failed request raises ``LoadError``.
"""

from __future__ import annotations

from engine_fixtures.loadgen.latency import Percentiles
from engine_fixtures.loadgen.load_report import LoadReport
from engine_fixtures.loadgen.records import LoadError, RequestError, RequestRecord
from engine_fixtures.loadgen.runner import run_load
from engine_fixtures.loadgen.workload import WorkloadSpec

__all__ = ["LoadError", "LoadReport", "Percentiles", "RequestError", "RequestRecord", "WorkloadSpec", "run_load"]
