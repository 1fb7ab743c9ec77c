"""Members of a group alive at once on one GPU: started so that they never race, with equal KV pools.

SGLang sizes its KV pool from two snapshots of free GPU memory (before and after loading the weights): a neighbour
that allocates between them makes the pool smaller, or leaves none ("Loaded weights leave no GPU memory for the KV
cache", H200 2026-12-01, two engines started at once). Even one after the other, two servers at the same
``--mem-fraction-static`` got pools of 5,393,189 and 3,660,660 tokens (0.68x): the second profiles what the first
left. So a group:

1. starts its members **one at a time**: the next one starts only when the previous one answers ready, past its
   memory profile and its CUDA-graph capture (``EngineFactory.get_many``);
2. gives every member the **same explicit KV size** (``--max-total-tokens``, ``kv_tokens``), which each member's
   profile must reach: the one memory rule (``member_fraction``) asks each member, when it starts, for an equal share
   of the GPU as a fraction of the memory free at that moment (NVML), so a later member is not squeezed;
3. **reads back** ``max_total_num_tokens`` and the effective running-request cap of every member from
   ``/server_info`` and refuses a group whose members differ (``check_equal_pools``): an A/B between unequal pools
   is biased before it starts.

A member that fails to start stops the members already started, and its error is its own (the factory's leak check
knows the live siblings, ``EngineFactory._others``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine_fixtures import nvml
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, MeasurementError

GPU_SHARE = 0.85  # of the GPU's memory, split evenly among the members (the rest: CUDA contexts, the client)
MAX_FRACTION = 0.9
KV_TOKENS = 32768  # C=16 of the 4B shape holds ~6k tokens (64 text + 256 image + 32 out each): room to spare
Memory = Callable[[int], "tuple[float, float] | None"]  # GPU index -> (total MiB, free MiB), None: unknown


def member_fraction(members: int, total_mib: float, free_mib: float) -> float:
    """``--mem-fraction-static`` for the next member of a group of ``members``: an equal share of the GPU
    (``GPU_SHARE`` of it) as a fraction of what is free now."""
    share = GPU_SHARE * total_mib / members
    if share > MAX_FRACTION * free_mib:
        raise ConfigError(f"a group of {members} engines wants {share:.0f} MiB each on a GPU with {free_mib:.0f} "
                          f"of {total_mib:.0f} MiB free: stop what holds the GPU, or measure fewer members at once")
    return round(share / free_mib, 3)


def group_specs(specs: Sequence[EngineSpec], kv_tokens: int | None = KV_TOKENS) -> list[EngineSpec]:
    """The members' specs with the group's explicit KV size (their memory fraction is set when each starts)."""
    if len({s.launch_key for s in specs}) != len(specs):
        raise ConfigError("a group needs distinct launches (give each member its own name)")
    return [s.with_(kv_tokens=kv_tokens) for s in specs]


def start_group(factory: EngineFactory, specs: Sequence[EngineSpec], *, kv_tokens: int | None = KV_TOKENS,
                memory: Memory = nvml.memory_mib) -> tuple[EngineHandle, ...]:
    """Ready engines for ``specs``, started one at a time with one KV size, their pools read back and compared.
    Where NVML cannot read the GPU (no GPU: the self-tests' stub engines) each spec keeps its own fraction."""
    n = len(specs)

    def fitted(spec: EngineSpec) -> EngineSpec:
        mem = memory(spec.gpus[0]) if spec.gpus else None
        return spec if mem is None else spec.with_(mem_fraction_static=member_fraction(n, *mem))

    engines = factory.get_many(group_specs(specs, kv_tokens), before_start=fitted)
    try:
        check_equal_pools(engines)
    except BaseException:
        for e in engines:
            factory.release(e.spec)
        raise
    return engines


def check_equal_pools(engines: Sequence[EngineHandle]) -> None:
    """``MeasurementError`` unless every member reports the same KV pool and running-request cap."""
    rows = {e.instance: (e.config.max_total_num_tokens, e.config.max_running_requests) for e in engines}
    silent = [name for name, (kv, _) in rows.items() if kv is None]
    if silent:
        raise MeasurementError(f"{', '.join(silent)} did not report max_total_num_tokens in /server_info, so the "
                               "group cannot show that its members got equal KV pools; this SGLang's layout is "
                               "unknown to the suite (engine.server_info)")
    if len(set(rows.values())) > 1:
        shown = "; ".join(f"{name}: {kv} KV tokens, {cap} running requests" for name, (kv, cap) in rows.items())
        raise MeasurementError(f"the group's members got different pools ({shown}): a comparison between them would "
                               "be biased. Lower the group's KV size (kv_tokens) so every member's memory profile "
                               "reaches it, or free the GPU of other processes")
