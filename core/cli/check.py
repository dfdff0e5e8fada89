"""``memlens check`` and ``memlens salvage``: find damage in a store, copy what is readable out of it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memlens.cli.output import progress_stream
from memlens.files import expand_user

PROG = "memlens"


def register(sub: Any) -> None:
    s = sub.add_parser("check", help="check a store for damage (read-only); exit 1 if anything is wrong")
    s.add_argument("--store", metavar="PATH", default=argparse.SUPPRESS, help="store file")
    s.add_argument("--json", action="store_true", help="print the findings as JSON")
    s = sub.add_parser("salvage", help="copy what is readable from a damaged store into a NEW store")
    s.add_argument("--store", metavar="PATH", default=argparse.SUPPRESS, help="the damaged store (only read)")
    s.add_argument("new", metavar="NEW.db", help="the store to create (must not exist)")
    s.add_argument("--json", action="store_true", help="print the report as JSON")


def _store(args: argparse.Namespace) -> Path:
    """The SQLite file to check or salvage; a ``postgresql://`` store is refused in one line."""
    from memlens.config import load_settings
    from memlens.errors import StoreError
    from memlens.store.postgres.connect import is_uri, label

    target = args.store or load_settings().store_path()
    if is_uri(target):
        raise StoreError(f"{args.command} works on a SQLite store file; {label(str(target))} is a PostgreSQL store "
                         "(the server checks its own data: use its tools, or memlens copy it into a file first)")
    return expand_user(target)


def _progress(stage: str) -> None:
    if sys.stderr.isatty():
        print(f"\r{stage}…\033[K", end="", file=progress_stream(), flush=True)


def cmd_check(args: argparse.Namespace) -> int:
    from memlens.sigterm import terminate_as_exit
    from memlens.store.check import Finding, check_store
    from memlens.store.corruption import hint

    path = _store(args)
    with terminate_as_exit():  # SIGTERM unwinds like Ctrl-C: the private copy goes
        report = check_store(path, _progress)
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=progress_stream())
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0 if report["ok"] else 1
    for f in report["findings"]:
        print(Finding(**f).line())
    shown = len(report["findings"])
    if report["problems"] > shown:
        print(f"... and {report['problems'] - shown} more")
    if report["ok"]:
        print(f"store {path}: ok ({report.get('entries', 0)} entries; checked {', '.join(report['checks'])})")
        return 0
    per = ", ".join(f"{a} {n}" for a, n in report["problems_per_area"].items())
    print(f"store {path}: {report['problems']} problems ({per}); {hint(path).split(', then ')[-1]}")
    return 1


def cmd_salvage(args: argparse.Namespace) -> int:
    from memlens.config import load_settings
    from memlens.sigterm import terminate_as_exit
    from memlens.store.salvage import salvage

    path = _store(args)
    with terminate_as_exit():  # SIGTERM unwinds like Ctrl-C: the half-made new store and any scratch copy go
        report = salvage(path, expand_user(args.new), settings=load_settings(), progress=_progress)
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=progress_stream())
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0 if report["lost"] == 0 else 1
    print(f"saved {report['saved']} entries into {report['new_store']} ({report['recovered_from_audit']} more rebuilt "
          f"from the audit history; {report['vectors_reused']} vectors reused, {report['embedded']} embedded)")
    print(
        f"lost {report['lost']} entries ({report['unreadable_rows']} unreadable rows, {report['invalid_rows']} rows "
        f"that do not decode); copied {report['audit_rows']} audit rows, {report['tasks']} tasks, "
        f"{report['blockers']} blockers, {report['retrieval_log']} logged retrievals, {report['golden']} golden queries"
        + (f" ({report['audit_rows_lost']} audit rows unreadable)" if report["audit_rows_lost"] else "")
    )
    skipped = [f"{report[k]} {what}" for k, what in (("retrieval_log_skipped", "logged retrievals"),
                                                   ("golden_skipped", "golden queries")) if report[k]]
    if skipped:
        print(f"skipped {' and '.join(skipped)} that could not be read or do not decode")
    if report["overrides_dropped"]:
        print(f"{len(report['overrides_dropped'])} entries override an entry that was lost, or themselves: their "
              "'overrides' was cleared")
    if report["demoted_to_note"]:
        print(f"{len(report['demoted_to_note'])} entries of web text had a rule's type without a person's promotion: "
              "kept as notes")
    return 0 if report["lost"] == 0 else 1
