"""The ``memlens`` command: a thin layer over ``memlens.Memory``.

User errors print one line on stderr and exit 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlens.cli import check as cli_check
from memlens.cli import replay as cli_replay
from memlens.cli import tasks as cli_tasks
from memlens.cli.args import BUDGET_ARG, K_ARG, PROG, Parser, check_text_args, unit_float
from memlens.errors import MemlensError
from memlens.limits import MAX_BUDGET, MAX_K, check_query


def _store_arg(p: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    p.add_argument("--store", metavar="PATH", default=default, help="store file (default: $MEMLENS_STORE or the user data dir)")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Agent memory on one SQLite file, with every retrieval explained.")
    _store_arg(p, default=None)
    from memlens import __version__

    p.add_argument("--version", action="version", version=f"memlens {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("tui", help="open the terminal app")
    _store_arg(s)
    s.add_argument("--demo", action="store_true", help="load the demo memory if the store is empty")
    s.add_argument("--active-wing", metavar="W", help="the wing the app starts in (default: the largest project wing)")

    s = sub.add_parser("add", help="add one entry")
    _store_arg(s)
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
    _store_arg(s)
    s.add_argument("file")

    s = sub.add_parser("export", help="write entries as JSONL on stdout")
    _store_arg(s)
    s.add_argument("--wing")
    s.add_argument("--with-vectors", action="store_true", help="include the model id and vectors (import reuses them)")

    s = sub.add_parser("search", help="scoped hybrid search")
    _store_arg(s)
    s.add_argument("query", nargs="?", help="scoped query, e.g. 'wing=lifecore_ros2 type=invariant callbacks'")
    s.add_argument("--active-wing", metavar="W")
    s.add_argument("--wing", action="append", dest="wings", metavar="W", help="search this wing (repeatable)")
    s.add_argument("--profile", default="memory")
    s.add_argument("-k", type=K_ARG, default=None, help=f"results to return, 1 to {MAX_K} (default 10)")
    s.add_argument("--budget", type=BUDGET_ARG, metavar="TOKENS", help=f"context budget in tokens, 1 to {MAX_BUDGET:,}")
    s.add_argument("--json", action="store_true", help="print {results, trace} as JSON")
    s.add_argument(
        "--queries",
        metavar="FILE.jsonl",
        help="run many searches: one {id, query, active_wing, wings, k, profile, budget} a line, JSONL out; "
        "every line is checked first and a bad one stops the batch (FILE: line N: field: problem)",
    )
    s.add_argument("--user", help="whose retrieval this is (part of the cache key)")
    s.add_argument("--workspace", metavar="DIR", help="fall back to DIR's docs/README/files when memory finds nothing")
    s.add_argument("--no-cache", action="store_true", help="bypass the retrieval cache")
    s.add_argument("--format", choices=("text", "json", "openinference"), default=None,
                   help="openinference: the trace as OpenTelemetry spans (OTLP JSON); also sent to [export] otlp_endpoint")

    s = sub.add_parser("context", help="the markdown context an agent receives (working memory + memory, budgeted)")
    _store_arg(s)
    s.add_argument("query")
    s.add_argument("--active-wing", metavar="W", required=True)
    s.add_argument("--wing", action="append", dest="wings", metavar="W")
    s.add_argument("--profile", default="memory")
    s.add_argument("-k", type=K_ARG, default=None, help=f"results to return, 1 to {MAX_K} (default 10)")
    s.add_argument("--budget", type=BUDGET_ARG, metavar="TOKENS", help=f"context budget in tokens, 1 to {MAX_BUDGET:,}")
    s.add_argument("--workspace", metavar="DIR", default=".", help="fallback sources (default: the current directory)")
    s.add_argument("--json", action="store_true", help="print {context, results, trace}")

    s = sub.add_parser("explain", help="why was ID returned for QUERY, or where was it dropped?")
    _store_arg(s)
    s.add_argument("query")
    s.add_argument("--id", required=True, dest="entry_id")
    s.add_argument("--active-wing", metavar="W")
    s.add_argument("--wing", action="append", dest="wings", metavar="W")
    s.add_argument("--profile", default="memory")
    s.add_argument("-k", type=K_ARG, default=None, help=f"results to return, 1 to {MAX_K} (default 10)")
    s.add_argument("--budget", type=BUDGET_ARG, metavar="TOKENS", help=f"context budget in tokens, 1 to {MAX_BUDGET:,}")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("eval", help="recall@1/5/10, MRR@10, nDCG@10 on BEIR-style queries and qrels")
    _store_arg(s)
    s.add_argument("queries", help="queries.jsonl ({_id, text} a line)")
    s.add_argument("qrels", help="qrels.tsv (query-id, corpus-id, score)")
    s.add_argument("--profile", default="memory")
    s.add_argument("--active-wing", metavar="W")
    s.add_argument("--wing", action="append", dest="wings", metavar="W")
    s.add_argument("-k", type=K_ARG, default=10, help=f"cut-off, 1 to {MAX_K} (default 10)")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("profiles", help="list the retrieval profiles and their settings")
    _store_arg(s)
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("stats", help="entries per wing/kind/type/status, size, model")
    _store_arg(s)
    s.add_argument("--json", action="store_true")
    s.add_argument("--retrievals", action="store_true", help="p50/p95 per stage and cache hit rate from the audit log")

    s = sub.add_parser("demo", help="load the demo memory into an empty store and run a demo search")
    _store_arg(s)
    cli_tasks.register(sub)  # task complete|block|unblock, tasks [import-state]

    s = sub.add_parser("mcp", help="serve this store to agents over the Model Context Protocol")
    _store_arg(s)
    s.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or streamable HTTP")
    s.add_argument("--host", default="127.0.0.1", help="HTTP: address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765; 0 picks a free one)")
    s.add_argument("--read-only", action="store_true", help="serve only the tools that read")
    cli_check.register(sub)  # check, salvage
    COMMANDS.update(cli_replay.register(sub))  # replay, golden, access, reembed, deprecate/restore/delete/edit
    return p


def _open(args: argparse.Namespace, *, create: bool = False) -> Any:
    """The store for a command: only commands that write (add, import, demo, tui, task) create a missing one."""
    from memlens.memory import Memory

    if create:  # a store this command creates goes again if the command fails (see memlens.store.newstore)
        from memlens.store.newstore import open_for_write

        return open_for_write(args.store)
    return Memory.open(args.store, create=False)


def demo_file() -> Path:
    from importlib.resources import files

    return Path(str(files("memlens.data") / "demo.jsonl"))


def cmd_add(args: argparse.Namespace) -> int:
    with _open(args, create=True) as mem:
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
            print(f"\r{stage}: {done}/{total}", end="", file=sys.stderr, flush=True)

    from memlens.store.staging import terminate_as_exit

    with terminate_as_exit(), _open(args, create=True) as mem:  # SIGTERM unwinds: scratch files and staged rows go
        report = mem.import_jsonl(Path(args.file), progress=progress)
    if interactive:
        print(file=sys.stderr)
    print(
        f"imported {report['imported']} entries ({report['embedded']} embedded, {report['reused_vectors']} vectors reused)",
        file=sys.stderr,
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _open(args) as mem:
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


def format_results(bundle: Any) -> str:
    lines = []
    t = bundle.trace
    for r in bundle.results:
        e = r.entry
        where = f"{e.wing}/{e.room}" if e.room else e.wing
        flags = f"  [{', '.join(r.flags)}]" if r.flags else ""
        lines.append(f"{r.rank:>3}  {r.score:6.3f}  {e.type.value:<9} {where:<32} {e.title}{flags}")
        lines.append(f"{'':>5}{e.id}")
    if not bundle.results:
        lines.append("no results")
    if t.degraded:
        lines.append(f"-- degraded: {t.degraded['reason']}; used {t.degraded.get('source') or 'nothing'}")
    lines.append(
        f"-- {len(bundle.results)} results from {', '.join(t.wings_searched) or 'no wings'}"
        f" in {t.latency_ms.get('total', 0):.1f} ms"
        f" ({'cache hit' if t.cache_hit else 'cache miss'})"
    )
    return "\n".join(lines)


def cmd_search(args: argparse.Namespace) -> int:
    if args.queries:
        return _batch_search(args)
    if not args.query:
        raise MemlensError("search needs a QUERY or --queries FILE.jsonl")
    with _open(args) as mem:
        bundle = mem.search(
            args.query, active_wing=args.active_wing, wings=args.wings, k=args.k, profile=args.profile, budget=args.budget,
            user=args.user, workspace=args.workspace, use_cache=not args.no_cache,
        )
        if args.format == "openinference":
            from memlens.replay.otel import emit

            return emit(mem, bundle)
    print(json.dumps(bundle.to_dict(), ensure_ascii=False) if args.json or args.format == "json" else format_results(bundle))
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    """The agent keeps working when the store is unreachable: the context falls back to docs and says so."""
    from memlens.errors import StoreCorruptError, StoreError
    from memlens.retrieval.budget import render_context
    from memlens.retrieval.fallback import fallback_bundle

    try:
        mem = _open(args)
    except StoreError as exc:
        bundle = fallback_bundle(args.query, args.workspace, args.k or 10, f"store unavailable: {exc}")
        print(f"{PROG}: warning: {exc}; falling back to the workspace", file=sys.stderr)
        text = render_context(None, bundle)  # type: ignore[arg-type]
    else:
        try:
            from memlens.replay.storage import building_context

            with mem, building_context():  # the retrieval log marks its results as having gone into a context
                bundle = mem.search(args.query, active_wing=args.active_wing, wings=args.wings, k=args.k,
                                    profile=args.profile, budget=args.budget, workspace=args.workspace)
                text = render_context(mem, bundle)
        except StoreCorruptError as exc:  # damage met while reading: as unreachable as a missing store
            bundle = fallback_bundle(args.query, args.workspace, args.k or 10, f"store unavailable: {exc}")
            print(f"{PROG}: warning: {exc}; falling back to the workspace", file=sys.stderr)
            text = render_context(None, bundle)  # type: ignore[arg-type]
    if args.json:
        print(json.dumps({"context": text, **bundle.to_dict()}, ensure_ascii=False))
    else:
        sys.stdout.write(text)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        out = mem.explain(args.query, args.entry_id, active_wing=args.active_wing, wings=args.wings, k=args.k,
                          profile=args.profile, budget=args.budget)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    print(f"{out['id']}  {out['title']}  ({out['wing']})")
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
    with _open(args) as mem:
        report = evaluate(mem, queries, qrels, profile=args.profile, active_wing=args.active_wing, wings=args.wings, k=args.k)
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


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def retrieval_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from memlens.trace import STAGES

    hits = sum(1 for r in rows if r.get("cache_hit"))
    misses = [r for r in rows if not r.get("cache_hit")]
    out: dict[str, Any] = {"retrievals": len(rows), "cache_hits": hits, "cache_hit_rate": hits / len(rows) if rows else 0.0,
                           "stages": {}}
    for st in STAGES:
        vals = [float(r["latency_ms"].get(st, 0.0)) for r in misses if r.get("latency_ms")]
        out["stages"][st] = {"p50": round(_pct(vals, 0.5), 3), "p95": round(_pct(vals, 0.95), 3)}
    hit_totals = [float(r["latency_ms"]["total"]) for r in rows if r.get("cache_hit") and r.get("latency_ms")]
    out["cache_hit_total"] = {"p50": round(_pct(hit_totals, 0.5), 3), "p95": round(_pct(hit_totals, 0.95), 3)}
    return out


def _batch_search(args: argparse.Namespace) -> int:
    from memlens.retrieval.batch import parse_lines, run

    jobs = parse_lines(Path(args.queries))  # before the store opens: a bad file leaves nothing behind
    defaults = {"active_wing": args.active_wing, "wings": args.wings, "k": args.k, "profile": args.profile,
                "budget": args.budget}
    with _open(args) as mem:
        run(mem, Path(args.queries), jobs, defaults)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    if args.retrievals:
        with _open(args) as mem:
            rs = retrieval_stats(mem.retrievals(limit=10000))
        if args.json:
            print(json.dumps(rs))
            return 0
        print(f"retrievals {rs['retrievals']}  cache hit rate {rs['cache_hit_rate']:.1%}  "
              f"(hits: p50 {rs['cache_hit_total']['p50']} ms)")
        print(f"{'stage':<9} {'p50 ms':>9} {'p95 ms':>9}   (cache misses)")
        for st, v in rs["stages"].items():
            print(f"{st:<9} {v['p50']:>9.3f} {v['p95']:>9.3f}")
        return 0
    with _open(args) as mem:
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
    with _open(args, create=True) as mem:
        if mem.count() == 0:
            print(f"empty store {mem.path}: loading the demo memory…", file=sys.stderr)
            report = mem.import_jsonl(demo_file())
            print(f"loaded {report['imported']} entries", file=sys.stderr)
            from memlens.working.tasks import load_demo

            tasks_report = load_demo(mem)  # the working memory: data/demo_tasks.json
            if tasks_report:
                print(
                    f"loaded {tasks_report['tasks_imported']} tasks and {tasks_report['blockers_imported']} blockers",
                    file=sys.stderr,
                )
        query = "callbacks blocking"
        print(f"$ memlens search {query!r} --active-wing lifecore_ros2\n")
        print(format_results(mem.search(query, active_wing="lifecore_ros2", k=8)))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise MemlensError(f"--port must be 0..65535, got {args.port}")
    from memlens.mcp.server import serve  # imports no SDK yet: the stdio wire is protected first
    from memlens.replay.storage import set_default_client

    set_default_client("mcp")  # a client that names itself is logged by its name

    return serve(args.store, transport=args.transport, host=args.host, port=args.port, read_only=args.read_only)


def cmd_tui(args: argparse.Namespace) -> int:
    from memlens.replay.storage import set_default_client

    set_default_client("app")
    try:
        from memlens.tui.app import run_app
    except ImportError as exc:  # the engine works without the app's dependencies
        raise MemlensError(f"the terminal app needs textual ({exc}); pip install 'textual'") from None
    return run_app(args.store, demo=getattr(args, "demo", False), active_wing=getattr(args, "active_wing", None))


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "tui": cmd_tui,
    "add": cmd_add,
    "import": cmd_import,
    "export": cmd_export,
    "search": cmd_search,
    "stats": cmd_stats,
    "context": cmd_context,
    "explain": cmd_explain,
    "eval": cmd_eval,
    "profiles": cmd_profiles,
    "demo": cmd_demo,
    "task": cli_tasks.cmd_task,
    "tasks": cli_tasks.cmd_tasks,
    "mcp": cmd_mcp,
    "check": cli_check.cmd_check,
    "salvage": cli_check.cmd_salvage,
}


def main(argv: list[str] | None = None) -> int:
    from memlens.replay.storage import set_default_client

    set_default_client("cli")  # the client the retrieval log names (the app says "app")
    args = build_parser().parse_args(argv)
    handler = COMMANDS.get(args.command or "tui", cmd_tui)
    try:
        check_text_args(args)
        if args.command in ("search", "context", "explain") and isinstance(getattr(args, "query", None), str):
            check_query(args.query)  # before the store opens
        return handler(args)
    except MemlensError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `memlens export | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            raise
        # the output cannot be written (`export > file` on a full disk, /dev/full): one line, not a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere at exit
        print(f"{PROG}: error: cannot write the output: {exc.strerror}", file=sys.stderr)
        return 2


_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EIO, getattr(errno, "EDQUOT", errno.ENOSPC)}


if __name__ == "__main__":
    sys.exit(main())
