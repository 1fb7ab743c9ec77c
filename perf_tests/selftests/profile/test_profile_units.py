"""The parser on a recorded real py-spy output, the differential's arithmetic, options, the stored profile."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from engine_fixtures.errors import BaselineError
from engine_fixtures.options import settings_from_values
from engine_fixtures.profile import store
from engine_fixtures.profile.diff import role_diff
from engine_fixtures.profile.engine import ProfileSettings, history_differential
from engine_fixtures.profile.model import Frame, Profile, RoleProfiles
from engine_fixtures.profile.record import parse_collapsed

DATA = Path(__file__).parent / "data"


def test_parses_a_recorded_py_spy_raw_file() -> None:
    """``data/work_tree_scheduler.raw``: py-spy 0.4.3 over the work tree's scheduler (4 ms spin per request)."""
    stacks = parse_collapsed((DATA / "work_tree_scheduler.raw").read_text())
    assert stacks
    assert all(n > 0 for n in stacks.values())
    assert all(f.line > 0 and f.file for s in stacks for f in s)
    p = Profile("scheduler", 100.0, 100, 2.0, MappingProxyType(stacks))
    funcs = p.functions()
    spin = next(c for k, c in funcs.items() if k[0] == "spin")
    batch = next(c for k, c in funcs.items() if k[0] == "schedule_batch")
    assert spin.frame.file.endswith("engine_fixtures/inject.py")
    assert spin.self_samples > 0
    assert batch.total_samples >= spin.total_samples + batch.self_samples  # a caller's total holds its callees'
    top = max(funcs.values(), key=lambda c: c.total_samples)
    # the root frame is on nearly every stack (--nonblocking tears a few, which start lower)
    assert 0.95 * p.samples <= top.total_samples <= p.samples


def test_pseudo_frames_and_odd_lines() -> None:
    text = ('process 12:"python x.py";thread (0x7f);main (/a/x.py:3);f (/a/x.py:9) 5\n'
            "main (/a/x.py:3);f (/a/x.py:10) 2\nnot a line\n\n")
    stacks = parse_collapsed(text)
    assert stacks == {(Frame("main", "/a/x.py", 3), Frame("f", "/a/x.py", 9)): 5,
                      (Frame("main", "/a/x.py", 3), Frame("f", "/a/x.py", 10)): 2}
    p = Profile("r", 10.0, 1, 1.0, MappingProxyType(stacks))
    f = p.functions()[("f", "/a/x.py")]
    assert (f.self_samples, f.total_samples, f.frame.line) == (7, 7, 9)  # the hottest line names the function


def _p(stacks: dict, requests: int, rate: float = 100.0) -> Profile:
    return Profile("role", rate, requests, 1.0, MappingProxyType(stacks))


def test_differential_is_per_request_and_ranks_by_self_growth() -> None:
    m, a, b = Frame("main", "m.py", 1), Frame("a", "m.py", 5), Frame("b", "m.py", 9)
    ref = _p({(m, a): 100, (m, b): 100}, requests=10)  # a: 0.1 s/req, b: 0.1 s/req
    cand = _p({(m, a): 200, (m, b): 600}, requests=20)  # a: 0.1 s/req, b: 0.3 s/req over twice the requests
    d = role_diff(cand, ref)
    assert d.change_s == pytest.approx(0.2)
    top = d.functions[0]
    assert top.frame.function == "b"
    assert top.change_s == pytest.approx(0.2)
    assert top.share == pytest.approx(1.0)
    assert top.caller == m
    assert top.significant
    assert d.growers(5) == [top]  # a did not grow per request


def test_profile_option_defaults_follow_strict_mode() -> None:
    strict = settings_from_values({"strict": "yes"}, {}, env={})
    desk = settings_from_values({}, {}, env={})
    assert ProfileSettings.from_settings(strict).mode == "on-regression"
    assert ProfileSettings.from_settings(desk).mode == "off"
    chosen = settings_from_values({"profile": "always", "profile_rate": "250"}, {}, env={})
    assert ProfileSettings.from_settings(chosen).mode == "always"
    assert chosen.profile_rate == 250.0
    with pytest.raises(Exception, match="--perf-profile 'sometimes'"):
        settings_from_values({"profile": "sometimes"}, {}, env={})


def test_wanted_by_verdict() -> None:
    on = ProfileSettings("on-regression", strict=False)
    assert on.wanted({"pass", "regression"})
    assert not on.wanted({"pass", "inconclusive"})
    assert ProfileSettings("on-regression", strict=True).wanted({"inconclusive"})
    assert not ProfileSettings("off").wanted({"regression"})
    assert ProfileSettings("always").wanted({"pass"})


def test_stored_profile_beside_the_pool(tmp_path: Path) -> None:
    pool = tmp_path / "key" / "mech%2Fcopy=buffer.json"
    m = Frame("main", "m.py", 1)
    prof = RoleProfiles("clean", MappingProxyType({"role": _p({(m,): 50}, 10)}))
    assert history_differential(prof, pool)[0] == []
    assert "no profile is stored" in history_differential(prof, pool)[1]
    path = store.save_beside(pool, prof)
    assert path.name == "mech%2Fcopy=buffer.json.profile"
    assert not path.name.endswith(".json")
    assert store.load_beside(pool) == prof
    diffs, note = history_differential(RoleProfiles("now", MappingProxyType({"role": _p({(m,): 100}, 10)})), pool)
    assert note == ""
    assert diffs[0].change_s == pytest.approx(0.05)
    path.write_text("{not json")
    with pytest.raises(BaselineError, match="delete it"):
        store.load_beside(pool)


def test_a_function_is_keyed_by_its_module_path_inside_its_build() -> None:
    from engine_fixtures.profile.model import Frame, module_path

    venv = "/opt/ref/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py"
    site = "/tmp/perf-baselines/reference-build/site/sglang/srt/managers/scheduler.py"
    assert module_path(venv) == "sglang/srt/managers/scheduler.py"
    assert module_path(site, ("/tmp/perf-baselines/reference-build/site",)) == "sglang/srt/managers/scheduler.py"
    assert module_path("/usr/lib/python3.12/asyncio/base_events.py") == "asyncio/base_events.py"
    assert module_path("/home/me/suite/engine_fixtures/inject.py") == "engine_fixtures/inject.py"
    assert module_path("/srv/x/run.py") == "/srv/x/run.py"  # under no root or marker: kept whole
    a = Frame("event_loop_overlap", venv, 10)
    b = Frame("event_loop_overlap", site, 12).in_build(("/tmp/perf-baselines/reference-build/site",))
    assert a.key == b.key == ("event_loop_overlap", "sglang/srt/managers/scheduler.py")
    assert Frame("f", site, 1).key != b.key  # without its root a kept site dir has no marker: the recorder finds it


def test_a_growth_in_a_wait_on_the_gpu_says_the_slowdown_is_gpu_side() -> None:
    from engine_fixtures.profile.diff import gpu_side

    loop = Frame("event_loop_overlap", "/x/site-packages/sglang/srt/managers/scheduler.py", 1)
    sync = Frame("synchronize", "/x/site-packages/torch/cuda/streams.py", 2)
    other = Frame("tensor_hash", "/x/site-packages/sglang/srt/utils.py", 3)
    ref = _p({(loop, sync): 400, (loop, other): 300}, requests=100)
    slower = _p({(loop, sync): 700, (loop, other): 300}, requests=100)
    line = gpu_side([role_diff(slower, ref)])
    assert line.startswith("role: the largest growth is synchronize (torch/cuda/streams.py:2")
    assert "GPU-side" in line
    assert gpu_side([role_diff(_p({(loop, sync): 400, (loop, other): 700}, requests=100), ref)]) == ""
