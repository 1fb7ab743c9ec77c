"""The stored reference build: promoted from a venv, a site directory or a wheel into a copy beside the pools,
resolved for ``--perf-reference stored`` before anything starts, and every way it can be missing or broken named with
its fix; a failed promotion keeps the previous reference."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from engine_fixtures.engine.build import parse_reference
from engine_fixtures.errors import BaselineError, ConfigError
from engine_fixtures.options import Settings
from engine_fixtures.session.preflight import resolve_builds
from engine_fixtures.store.reference_build import MANIFEST, ReferenceStore

KEY = "h200-key"


def site(tmp_path: Path, version: str) -> Path:
    """An unpacked SGLang: a package and its dist-info, enough for importlib.metadata to name its version."""
    d = tmp_path / f"site-{version}"
    (d / "sglang").mkdir(parents=True, exist_ok=True)
    (d / "sglang" / "__init__.py").write_text("")
    info = d / f"sglang-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return d


def test_a_site_dir_is_kept_as_a_copy_and_runs_as_the_stored_reference(tmp_path: Path) -> None:
    src = site(tmp_path, "0.5.16")
    store = ReferenceStore(tmp_path / "bl", KEY)
    stored = store.promote(f"site:{src}+env:SGLANG_X=1", note="nightly passed")
    assert stored.sglang_version == "0.5.16"
    build = store.build()
    (kept,) = build.pythonpath
    assert Path(kept).is_relative_to(store.dir)
    assert (Path(kept) / "sglang" / "__init__.py").exists()
    assert dict(build.env) == {"SGLANG_X": "1"}
    assert build.label.startswith(f"stored:site:{src}+env:SGLANG_X=1 (promoted ")
    (src / "sglang" / "__init__.py").unlink()  # the source changes: the kept copy does not
    assert (Path(kept) / "sglang" / "__init__.py").exists()
    newer = site(tmp_path, "0.5.17")
    store.promote(f"site:{newer}")
    assert store.load().sglang_version == "0.5.17"
    assert [p.name for p in store.dir.parent.iterdir()] == ["reference-build"]  # no staging or old copy left


def test_a_wheel_and_a_venv_can_be_kept(tmp_path: Path) -> None:
    whl = tmp_path / "sglang-0.5.16-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("sglang/__init__.py", "")
        z.writestr("sglang-0.5.16.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.16\n")
    store = ReferenceStore(tmp_path / "bl", KEY)
    assert store.promote(f"wheel:{whl}").sglang_version == "0.5.16"
    assert Path(store.build().wheel).parent == store.dir  # type: ignore[arg-type]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    store.promote(f"venv:{venv}")
    assert Path(store.build().python).parent.parent.parent == store.dir  # type: ignore[arg-type]


def test_what_cannot_be_kept_is_refused_naming_what_can_and_the_old_reference_stays(tmp_path: Path) -> None:
    store = ReferenceStore(tmp_path / "bl", KEY)
    store.promote(f"site:{site(tmp_path, '0.5.16')}")
    for text in (f"python:{sys.executable}", "installed", "patch:slow-decode=1"):
        with pytest.raises((BaselineError, ConfigError), match=r"venv:DIR|names nothing|no files"):
            store.promote(text)
    with pytest.raises(ConfigError, match="is not a directory"):
        store.promote(f"site:{tmp_path / 'gone'}")
    assert store.load().sglang_version == "0.5.16"


def test_a_missing_or_broken_reference_names_the_promote_command(tmp_path: Path) -> None:
    store = ReferenceStore(tmp_path / "bl", KEY)
    with pytest.raises(BaselineError, match=r"no reference build is stored .* perf-baseline reference promote"):
        store.build()
    store.promote(f"site:{site(tmp_path, '0.5.16')}")
    (store.dir / MANIFEST).write_text("{truncated")
    with pytest.raises(BaselineError, match=r"manifest .* is unreadable .*promote the build again"):
        store.build()
    store.promote(f"site:{site(tmp_path, '0.5.16')}")
    manifest = json.loads((store.dir / MANIFEST).read_text())
    for p in store.dir.glob("site-*"):
        p.rename(tmp_path / "moved")  # the kept files are gone
    with pytest.raises(BaselineError, match=r"is incomplete .*is not a directory.*promote the build again"):
        store.build()
    assert manifest["source"].startswith("site:")


def test_perf_reference_stored_is_resolved_before_anything_starts(tmp_path: Path) -> None:
    settings = Settings(baseline_dir=tmp_path / "bl", reference=parse_reference("stored"),
                        sources={"reference": "command line --perf-reference"})
    with pytest.raises(ConfigError, match=r"Invalid --perf-reference 'stored' from command line .*no reference "
                                          r"build is stored.*Nothing was started"):
        resolve_builds(settings, KEY)
    with pytest.raises(ConfigError, match="never resolved"):
        settings.reference.import_paths(tmp_path)  # type: ignore[union-attr]
    ReferenceStore(tmp_path / "bl", KEY).promote(f"site:{site(tmp_path, '0.5.16')}")
    resolved = resolve_builds(settings, KEY)
    assert resolved.reference is not None
    assert not resolved.reference.stored
    assert resolved.reference.label.startswith("stored:site:")
    assert resolve_builds(Settings(), KEY) == Settings()  # nothing stored asked: nothing read


def test_stored_if_kept_runs_the_kept_build_and_without_one_says_how_to_keep_one(tmp_path: Path) -> None:
    from engine_fixtures.session.preflight import kept_reference_absent

    settings = Settings(baseline_dir=tmp_path / "bl", reference=parse_reference("stored-if-kept"),
                        sources={"reference": "command line --perf-reference"})
    why = kept_reference_absent(settings, KEY)
    assert why is not None
    assert "keeps no reference build" in why
    assert "perf-baseline reference promote" in why
    assert kept_reference_absent(Settings(), KEY) is None  # no A/B asked
    ReferenceStore(tmp_path / "bl", KEY).promote(f"site:{site(tmp_path, '0.5.16')}")
    assert kept_reference_absent(settings, KEY) is None
    resolved = resolve_builds(settings, KEY)
    assert resolved.reference is not None
    assert resolved.reference.label.startswith("stored:site:")


def test_promote_keeps_the_installed_build_after_a_green_run_only(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    from engine_fixtures.session.promote import installed_build, promote_installed

    kept = site(tmp_path, "0.5.16")
    monkeypatch.setattr(sys, "path", [str(kept), *sys.path])
    monkeypatch.delitem(sys.modules, "sglang", raising=False)
    importlib.invalidate_caches()
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)  # not a venv: the directory it is imported from
    assert installed_build() == f"site:{kept}"
    settings = Settings(baseline_dir=tmp_path / "bl", promote=True)
    assert promote_installed(settings, KEY, green=False, judged=True).endswith("not promoted: the run is not green")
    assert promote_installed(settings, KEY, green=True, judged=False).endswith("it judged nothing")
    ab = Settings(baseline_dir=tmp_path / "bl", reference=parse_reference("installed"))
    assert "an A/B of two builds" in promote_installed(ab, KEY, green=True, judged=True)
    assert not ReferenceStore(tmp_path / "bl", KEY).kept()
    line = promote_installed(settings, KEY, green=True, judged=True)
    assert line.startswith(f"--perf-promote: kept the installed build (site:{kept}, SGLang 0.5.16)"), line
    assert ReferenceStore(tmp_path / "bl", KEY).load().sglang_version == "0.5.16"
