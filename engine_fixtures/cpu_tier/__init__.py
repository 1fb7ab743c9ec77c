"""Engine-free reproduction of SGLang's SHM copy-path regression (torch ``copy_`` vs buffer copy under a quota).

- ``arms.CpuTierArm``: copy x producer threads x quota x resolution x concurrency (+ OMP wait policy).
- ``driver.run_arms(arms, repeats, warmup=1, requests=12) -> list[RunResult]``: interleaved windows.
- ``rig.Rig``: one arm's producer (inside its ``CpuQuota``) and consumer processes.
- ``producer`` / ``consumer``: the tokenizer-manager-like and scheduler-like processes.
- ``copyloop.CopyLoop``: a child inside a quota that serves one round of an arm's copies at a time (microbenchmarks).
- ``python -m engine_fixtures.cpu_tier.grid``: the threads x quota x concurrency grid as a table.
"""
