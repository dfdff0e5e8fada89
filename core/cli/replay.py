"""``memlens replay``, ``golden``, ``access``, ``reembed`` and the curation writes with ``--dry-run``
(``deprecate``, ``restore``, ``delete``, ``edit``): thin glue over ``memlens.replay``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from memlens.cli.args import K_ARG, Parser, _bounded, unit_float
from memlens.cli.common import open_store, store_arg
from memlens.cli.output import progress_stream
from memlens.errors import ValidationError
from memlens.limits import MAX_LIST


def _store_arg(p: argparse.ArgumentParser) -> None:
    store_arg(p)


def _open(args: argparse.Namespace) -> Any:
    return open_store(args)


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add the commands to ``sub``; returns their handlers by name."""
    s = sub.add_parser("replay", help="re-run logged retrievals and diff their ranked lists")
    _store_arg(s)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--last", type=_bounded(1, MAX_LIST), metavar="N", help="the newest N logged retrievals (default 20)")
    g.add_argument("--since", metavar="TIME", help="logged since TIME: ISO-8601, or an age like 30m, 12h, 7d")
    g.add_argument("--query", metavar="TEXT", help="every logged retrieval of exactly this query")
    s.add_argument("--set", action="append", dest="sets", default=[], metavar="SECTION.KEY=VALUE",
                   help="replay with this setting changed (in memory only; repeatable), e.g. retrieval.weights.recency=0.2")
    s.add_argument("--all", action="store_true", help="list unchanged queries too")
    s.add_argument("--json", action="store_true", help="print {queries, summary} as JSON")
    s.add_argument("--format", choices=("text", "json", "openinference"), default=None,
                   help="openinference: the replayed retrievals as OpenTelemetry spans (also sent to [export] otlp_endpoint)")

    s = sub.add_parser("golden", help="golden queries: QUERY must return ID within the top K")
    _store_arg(s)
    gs = s.add_subparsers(dest="golden_command", metavar="add|list|remove|check", parser_class=Parser)
    gs.required = True
    a = gs.add_parser("add", help="expect ID among the top K results of QUERY")
    _store_arg(a)
    a.add_argument("query")
    a.add_argument("--expect", required=True, metavar="ID")
    a.add_argument("--active-wing", metavar="W")
    a.add_argument("--within", type=K_ARG, default=10, metavar="K", help="rank the entry must reach (default 10)")
    a.add_argument("--json", action="store_true")
    a = gs.add_parser("list", help="list the golden queries")
    _store_arg(a)
    a.add_argument("--json", action="store_true")
    a = gs.add_parser("remove", help="remove a golden query by its number")
    _store_arg(a)
    a.add_argument("golden_id", type=int, metavar="N")
    a = gs.add_parser("check", help="run every golden query; exit 1 naming each one that fails")
    _store_arg(a)
    a.add_argument("--json", action="store_true")

    s = sub.add_parser("access", help="when an entry was retrieved, by which client, for which query, at which rank")
    _store_arg(s)
    s.add_argument("entry_id", nargs="?", metavar="ID")
    s.add_argument("--never", action="store_true", help="entries no logged retrieval returned (their wing was searched)")
    s.add_argument("--always", action="store_true", help="entries returned by every logged retrieval of their wing")
    s.add_argument("--wing", metavar="W")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("reembed", help="re-embed the entries whose vector is not the current model's of their text")
    _store_arg(s)
    s.add_argument("--wing", metavar="W")
    s.add_argument("--json", action="store_true")

    for name, help_ in (("deprecate", "deprecate an entry"), ("restore", "make a deprecated entry active again"),
                        ("delete", "delete an entry")):
        s = sub.add_parser(name, help=help_ + " (--dry-run: show its impact, write nothing)")
        _store_arg(s)
        s.add_argument("entry_id", metavar="ID")
        s.add_argument("--dry-run", action="store_true",
                       help="show which golden queries would fail and which recent queries would change; write nothing")
        s.add_argument("--json", action="store_true")
    s = sub.add_parser("edit", help="change fields of an entry (--dry-run: show its impact, write nothing)")
    _store_arg(s)
    s.add_argument("entry_id", metavar="ID")
    s.add_argument("changes", nargs="+", metavar="FIELD=VALUE", help="e.g. title='New title' salience=0.9")
    s.add_argument("--promote", action="store_true",
                   help="you, a person, vouch for web text: let this edit make it an invariant or decision (audited)")
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--json", action="store_true")
    return {"replay": cmd_replay, "golden": cmd_golden, "access": cmd_access, "reembed": cmd_reembed,
            "deprecate": cmd_write, "restore": cmd_write, "delete": cmd_write, "edit": cmd_write}


def _diff_lines(q: dict[str, Any]) -> list[str]:
    lines = [f"{q['query']!r}  ({q['ts']}): " + ("changed" if q["changed"] else "unchanged")]
    why = q.get("why", {})
    for i in q["entered"]:
        lines.append(f"  + {i}  entered: {why.get(i, '')}")
    for i in q["left"]:
        lines.append(f"  - {i}  left: {why.get(i, '')}")
    for m in q["moved"]:
        lines.append(f"  ~ {m['id']}  {m['from']} → {m['to']}: {why.get(m['id'], '')}")
    return lines


def _summary_line(s: dict[str, Any]) -> str:
    tau = "-" if s["kendall_tau"] is None else f"{s['kendall_tau']:.3f}"
    return f"replayed {s['replayed']}, changed {s['changed']}, top-1 changed {s['top1_changed']}, Kendall tau {tau}"


def cmd_replay(args: argparse.Namespace) -> int:
    from memlens.replay.replay import apply_sets, parse_since, replay

    if args.json and args.format not in (None, "json"):  # as `search` refuses it
        raise ValidationError(f"--json and --format {args.format} ask for two outputs: give one")
    if args.since:
        parse_since(args.since)  # bad input fails before the store opens
    bodies: list[dict[str, Any]] = []
    otel = args.format == "openinference"
    with _open(args) as mem:
        apply_sets(mem.settings, args.sets)
        if otel:
            from memlens.replay.otel import emit, merge, spans

            report = replay(mem, last=args.last, since=args.since, query=args.query, sets=args.sets,
                            on_bundle=lambda b: bodies.append(spans(b)))
            return emit(mem, None, merge(bodies))
        report = replay(mem, last=args.last, since=args.since, query=args.query, sets=args.sets)
    if args.json or args.format == "json":
        keep = ("query", "changed", "entered", "left", "moved", "seq", "ts", "tau", "why")
        out = {"queries": [{k: q[k] for k in keep if k in q} for q in report["queries"]], "summary": report["summary"]}
        print(json.dumps(out, ensure_ascii=False))
        return 0
    for q in report["queries"]:
        if q["changed"] or args.all:
            print("\n".join(_diff_lines(q)))
    print(("-- " if report["queries"] else "no logged retrievals to replay; ") + _summary_line(report["summary"]))
    return 0


def cmd_golden(args: argparse.Namespace) -> int:
    from memlens.replay import golden

    with _open(args) as mem:
        if args.golden_command == "add":
            g = golden.add(mem, args.query, args.expect, active_wing=args.active_wing, within=args.within)
            print(json.dumps(g, ensure_ascii=False) if args.json else f"golden query {g['id']} added")
            return 0
        if args.golden_command == "remove":
            golden.remove(mem, args.golden_id)
            print(f"golden query {args.golden_id} removed")
            return 0
        if args.golden_command == "list":
            rows = golden.listing(mem)
            if args.json:
                print(json.dumps(rows, ensure_ascii=False))
            elif not rows:
                print("no golden queries yet (memlens golden add QUERY --expect ID)", file=sys.stderr)
            for g in [] if args.json else rows:
                wing = f"  (active wing {g['active_wing']})" if g["active_wing"] else ""
                print(f"{g['id']:>4}  {g['query']!r} expects {g['expect']} within {g['within']}{wing}")
            return 0
        report = golden.check(mem)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        for c in report["checks"]:
            mark = "ok  " if c["ok"] else "FAIL"
            print(f"{mark} {c['id']:>4}  {c['query']!r} expects {c['expect']} within {c['within']}: {c['why']}")
        print(f"-- {report['passed']} passed, {report['failed']} failed")
    for c in report["checks"]:
        if not c["ok"]:
            print(f"memlens: golden query {c['id']} {c['query']!r} fails: it expects {c['expect']} within {c['within']}: "
                  f"{c['why']}", file=sys.stderr)
    return 1 if report["failed"] else 0


def cmd_access(args: argparse.Namespace) -> int:
    from memlens.replay import access

    if args.entry_id and (args.never or args.always):
        raise ValidationError("access takes an entry ID or --never / --always, not both")
    if not (args.entry_id or args.never or args.always):
        raise ValidationError("access needs an entry ID, or --never / --always")
    keys = ("never", "always") if args.never and args.always else ("never",) if args.never else ("always",)
    with _open(args) as mem:
        if args.entry_id:
            out: Any = access.entry_access(mem, args.entry_id)
        else:
            got = access.coverage(mem, wing=args.wing)
            out = {**{k: got[k] for k in keys}, "entries": got["entries"]}  # the lists asked for
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    if args.entry_id:
        f = out["freshness"]
        print(f"{out['id']}: retrieved {len(out['accesses'])} times in the log; vector "
              + ("fresh" if f.get("fresh") else f"stale (made by {f.get('model')}, text hash matches: {f.get('hash_matches')})"))
        for a in out["accesses"]:
            ctx = "  in context" if a["in_context"] else ""
            print(f"  {a['ts']}  {a['client']:<12} rank {a['rank']:>3}  {a['score']:.3f}  {a['query']!r}{ctx}")
        return 0
    for key in keys:
        print(f"{key} retrieved ({len(out[key])}):")
        for e in out[key]:
            print(f"  {e['id']}  {e['wing']}  {e['type']:<9} {e['title']}  (searched {e['searched']}x)")
    return 0


def cmd_reembed(args: argparse.Namespace) -> int:
    from memlens.replay.freshness import reembed
    from memlens.stores import open_for_write

    interactive = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if interactive and total:
            width = 30
            fill = int(width * done / total)
            print(f"\rre-embedding [{'#' * fill}{'.' * (width - fill)}] {done}/{total}", end="", file=progress_stream(),
                  flush=True)

    with open_for_write(args.store) as mem:
        report = reembed(mem, wing=args.wing, progress=progress)
    if interactive and report["stale"]:
        print(file=sys.stderr)
    print(json.dumps(report) if args.json else f"re-embedded {report['reembedded']} of {report['stale']} stale entries "
          f"({report['model']})")
    return 0


def _parse_changes(items: list[str]) -> dict[str, Any]:
    from memlens.models import EDITABLE_FIELDS

    out: dict[str, Any] = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or field not in EDITABLE_FIELDS:
            raise ValidationError(f"{item[:40]!r}: expected FIELD=VALUE with FIELD one of {', '.join(EDITABLE_FIELDS)}")
        if field == "meta":  # a JSON object, as in an export's lines
            try:
                out[field] = json.loads(value)
            except ValueError:
                out[field] = None
            except RecursionError:
                raise ValidationError("field 'meta': invalid JSON: nested too deeply") from None
            if not isinstance(out[field], dict):
                raise ValidationError("field 'meta': expected a JSON object, e.g. meta='{\"owner\": \"ops\"}'")
            continue
        if field == "salience":
            try:
                out[field] = unit_float(value)
            except argparse.ArgumentTypeError as exc:
                raise ValidationError(f"field 'salience': {exc}") from None
            continue
        out[field] = value
    return out


def _change(args: argparse.Namespace) -> Callable[[Any], Any]:
    eid = args.entry_id
    if args.command == "deprecate":
        return lambda m: m.set_status(eid, "deprecated")
    if args.command == "restore":
        return lambda m: m.set_status(eid, "active")
    if args.command == "delete":
        return lambda m: m.delete(eid)
    changes = _parse_changes(args.changes)
    promoted_by = "cli" if args.promote else None
    return lambda m: m.update(eid, promoted_by=promoted_by, **changes)


def _check_restorable(entry: Any) -> None:
    """``restore`` is for a deprecated entry: an agent's entry waiting for review is answered in the review inbox."""
    status, entry_id = entry.status.value, entry.id
    if status not in ("deprecated", "active"):
        raise ValidationError(f"restore: {entry_id} is {status}, not deprecated (memlens review accept {entry_id} "
                              f"makes it active; memlens edit {entry_id} status=active sets it by hand)")


def _released(mem: Any, entry_id: str) -> list[str]:
    """The entries that override ``entry_id``: deleting it leaves them overriding nothing."""
    from memlens.store.writes import overriders

    return overriders(mem.reads, entry_id)


def _written(entry: Any, command: str, released: list[str]) -> dict[str, Any]:
    """The ``--json`` of a write: the entry as it is stored now; for ``delete``, as it was, with ``"deleted": true``
    and ``released``: the entries that overrode it and now override nothing."""
    record: dict[str, Any] = entry.to_record()
    return {**record, "deleted": True, "released": released} if command == "delete" else record


def cmd_write(args: argparse.Namespace) -> int:
    change = _change(args)  # bad FIELD=VALUE fails before the store opens
    eid = args.entry_id
    if not args.dry_run:
        with _open(args) as mem:
            current = mem.get(eid)
            if args.command == "restore":
                _check_restorable(current)
            before = current.to_record() if args.command != "delete" else None
            released: list[str] = []
            if args.command == "delete":
                entry, released = mem.delete_releasing(eid)
            else:
                entry = change(mem)
        same = " (nothing changed: it already had these values)" if entry.to_record() == before else ""
        print(json.dumps(_written(entry, args.command, released), ensure_ascii=False) if args.json
              else f"{args.command}: {entry.id}{same}")
        if released and not args.json:
            print(f"  {', '.join(released)} overrode it and now override{'s' if len(released) == 1 else ''} nothing")
        return 0
    from memlens.replay.impact import preview

    with _open(args) as mem:
        current = mem.get(eid)
        if args.command == "restore":
            _check_restorable(current)
        released = _released(mem, eid) if args.command == "delete" else []
        report = preview(mem, change)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0
    print(f"dry run: {args.command} {eid} (nothing written)")
    if released:
        print(f"  {', '.join(released)} override{'s' if len(released) == 1 else ''} it and would override nothing")
    for c in report["golden"]:
        state = "would fail" if c["was_ok"] else "fails already"
        print(f"  golden {c['id']} {c['query']!r} {state}: {c['expect']} {c['why']}")
    if not report["golden"]:
        print(f"  golden queries: none of {report['golden_checked']} would fail" if report["golden_checked"]
              else "  golden queries: none defined (memlens golden add)")
    for q in report["queries"]:
        print("\n".join("  " + line for line in _diff_lines(q)))
    print("-- recent queries: " + _summary_line(report["summary"]))
    return 0

