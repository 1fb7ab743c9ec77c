"""Scenarios: what the tests declare (arms, workloads, invariants); the library measures and judges them.

- ``invariants.Invariant``: a same-run relation between two measured arms ("buffer >= 1.05 x torch").
- ``registry.ScenarioResults``: this session's measured results by arm id (cross-arm invariants read them, in
  any test order), kept in ``config.stash``.
- ``mechanism.CpuTierScenario``: the CPU tier's interleaved arm set with its control arm and invariants.
- ``engine.EngineScenario``: one GPU-tier arm (an ``EngineSpec`` recipe plus its workload); ``window`` turns
  one load window into metrics; ``history``/``ab`` measure until the verdicts are decided.
"""
