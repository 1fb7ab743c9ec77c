"""Judging measured samples: the metric registry, the gate (tolerance AND significance, invariants), sample
summaries, change points over history, the gate's simulated quality, and ``perf_record``'s recorder."""
