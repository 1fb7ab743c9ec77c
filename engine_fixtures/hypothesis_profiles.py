"""The one place Hypothesis profiles are registered.

``dev``: randomised, more examples, the local example database (finds new bugs on desks).
``ci``: derandomised and deadline-free, so CI is reproducible on a noisy 2-core box.
Selected by ``HYPOTHESIS_PROFILE``; ``CI=true`` picks ``ci`` when the variable is unset.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = ("dev", "ci")


def register() -> None:
    settings.register_profile(
        "dev",
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "ci",
        max_examples=25,
        derandomize=True,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def load_from_env() -> str:
    register()
    name = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    if name not in PROFILES:
        raise ValueError(
            f"HYPOTHESIS_PROFILE={name!r} is not a profile of this suite; use one of {PROFILES}"
        )
    settings.load_profile(name)
    return name
