"""``memlens ask``: a question answered by the configured chat model from the memory context, with citations.

    memlens [--store S] ask QUESTION --active-wing W [--wing W…] [--profile P] [-k N] [--budget N]
                        [--workspace DIR] [--web URL…] [--json]

The model reads exactly what ``memlens context`` prints for the same arguments
(working memory + the budgeted memory context), then any web context in a
section marked untrusted, then the question. The answer streams to stdout as
it arrives, followed by the entry ids it cites; an id the model was not given
is listed apart as invented. ``--json`` prints one object at the end:
``{"answer", "citations", "invented_citations", "complete", "error"?, "model",
"trace", "web"?}`` where ``trace`` is the retrieval trace exactly as
``search --json`` shows it.

Exit status: 0 for a complete answer; 1 when the model failed or stopped
midway (the partial answer is still printed, the error is one line on
stderr); 2 for bad input or configuration, a missing store, or no model
configured (checked before the store opens). Every answer is logged in the
store with the retrieval it used (``memlens.assist.log``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from memlens.cli.args import BUDGET_ARG, K_ARG, PROG
from memlens.cli.common import store_arg
from memlens.errors import ValidationError
from memlens.limits import MAX_BUDGET, MAX_K

MAX_WEB_URLS = 20


def register(sub: Any) -> None:
    s = sub.add_parser("ask", help="answer a question with the configured chat model, citing memory entries")
    store_arg(s)
    s.add_argument("question", metavar="QUESTION")
    s.add_argument("--active-wing", metavar="W", required=True)
    s.add_argument("--wing", action="append", dest="wings", metavar="W", help="search this wing too (repeatable)")
    s.add_argument("--profile", default="memory")
    s.add_argument("-k", type=K_ARG, default=None, help=f"results to retrieve, 1 to {MAX_K} (default 10)")
    s.add_argument("--budget", type=BUDGET_ARG, metavar="TOKENS", help=f"context budget in tokens, 1 to {MAX_BUDGET:,}")
    s.add_argument("--workspace", metavar="DIR", default=".", help="fallback sources, as for context (default: .)")
    s.add_argument("--web", metavar="URL", nargs="+", action="extend", default=[],
                   help="also fetch these pages as untrusted web context")
    s.add_argument("--json", action="store_true", help="print {answer, citations, complete, error?, model, trace}")


def _check(args: argparse.Namespace) -> None:
    from memlens.limits import check_query

    if not args.question.strip():
        raise ValidationError("QUESTION is empty")
    check_query(args.question)
    if len(args.web) > MAX_WEB_URLS:
        raise ValidationError(f"--web takes at most {MAX_WEB_URLS} URLs, got {len(args.web)}")
    for url in args.web:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationError(f"--web {url[:80]!r}: only http:// and https:// URLs")


def _print_citations(ans: Any, titles: dict[str, str]) -> None:
    c = ans.citations
    from memlens.assist.prompt import shown_sources

    urls = [s.get("url", "") for s in shown_sources(ans.prepared.web)]
    if c.valid:
        print("cited: " + ", ".join(f"{i} \u201c{titles[i]}\u201d" if titles.get(i) else i for i in c.valid))
    else:
        print("cited: no entries")
    if c.web:
        print("web sources cited: " + ", ".join(f"[web:{n}] {urls[n - 1]}" for n in c.web))
    if c.invented:
        print("not in the context sent (invented): " + ", ".join(c.invented))


def cmd_ask(args: argparse.Namespace) -> int:
    from memlens.assist.ask import answer, prepare, record
    from memlens.assist.llm import Endpoint
    from memlens.cli.common import open_store
    from memlens.config import load_settings

    _check(args)
    endpoint = Endpoint.from_settings(load_settings().llm)  # no model: one line, before the store opens
    streamed = False

    def on_token(text: str) -> None:
        nonlocal streamed
        streamed = True
        sys.stdout.write(text)
        sys.stdout.flush()

    with open_store(args) as mem:
        prepared = prepare(mem, args.question, active_wing=args.active_wing, wings=args.wings, k=args.k,
                           profile=args.profile, budget=args.budget, workspace=args.workspace, web_urls=args.web)
        ans = record(mem, answer(endpoint, prepared, None if args.json else on_token))
    if args.json:
        print(json.dumps(ans.to_dict(), ensure_ascii=False))
    else:
        if streamed:
            print()
        titles = {r.entry.id: r.entry.title for r in prepared.bundle.results}
        _print_citations(ans, titles)
    if ans.log_error:
        print(f"{PROG}: warning: the answer was not logged: {ans.log_error}", file=sys.stderr)
    if ans.error:
        what = "the answer is incomplete" if ans.text else "no answer"
        print(f"{PROG}: error: {ans.error}" + ("" if "incomplete" in ans.error else f" ({what})"), file=sys.stderr)
        return 1
    return 0
