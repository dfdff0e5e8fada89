"""``memlens review`` (the inbox of agents' writes and the reviewer's actions) and ``memlens lint``: thin glue over
``memlens.review`` (``Memory.review``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from memlens.cli.common import open_store, store_arg
from memlens.cli.output import count

WARM_FROM = 10  # items whose evidence is listed from which the in-process vector index is loaded first


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add ``review`` and ``lint`` to ``sub``; returns their handlers by name."""
    from memlens.cli.args import Parser

    r = sub.add_parser("review", help="what agents wrote, with the evidence to accept, reject or merge it")
    store_arg(r)
    _filters(r)
    r.add_argument("--impact", action="store_true",
                   help="also preview each item's impact on golden and logged queries (runs them again; slower)")
    r.add_argument("--json", action="store_true", help='print {"items": [{entry, client, at, change, evidence}]}')
    rs = r.add_subparsers(dest="review_command", metavar="show|accept|reject|merge|undo", parser_class=Parser)
    a = rs.add_parser("show", help="one item with all its evidence, impact included")
    a.add_argument("entry_id", metavar="ID")
    a = rs.add_parser("accept", help="accept the agent's writes: the entry becomes active")
    a.add_argument("entry_ids", nargs="*", metavar="ID")
    a.add_argument("--clean", action="store_true", help="accept every listed item with no evidence against it")
    _filters(a)
    a.add_argument("--supersedes", metavar="ID", help="the accepted entry replaces ID: it overrides it")
    a.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                   help="edit the entry first (repeatable), then accept it")
    a = rs.add_parser("reject", help="take the agent's writes back: deprecate a new entry, restore an edited or deleted one")
    a.add_argument("entry_ids", nargs="+", metavar="ID")
    a.add_argument("--reason", metavar="TEXT", help="why (kept in the audit)")
    a.add_argument("--delete", action="store_true", help="delete a new entry instead of deprecating it")
    a = rs.add_parser("merge", help="fold a near-duplicate into the entry it duplicates (attribution and overrides kept)")
    a.add_argument("entry_ids", nargs="+", metavar="ID")
    a.add_argument("--into", metavar="ID", help="the entry to keep (default: the one the evidence names)")
    a = rs.add_parser("undo", help="reverse the newest review action on an entry (every entry it touched)")
    a.add_argument("entry_id", metavar="ID")
    for p in rs.choices.values():
        store_arg(p)
        p.add_argument("--json", action="store_true")

    s = sub.add_parser("lint", help="check the whole store: duplicates, conflicts, broken overrides, unused, stale ...")
    store_arg(s)
    s.add_argument("--json", action="store_true", help='print {"findings": [{kind, severity, entries, detail}]}')
    s.add_argument("--severity", choices=("info", "warning", "error"), default="error",
                   help="exit 1 when a finding is at least this severe (default error)")
    return {"review": cmd_review, "lint": cmd_lint}


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--client", metavar="C", help="only the writes of this client (its name)")
    p.add_argument("--since", metavar="TIME", help="only items written since TIME: ISO-8601, or an age like 12h, 7d")


def _since(args: argparse.Namespace) -> str | None:
    from memlens.replay.replay import parse_since

    return parse_since(args.since) if getattr(args, "since", None) else None


def cmd_review(args: argparse.Namespace) -> int:
    command = args.review_command
    since = _since(args)  # bad input fails before the store opens
    edits = _edits(args.sets) if command == "accept" else None
    with open_store(args) as mem:
        desk = mem.review
        if command is None:
            items = desk.items(client=args.client, since=since)
            if len(items) >= WARM_FROM:
                mem.warm_index()
            out: Any = desk.listing(client=args.client, since=since, impact=args.impact)
            if not args.json:
                _print_items(out["items"])
                return 0
        elif command == "show":
            item = desk.item(args.entry_id)
            out = {"items": [item.to_dict(desk.evidence(item, impact=True, pending={i.entry_id for i in desk.items()}))]}
            if not args.json:
                _print_items(out["items"], full=True)
                return 0
        elif command == "accept":
            out = _accept(args, desk, since, edits)
        elif command == "reject":
            out = {"done": desk.reject(args.entry_ids, reason=args.reason, delete=args.delete)}
        elif command == "merge":
            out = {"done": desk.merge(args.entry_ids, into=args.into)}
        else:
            out = {"done": [desk.undo(args.entry_id)]}
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    for d in out["done"]:
        again = "" if d["action"] == "undo" else f"  (undo: memlens review undo {d['entry']})"  # an undo is not undone
        print(f"{d['action']}: {d.get('detail') or _undo_line(d)}{again}")
    for s in out.get("skipped", []):
        print(f"skipped {s['entry']}: evidence against it ({', '.join(s['against'])}); memlens review show {s['entry']}")
    return 0


def _accept(args: argparse.Namespace, desk: Any, since: str | None, edits: dict[str, Any] | None) -> dict[str, Any]:
    from memlens.errors import ValidationError

    if args.clean and args.entry_ids:
        raise ValidationError("accept takes entry IDs or --clean (every item with no evidence against it), not both")
    if not args.clean and not args.entry_ids:
        raise ValidationError("accept needs entry IDs, or --clean (every item with no evidence against it)")
    if args.clean and (args.supersedes or edits):
        raise ValidationError("--clean accepts the items as they are: --supersedes and --set need entry IDs")
    if args.clean:
        got = desk.accept_clean(client=args.client, since=since)
        return {"done": got["accepted"], "skipped": got["skipped"]}
    return {"done": desk.accept(args.entry_ids, supersedes=args.supersedes, edits=edits)}


def _edits(items: list[str]) -> dict[str, Any] | None:
    if not items:
        return None
    from memlens.cli.replay import _parse_changes

    return _parse_changes(items)


def _undo_line(d: dict[str, Any]) -> str:
    return f"{d['undid']} of {', '.join(d['entries'])} reversed"


def _evidence_line(e: dict[str, Any]) -> str:
    kind = e["kind"]
    mark = "✗" if e.get("against") else "·"
    other = f"{e.get('id')} ({e.get('wing')}, {e.get('type')}, {e.get('status')}) {e.get('title', '')!r}"
    if kind == "duplicate":
        return (f"{mark} near-duplicate of {other}: cosine {e['similarity']:.3f}, shared text {e['shared_text']:.2f}; "
                f"would merge into {e['merge_into']}")
    if kind == "conflict":
        return f"{mark} conflict ({e['rule']}) with {other}: cosine {e['similarity']:.3f}; {e.get('detail', '')}"
    if kind == "use":
        if not e["retrieved"]:
            return f"{mark} not retrieved since {e['since']}"
        by = ", ".join(f"{c} {n}" for c, n in e["by"].items())
        return f"{mark} retrieved {e['retrieved']} times since {e['since']} ({e['in_context']} into a context): {by}"
    if kind == "impact":
        a, r = e.get("accept", {}), e.get("reject", {})
        return (f"{mark} impact: accepting fails {len(a.get('golden_failing', []))} golden queries and changes "
                f"{len(a.get('queries_changed', []))} logged ones; rejecting fails {len(r.get('golden_failing', []))} "
                f"and changes {len(r.get('queries_changed', []))} (of {e.get('golden_checked', 0)} golden checked)")
    return f"{mark} {kind}: {e.get('detail', '')}" + (f" (cosine {e['similarity']:.3f})" if "similarity" in e else "")


def _print_items(items: list[dict[str, Any]], full: bool = False) -> None:
    if not items:
        print("no agent writes are waiting for review")
        return
    client = None
    for it in items:
        if it["client"] != client:
            client = it["client"]
            print(f"{client}:")
        c = it["change"]
        print(f"  {it['at'][:19].replace('T', ' ')}  {c['action']:<7} {it['entry']}  {it['wing']}  {it['type']:<9} "
              f"{it['title']!r}" + (f"  ({len(c['writes'])} writes)" if len(c["writes"]) > 1 else ""))
        for field, d in c["diff"].items():
            if full or field != "text":
                print(f"      {field}: {str(d['before'])[:200]!r} -> {str(d['after'])[:200]!r}")
            else:
                print("      text changed (memlens review show ID)")
        for e in it["evidence"]:
            print(f"      {_evidence_line(e)}")
    print(f"-- {count(len(items), 'item')}; accept, reject or merge them: memlens review accept|reject|merge ID")


def cmd_lint(args: argparse.Namespace) -> int:
    from memlens.review.lint import exit_status

    with open_store(args) as mem:
        report = mem.review.lint(lambda text: mem.embedder.count_tokens(text))  # the model loads only if needed
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        for f in report["findings"]:
            print(f"{f['severity']:<7} {f['kind']:<12} {', '.join(f['entries'])}: {f['detail']}")
        s = report["summary"]
        counts = ", ".join(f"{n} {k}" for k, n in s["by_severity"].items()) or "nothing"
        print(f"-- {count(s['entries'], 'entry', 'entries')} checked in {s['seconds']:.1f} s: {counts}")
    return exit_status(report, args.severity)
