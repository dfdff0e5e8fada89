"""``memlens add|import|export|stats|demo``: entries in and out of a store, and what it holds."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memlens.cli.args import PROG, unit_float
from memlens.cli.common import format_results, open_store, store_arg
from memlens.cli.output import count, progress_stream
from memlens.errors import MemlensError


def register_writes(sub: Any) -> None:
    """``add``, ``import`` and ``export``."""
    s = sub.add_parser("add", help="add one entry")
    store_arg(s)
    s.add_argument("text")
    s.add_argument("--wing", required=True)
    s.add_argument("--room", default="")
    s.add_argument("--kind", default="fact")
    s.add_argument("--type", default="note")
    s.add_argument("--status", default="active")
    s.add_argument("--title", default="")
    s.add_argument("--key")
    s.add_argument("--salience", type=unit_float, default=0.5, help="0 to 1 (default 0.5)")
    s.add_argument("--overrides", metavar="ID")
    s.add_argument("--json", action="store_true", help="print the stored entry as JSON")

    s = sub.add_parser("import", help="import a JSONL file, all or nothing ('-' reads stdin)")
    store_arg(s)
    s.add_argument("file")

    s = sub.add_parser("export", help="write entries as JSONL on stdout")
    store_arg(s)
    s.add_argument("--wing")
    s.add_argument("--with-vectors", action="store_true", help="include the model id and vectors (import reuses them)")


def register_stats(sub: Any) -> None:
    """``stats`` and ``demo``."""
    s = sub.add_parser("stats", help="entries per wing/kind/type/status, size, model")
    store_arg(s)
    s.add_argument("--json", action="store_true")
    s.add_argument("--retrievals", action="store_true", help="p50/p95 per stage and cache hit rate from the audit log")

    s = sub.add_parser("demo", help="load the demo memory into an empty store and run a demo search")
    store_arg(s)


def cmd_add(args: argparse.Namespace) -> int:
    with open_store(args, create=True) as mem:
        e = mem.add(
            args.text,
            wing=args.wing,
            room=args.room,
            kind=args.kind,
            type=args.type,
            status=args.status,
            title=args.title,
            key=args.key,
            salience=args.salience,
            overrides=args.overrides,
        )
    print(json.dumps(e.to_record(), ensure_ascii=False) if args.json else e.id)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    interactive = sys.stderr.isatty()

    def progress(stage: str, done: int, total: int) -> None:
        if interactive and total:
            print(f"\r{stage}: {done}/{total}", end="", file=progress_stream(), flush=True)

    from memlens.sigterm import terminate_as_exit

    with terminate_as_exit(), open_store(args, create=True) as mem:  # SIGTERM unwinds: scratch files and staged rows go
        report = mem.import_jsonl(Path(args.file), progress=progress)
    if interactive:
        print(file=sys.stderr)
    print(
        f"imported {count(report['imported'], 'entry', 'entries')} ({report['embedded']} embedded, "
        f"{count(report['reused_vectors'], 'vector')} reused)",
        file=sys.stderr,
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with open_store(args) as mem:
        if args.wing and args.wing not in mem.wings():
            raise MemlensError(f"unknown wing {args.wing!r} (known wings: {', '.join(mem.wings()) or 'none yet'})")
        skipped: list[str] = []

        def skip(entry_id: str, problem: str) -> None:  # a damaged row: say so, export the rest, exit 1
            from memlens.store.rows import damaged_note

            skipped.append(entry_id)
            print(f"{PROG}: warning: {damaged_note(entry_id, problem)}", file=sys.stderr)

        mem.export_jsonl(sys.stdout, wing=args.wing, with_vectors=args.with_vectors, on_skip=skip)
    if skipped:
        print(f"{PROG}: {len(skipped)} damaged entries were left out of the export", file=sys.stderr)
    return 1 if skipped else 0


def cmd_stats(args: argparse.Namespace) -> int:
    if args.retrievals:
        from memlens.stats import retrieval_stats

        with open_store(args) as mem:
            rs = retrieval_stats(mem.retrievals(limit=10000))
        if args.json:
            print(json.dumps(rs))
            return 0
        print(f"retrievals {rs['retrievals']}  cache hit rate {rs['cache_hit_rate']:.1%}  "
              + (f"(hits: p50 {rs['cache_hit_total']['p50']} ms)" if rs["cache_hits"] else "(no hits yet)"))
        print(f"{'stage':<9} {'p50 ms':>9} {'p95 ms':>9}   (cache misses)")
        for st, v in rs["stages"].items():
            print(f"{st:<9} {v['p50']:>9.3f} {v['p95']:>9.3f}")
        return 0
    with open_store(args) as mem:
        st = mem.stats()
        from memlens.replay.freshness import stale_count

        st["stale_vectors"] = stale_count(mem)  # vectors not made by the store's model from their text now
    if args.json:
        print(json.dumps(st, ensure_ascii=False))
        return 0
    ro = ", read-only: its directory is not writable" if st["read_only"] else ""
    print(f"store   {st['store']}  ({st['size_bytes'] / 1e6:.1f} MB, schema {st['schema_version']}{ro})")
    print(f"model   {st['model']} ({st['dim']} dims)")
    print(f"entries {st['entries']}  (audit rows {st['audit_rows']})")
    for title, key in (("wing", "per_wing"), ("kind", "per_kind"), ("type", "per_type"), ("status", "per_status")):
        items = "  ".join(f"{k}={v}" for k, v in st[key].items()) or "-"
        print(f"{title:<7} {items}")
    if st.get("stale_vectors"):
        print(f"stale   {st['stale_vectors']} vectors not made by the store's model from their text now (memlens reembed)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from memlens import demo

    with open_store(args, create=True) as mem:
        held = mem.count()
        if held:
            print(f"store {mem.path} already holds {count(held, 'entry', 'entries')}: the demo memory loads only into an "
                  "empty store, so nothing was loaded (the demo search below runs on what the store holds)", file=sys.stderr)
        else:
            print(f"empty store {mem.path}: loading the demo memory…", file=sys.stderr)
            report = demo.load_entries(mem)
            print(f"loaded {count(report['imported'], 'entry', 'entries')}", file=sys.stderr)
            tasks_report = demo.load_tasks(mem)  # the working memory: completed tasks and blockers
            if tasks_report:
                print(
                    f"loaded {tasks_report['tasks_imported']} tasks and {tasks_report['blockers_imported']} blockers",
                    file=sys.stderr,
                )
        print(f"$ memlens search {demo.QUERY!r} --active-wing {demo.WING}\n")
        print(format_results(mem.search(demo.QUERY, active_wing=demo.WING, k=demo.K)))
    return 0
