"""The scheduler's running requests over a load segment, from its own count of every batch it ran.

The SGLang plugin counts, in each scheduler process, every decode (or mixed) batch by its number of requests:
``running_batch.<n>`` += 1 (``sglang_plugin.instrument.install_running_probe``, on ``Scheduler.run_batch``). The
counters are additive, so the growth of each between two proofs of one engine (``ArmProof``, taken around a segment)
is that process's histogram of batch sizes over the segment (``batch_histograms``). ``running_requests(before,
after)`` reads it:

- ``max``: the largest batch one scheduler process ran, the max over processes and never a sum: the TP ranks of a
  stage run the same batch, and with pipeline parallelism every stage runs the same micro-batches, each of which is
  what the PP micro-batch cap limits (a sum would count one batch once per rank);
- ``mean``: the mean batch size, ``sum(n * count) / sum(count)`` over the histograms pooled across processes (every
  rank ran the same batches, so pooling weights each batch alike): the running requests per decode step.

Data-parallel ranks (which ``EngineSpec`` never launches) would each report their own batches; the max is then one
rank's. ``None`` when no scheduler process counted a batch between the proofs (``probe_states`` says what each
scheduler's probe reported).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_fixtures.engine.proof import ArmProof
from engine_fixtures.sglang_plugin.instrument import RUNNING_BATCH, RUNNING_PROBE


@dataclass(frozen=True)
class RunningRequests:
    """The batches the schedulers ran between two proofs: the largest, the mean size, how many, in how many
    processes."""

    max: float
    mean: float
    batches: float
    processes: int


def batch_histograms(before: ArmProof, after: ArmProof) -> dict[int, dict[int, float]]:
    """Per scheduler pid, the batches it ran between the proofs by size (``{n: count}``, sizes that grew only)."""
    out: dict[int, dict[int, float]] = {}
    for p in after.processes:
        then = before.process(p.pid)
        hist = {}
        for name, count in p.counters.items():
            if not name.startswith(RUNNING_BATCH):
                continue
            grew = float(count) - (then.count(name) if then is not None else 0.0)
            if grew > 0:
                hist[int(name.removeprefix(RUNNING_BATCH))] = grew
        if hist:
            out[p.pid] = hist
    return out


def summarize(histograms: dict[int, dict[int, float]]) -> RunningRequests | None:
    """The max over processes and the pooled mean of per-process batch-size histograms (module docstring)."""
    if not histograms:
        return None
    batches = sum(c for hist in histograms.values() for c in hist.values())
    total = sum(n * c for hist in histograms.values() for n, c in hist.items())
    largest = max(n for hist in histograms.values() for n in hist)
    return RunningRequests(float(largest), total / batches, batches, len(histograms))


def running_requests(before: ArmProof, after: ArmProof) -> RunningRequests | None:
    """The running requests from the batches counted between two proofs of one engine (module docstring)."""
    return summarize(batch_histograms(before, after))


def probe_states(proof: ArmProof) -> list[str]:
    """What each scheduler process's running-batch probe reported (for the message when none counted a batch)."""
    out = []
    for p in proof.by_role("scheduler"):
        state = p.installed.get(RUNNING_PROBE, "not reported (a plugin without the probe)")
        errors = [e for e in p.errors if e.startswith("running:")]
        out.append(f"{p.who}: {state}" + (f" ({'; '.join(errors)})" if errors else ""))
    return out
