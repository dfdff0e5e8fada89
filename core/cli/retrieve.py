"""``memlens search|context|explain|eval|profiles``: retrieval from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memlens.cli.args import BUDGET_ARG, K_ARG, PROG
from memlens.cli.common import format_results, open_store, store_arg
from memlens.errors import MemlensError
from memlens.limits import MAX_BUDGET, MAX_K
from memlens.visible import one_line

K_HELP = (f"results to return, 1 to {MAX_K} (default 10); the active wing's invariants and both entries of a "
          "conflict are returned beyond it, flagged mandatory or conflict")


def register(sub: Any) -> None:
    """``search``, ``context``, ``explain``, ``eval`` and ``profiles``."""
    s = sub.add_parser("search", help="scoped hybrid search")
    store_arg(s)
    s.add_argument("query", nargs="?", help="scoped query, e.g. 'wing=lifecore_ros2 type=invariant callbacks'")
    s.add_argument("--active-wing", metavar="W")
    s.add_argument("--wing", action="append", dest="wings", metavar="W", help="search this wing (repeatable)")
    s.add_argument("--profile", default="memory")
    s.add_argument("-k", type=K_ARG, default=None, help=K_HELP)
    s.add_argument("--budget", type=BUDGET_ARG, metavar="TOKENS", help=f"context budget in tokens, 1 to {MAX_BUDGET:,}")
    s.add_argument("--json", action="store_true", help="print {results, trace} as JSON")
    s.add_argument(
        "--queries",
        metavar="FILE.jsonl",
        help="run many searches ('-': read them from stdin): one {id, query, active_wing, wings, k, profile, budget} a "
        "line, JSONL out; "
        "every line is checked first and a bad one stops the batch (FILE: line N: field: problem)",
    )
    s.add_argument("--user", help="whose retrieval this is (part of the cache key)")
    s.add_argument("--workspace", metavar="DIR", help="fall back to DIR's docs/README/files when memory finds nothing")
    s.add_argument("--no-cache", action="store_true", help="bypass the retrieval cache")
    s.add_argument("--format", choices=("text", "json", "openinference"), default=None,
                   help="openinference: the trace as OpenTelemetry spans (OTLP JSON); also sent to [export] otlp_endpoint")

    s = sub.add_parser("context", help="the markdown context an agent receives (working memory + memory, budgeted)")
    store_arg(s)
    s.add_argument("query")
    s.add_argument("--active-wing", metavar="W", required=True)
    s.add_argument("--wing", action="append", dest="wings", metavar="W")
    s.add_argument("--profile", default="memory")
    s.add_argument("-k", type=K_ARG, default=None, help=K_HELP)
    s.add_argument("--budget", type=BUDGET_ARG, metavar="TOKENS", help=f"context budget in tokens, 1 to {MAX_BUDGET:,}")
    s.add_argument("--workspace", metavar="DIR", default=".", help="fallback sources (default: the current directory)")
    s.add_argument("--json", action="store_true", help="print {context, results, trace}")

    s = sub.add_parser("explain", help="why was ID returned for QUERY, or where was it dropped?")
    store_arg(s)
    s.add_argument("query")
    s.add_argument("--id", required=True, dest="entry_id")
    s.add_argument("--active-wing", metavar="W")
    s.add_argument("--wing", action="append", dest="wings", metavar="W")
    s.add_argument("--profile", default="memory")
    s.add_argument("-k", type=K_ARG, default=None, help=K_HELP)
    s.add_argument("--budget", type=BUDGET_ARG, metavar="TOKENS", help=f"context budget in tokens, 1 to {MAX_BUDGET:,}")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("eval", help="recall@1/5/10, MRR@10, nDCG@10 on BEIR-style queries and qrels")
    store_arg(s)
    s.add_argument("queries", help="queries.jsonl ({_id, text} a line)")
    s.add_argument("qrels", help="qrels.tsv (query-id, corpus-id, score)")
    s.add_argument("--profile", default="memory")
    s.add_argument("--active-wing", metavar="W")
    s.add_argument("--wing", action="append", dest="wings", metavar="W")
    s.add_argument("-k", type=K_ARG, default=10, help=f"cut-off, 1 to {MAX_K} (default 10)")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("profiles", help="list the retrieval profiles and their settings")
    store_arg(s)
    s.add_argument("--json", action="store_true")


def cmd_search(args: argparse.Namespace) -> int:
    if args.queries and args.query:
        raise MemlensError("give a QUERY or --queries FILE.jsonl, not both")
    if args.json and args.format not in (None, "json"):
        raise MemlensError(f"--json and --format {args.format} ask for two outputs: give one")
    if args.queries:
        return _batch_search(args)
    if not args.query:
        raise MemlensError("search needs a QUERY or --queries FILE.jsonl")
    with open_store(args) as mem:
        bundle = mem.search(
            args.query, active_wing=args.active_wing, wings=args.wings, k=args.k, profile=args.profile, budget=args.budget,
            user=args.user, workspace=args.workspace, use_cache=not args.no_cache,
        )
        if args.format == "openinference":
            from memlens.replay.otel import emit

            return emit(mem, bundle)
    print(json.dumps(bundle.to_dict(), ensure_ascii=False) if args.json or args.format == "json" else format_results(bundle))
    return 0


def _batch_search(args: argparse.Namespace) -> int:
    from memlens.retrieval.batch import parse_lines, run

    jobs = parse_lines(Path(args.queries))  # before the store opens: a bad file leaves nothing behind
    defaults = {"active_wing": args.active_wing, "wings": args.wings, "k": args.k, "profile": args.profile,
                "budget": args.budget}
    with open_store(args) as mem:
        run(mem, Path(args.queries), jobs, defaults)
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    """The agent keeps working when the store is unreachable: the context falls back to docs and says so."""
    from memlens.errors import StoreCorruptError, StoreError
    from memlens.retrieval.budget import render_context
    from memlens.retrieval.fallback import fallback_bundle

    try:
        mem = open_store(args)
    except StoreError as exc:
        bundle = fallback_bundle(args.query, args.workspace, args.k or 10, f"store unavailable: {exc}")
        print(f"{PROG}: warning: {exc}; falling back to the workspace", file=sys.stderr)
        text = render_context(None, bundle)
    else:
        try:
            with mem:  # context=True: the retrieval log marks its results as having gone into a context
                bundle = mem.search(args.query, active_wing=args.active_wing, wings=args.wings, k=args.k,
                                    profile=args.profile, budget=args.budget, workspace=args.workspace, context=True)
                from memlens.ingest.recall import render_with_code

                text = render_with_code(mem, bundle)  # with the Relevant code section when code is indexed
        except StoreCorruptError as exc:  # damage met while reading: as unreachable as a missing store
            bundle = fallback_bundle(args.query, args.workspace, args.k or 10, f"store unavailable: {exc}")
            print(f"{PROG}: warning: {exc}; falling back to the workspace", file=sys.stderr)
            text = render_context(None, bundle)
    if args.json:
        print(json.dumps({"context": text, **bundle.to_dict()}, ensure_ascii=False))
    else:
        sys.stdout.write(text)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    with open_store(args) as mem:
        out = mem.explain(args.query, args.entry_id, active_wing=args.active_wing, wings=args.wings, k=args.k,
                          profile=args.profile, budget=args.budget)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    print(f"{out['id']}  {one_line(out['title'])}  ({out['wing']})")
    print(f"verdict: {out['verdict']}" + (f" at stage {out['stage']!r}" if out.get("stage") else ""))
    print(f"why:     {out['detail']}")
    comps = out.get("components")
    if comps:
        shown = {k: v for k, v in comps.items() if v is not None}
        print("components: " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from memlens.retrieval.evaluate import evaluate, load_qrels, load_queries

    queries, qrels = load_queries(Path(args.queries)), load_qrels(Path(args.qrels))
    with open_store(args) as mem:
        if len(queries) >= 20:  # as `search --queries`: the in-process index ranks them (same results, faster)
            mem.warm_index(text=True)
        report = evaluate(mem, queries, qrels, profile=args.profile, active_wing=args.active_wing, wings=args.wings, k=args.k)
        asked = {str(q["id"]) for q in report["per_query"]}
        relevant = sorted({d for q, docs in qrels.items() if q in asked for d, s in docs.items() if s > 0})
        missing = mem.store.missing_ids(relevant)
    if missing:  # every metric of such a question is 0 whatever the ranking: say why
        print(f"memlens: warning: {len(missing)} of the {len(relevant)} relevant ids are not in the store "
              f"(e.g. {', '.join(repr(m[:60]) for m in missing[:3])}): the qrels name other ids than the store's",
              file=sys.stderr)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0
    print(f"profile {report['profile']}: {report['queries']} queries ({report['skipped']} without relevant documents skipped)")
    for m in ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"):
        print(f"  {m:<10} {report[m]:.4f}")
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from memlens.config import load_settings
    from memlens.profiles import load_profiles

    profiles = load_profiles(load_settings().profiles)  # the configuration's; no store needed
    if args.json:
        print(json.dumps({n: p.model_dump() for n, p in profiles.items()}, ensure_ascii=False))
        return 0
    for name, p in profiles.items():
        print(f"{name:<13} {p.description}")
    return 0
