"""Scenarios: what the tests declare (arms, workloads, invariants) and the loops that measure them until decided.

- ``invariants.Invariant`` / ``CounterBound``: a same-run relation between two measured arms ("buffer >= torch")
  or a count's bound on one arm.
- ``cpu_tier.CpuTierScenario``: the CPU tier's interleaved arm set with its control arm and invariants;
  ``cpu_tier.measure`` runs it.
- ``engine.EngineScenario``: one GPU-tier launch (an ``EngineSpec`` recipe plus its workload and key).
- ``live.LiveGroup`` (``Arm``, ``Contrast``): one engine, its arms switched live; ``live_runs`` measures it.
- ``groups.EngineGroup`` (``Member``): launches that cannot switch live (transports, builds: the A/B), alive at once;
  ``groups.measure_group`` measures fresh instance groups of them.
- ``load.SessionLoad``: the session's client, window plan and first light; ``segment``: back-to-back windows cut
  from one load segment; ``timeline``: where an arm's wall time went.
- ``pooled``: ``measure_history`` (windows until the verdicts against this host's pool are decided) and
  ``engine_result`` (an engine's windows as a ``RunResult``, for every GPU runner).

The H200 studies behind the A/B and window-length defaults (``ab_study``, ``window_study``, ``rate_study``,
``block_sd``) are not product code: they live in ``perf_tests/sglang/gpu_studies`` (``python -m
perf_tests.sglang.gpu_studies.rate_study`` from the repository root).
"""
