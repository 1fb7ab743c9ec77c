"""WorkloadSpec validation: every bad field gets an error that names it and the fix."""

from __future__ import annotations

import pytest

from engine_fixtures.errors import ConfigError
from engine_fixtures.loadgen import WorkloadSpec


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency=0: must be >= 1"),
        ({"concurrency": None}, "set exactly one"),
        ({"concurrency": 2, "request_rate": 5.0}, "set exactly one"),
        ({"concurrency": None, "request_rate": 0}, "request_rate=0: must be a number > 0"),
        ({"num_requests": 0}, "num_requests=0: must be >= 1"),
        ({"warmup_requests": -1}, "warmup_requests=-1: must be >= 0"),
        ({"output_tokens": 0}, "output_tokens=0: must be >= 1"),
        ({"image_resolution": (0, 10)}, "image_resolution=(0, 10)"),
        ({"image_content": "blank"}, "image_content='blank': must be one of noise, repeated"),
        ({"image_format": "gif"}, "image_format='gif': must be one of png, jpeg"),
        ({"request_timeout_s": 0}, "request_timeout_s=0"),
        ({"model": ""}, "model=''"),
        ({"concurrency": 20}, "concurrency=20: more than num_requests"),
        ({"min_achieved_fraction": 1.5}, "min_achieved_fraction=1.5: must be in (0, 1]"),
        ({"num_requests": 10, "image_resolution": (20000, 20000)}, "image_content='repeated'"),
    ],
)
def test_bad_fields_are_named(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"num_requests": 10, "concurrency": 2}
    base.update(kwargs)
    with pytest.raises(ConfigError) as info:
        WorkloadSpec(**base)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_valid_specs_and_describe() -> None:
    closed = WorkloadSpec(num_requests=10, concurrency=4, warmup_requests=2, image_resolution=[64, 32])
    assert closed.closed_loop
    assert closed.total_requests == 12
    assert closed.image_resolution == (64, 32)
    assert closed.describe().startswith("c=4 n=10 img=1x64x32/noise/png")
    opened = WorkloadSpec(num_requests=10, request_rate=2.5)
    assert not opened.closed_loop
    assert opened.describe().startswith("rate=2.5/s")
