"""Scenarios: what the tests declare (arms, workloads, invariants) and the loops that measure them until decided.

- ``invariants.Invariant`` / ``CounterBound``: a same-run relation between two measured arms ("buffer >= torch")
  or a count's bound on one arm.
- ``cpu_tier.CpuTierScenario``: the CPU tier's interleaved arm set with its control arm and invariants;
  ``cpu_tier.measure`` runs it.
- ``engine.EngineScenario``: one GPU-tier arm (an ``EngineSpec`` recipe plus its workload and key).
- ``runs``: ``SessionLoad``, ``measure_history`` and ``measure_ab`` (windows, blocks and engine pairs until the
  verdicts are decided); ``segment``: back-to-back windows cut from one load segment; ``timeline``: where an
  arm's wall time went.
- ``ab_study``, ``window_study``: the H200 studies behind the A/B and window-length defaults.
"""
