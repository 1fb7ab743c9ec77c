"""Scenarios: what the tests declare, and the one runner that measures it until decided (no pytest).

- ``group``: the one declaration of the GPU tier, ``Group`` (``Arm``, ``Contrast``, ``CounterBound``): arms switched
  live on one launch, or launches of their own (the transport, the A/B of two builds); ``engine.EngineScenario``: one
  launch (an ``EngineSpec`` recipe plus its workload and storage key).
- ``blocks_run``: the one measuring loop (mirrored blocks; the unit a block on one engine, a fresh instance group
  across launches), the one verdict builder and the one stopping rule.
- ``runner.GroupRunner``: starts the engines, serves and proves every visit, profiles, and returns what it measured;
  ``results``: an arm's windows as a ``RunResult`` and the budget a group is measured in.
- ``load.SessionLoad``: the session's client and first light; ``segment``: back-to-back windows cut from one load
  segment; ``timeline``: where an arm's wall time went; ``figures``: the seed's figures as measured rows.
- ``cpu_tier.CpuTierScenario``: the CPU tier's interleaved arm set with its control arm and ``Contrast``s, judged per
  round; ``cpu_tier.measure`` runs it.
"""
