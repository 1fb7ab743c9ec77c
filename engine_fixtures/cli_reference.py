"""``perf-baseline reference promote|show``: the stored reference build a runner keeps beside its pools
(``store.reference_build``), which ``--perf-reference stored`` runs the A/B of two builds against.

- ``reference promote BUILD [--reason TEXT]``: keep a copy of ``BUILD`` (``venv:DIR``, ``site:DIR``,
  ``wheel:FILE.whl``, with any ``patch:``/``env:`` parts) as this machine key's reference; the previous one is
  replaced only once the copy is complete. Promote a build after its nightly passed: the next nightly judges the new
  build against it, both alive together.
- ``reference show``: the stored build, when and from what it was promoted, its SGLang version.

``--machine KEY`` names another machine key's directory (default: this machine's). Exit 2 with the fix on a bad
build, an unreadable manifest or none stored.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from engine_fixtures import options
from engine_fixtures.machine import MachineInfo
from engine_fixtures.store.reference_build import ReferenceStore


def _store(args: argparse.Namespace) -> ReferenceStore:
    root = options.resolve("baseline_dir", cli=getattr(args, "baseline_dir", None)).value
    return ReferenceStore(root, args.machine or MachineInfo.collect().key)  # type: ignore[arg-type]


def _show(store: ReferenceStore) -> None:
    stored = store.load()
    print(f"reference build of {store.dir.parent.name}: {stored.source}")
    print(f"  promoted {stored.promoted_at}" + (f" ({stored.note})" if stored.note else ""))
    print(f"  SGLang {stored.sglang_version or 'version unknown'}; runs as --perf-reference stored ({stored.spec})")


def cmd_reference(args: argparse.Namespace) -> int:
    store = _store(args)
    if args.action == "promote":
        if not args.build:
            print("perf-baseline reference promote needs BUILD (venv:DIR, site:DIR or wheel:FILE.whl)")
            return 2
        store.promote(args.build, args.reason or "")
        print(f"promoted {args.build} to be the reference build, kept in {store.dir}")
    _show(store)
    return 0


def add_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    sp = add("reference", cmd_reference, "promote or show the stored reference build the A/B runs against "
             "(--perf-reference stored)")
    sp.add_argument("action", choices=("promote", "show"))
    sp.add_argument("build", nargs="?", metavar="BUILD", help="promote: venv:DIR, site:DIR or wheel:FILE.whl")
    sp.add_argument("--reason", metavar="TEXT", help="promote: why (kept in the manifest)")
    sp.add_argument("--machine", metavar="KEY", help="another machine key's directory (default: this machine's)")
