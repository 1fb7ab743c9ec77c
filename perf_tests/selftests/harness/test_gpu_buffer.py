"""NVML's sample buffers (``sampling.gpu_buffer``) against the fake NVML: each driver period read once whatever the
tick rate, cut by its own timestamp, per role from the per-process samples, and a field NVML does not give says so
and gives no number (never a zero)."""

from __future__ import annotations

import time

import pytest

from engine_fixtures.sampling.gpu_buffer import UtilBuffer
from perf_tests.support.fake_nvml import FakeNvml, fake_nvml

PERIOD_S = 1 / 6  # the driver's utilisation period on the data-centre parts


def mono(wall: float) -> float:
    """A wall-clock time on ``time.monotonic()``'s scale, as the buffer converts the driver's timestamps."""
    return wall - (time.time() - time.monotonic())


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    f = FakeNvml(switch_after=10**9)
    fake_nvml(monkeypatch, f)
    return f


def test_each_period_is_read_once_and_cut_by_its_own_timestamp(fake: FakeNvml) -> None:
    now = time.time()
    # GPU 0: 20 % busy for six periods, then 80 %; GPU 1: 60 % throughout; one period from before the buffer existed
    fake.util_samples = {0: [(now - 5.0, 99.0)] + [(now + (k + 1) * PERIOD_S, 20.0 if k < 6 else 80.0)
                                                   for k in range(12)],
                         1: [(now + (k + 1) * PERIOD_S, 60.0) for k in range(12)]}
    buf = UtilBuffer([0, 1], [0, 1])
    for _ in range(5):  # ticks faster than the periods read nothing twice
        buf.drain()
    first = buf.cut(mono(now), mono(now + 6.5 * PERIOD_S))
    assert first["gpu.util_buffer.periods"] == 12  # six periods of each GPU; the one from before is not read
    assert first["gpu.util_buffer.mean"] == pytest.approx((20.0 + 60.0) / 2)
    second = buf.cut(mono(now + 6.5 * PERIOD_S), mono(now + 13 * PERIOD_S))
    assert second["gpu.util_buffer.mean"] == pytest.approx((80.0 + 60.0) / 2)
    assert buf.cut(mono(now + 20.0), mono(now + 21.0)) == {}  # no period inside: no number, not 0 %


def test_a_role_sums_its_processes_mean_sm_share(fake: FakeNvml) -> None:
    now = time.time()
    fake.proc_samples = {0: [(now + (k + 1) * PERIOD_S, pid, util) for k in range(6)
                             for pid, util in ((101, 30.0), (102, 10.0), (999, 50.0))]}
    buf = UtilBuffer([0], [0])
    buf.drain()
    buf.drain()
    out = buf.cut(mono(now), mono(now + 2.0), {"scheduler": (101, 102), "tokenizer": (103,)})
    assert out["gpu.sm_util.scheduler"] == pytest.approx(40.0)  # 30 + 10; the stranger's 50 is nobody's
    assert "gpu.sm_util.tokenizer" not in out  # a role NVML does not list has no number


@pytest.mark.parametrize("mode", ["unsupported", "double"])
def test_what_nvml_does_not_give_is_said_once_and_never_a_zero(fake: FakeNvml, mode: str) -> None:
    now = time.time()
    fake.buffer = mode
    fake.util_samples = {0: [(now + (k + 1) * PERIOD_S, 50.0) for k in range(6)]}
    buf = UtilBuffer([0], [0])
    buf.drain()
    buf.drain()
    out = buf.cut(mono(now), mono(now + 2.0), {"scheduler": (101,)})
    if mode == "unsupported":
        assert out == {}
        assert "NVML_ERROR_NOT_SUPPORTED" in buf.unreported["utilisation samples"]
        assert "no gpu.sm_util numbers" in buf.unreported["per-process utilisation"]
        assert fake.buffer_calls == 1  # not read again once NVML said it does not give them
    else:
        assert out["gpu.util_buffer.mean"] == pytest.approx(50.0)  # a double is read as what it is


def test_the_gpu_sampler_cuts_the_buffers_beside_its_poll(fake: FakeNvml) -> None:
    """Through ``GpuSampler``: the buffer's numbers join the window's cut and summary beside the 10 Hz poll's, under
    the names the segment gives them: ``gpu_util_buffer_mean`` is the GPU-busy metric that gates (issue 46), the
    period count and the per-role SM shares are diagnostics."""
    from engine_fixtures.judge.metrics import metric
    from engine_fixtures.sampling.gpu import GpuSampler
    from perf_tests.selftests.harness.children import hold

    now = time.time()
    fake.util_samples = {0: [(now + k * 0.01, 70.0) for k in range(1, 400)],
                         1: [(now + k * 0.01, 30.0) for k in range(1, 400)]}
    fake.proc_samples = {0: [(now + k * 0.01, 4242, 55.0) for k in range(1, 400)]}
    gpu = GpuSampler([0, 1], pids_fn=lambda: {"scheduler": [4242]}, interval_s=0.01)
    with gpu:
        hold(gpu, 5)
    cut = gpu.cut(gpu.util.times[0], gpu.util.times[-1] + 1.0)
    assert cut["gpu.util.mean"] == pytest.approx(40.0)  # the poll's fake reading
    assert cut["gpu.util_buffer.mean"] == pytest.approx(50.0)  # (70 + 30) / 2 from the buffers
    assert cut["gpu.sm_util.scheduler"] == pytest.approx(55.0)
    assert gpu.summary()["gpu.util_buffer.mean"] == pytest.approx(50.0)
    assert metric("gpu_util_buffer_mean").judged
    assert metric("gpu_util_buffer_mean").gates
    for name in ("gpu_util_buffer_periods", "gpu_sm_util.scheduler"):
        assert not metric(name).judged, name
