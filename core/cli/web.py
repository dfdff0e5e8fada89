"""``memlens web``: untrusted web text for a prompt, from URLs or a search.

    memlens [--store S] web URL... [--search QUERY] [--json] [--save --wing W [--room R]]

Prints one status line per URL, then the context: the pages' cleaned text
between delimiters carrying a per-call nonce, labelled untrusted. ``--json``
prints ``{"sources": [...], "context": "...", "untrusted": true}`` (plus
``"search"`` with ``--search`` and ``"saved"`` with ``--save``). ``--save``
stores each page's text as an entry of kind ``web``, status ``under_review``,
marked untrusted. Exit status: 0 when at least one page gave text, 1 when none
did, 2 for bad input. No store is needed unless ``--save`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from memlens.cli.common import store_arg
from memlens.errors import ValidationError


def register(sub: Any) -> None:
    """Add ``web`` to the top-level sub-parsers."""
    s = sub.add_parser("web", help="fetch pages (or search results) as untrusted context; --save stores them for review")
    store_arg(s)
    s.add_argument("urls", nargs="*", metavar="URL", help="http or https URLs to fetch")
    s.add_argument("--search", metavar="QUERY", help="also fetch the results of this search ([web] provider)")
    s.add_argument("--json", action="store_true",
                   help='print {"sources": [...], "context": "...", "untrusted": true}, with "search" (--search) '
                        'and "saved" (--save)')
    s.add_argument("--save", action="store_true", help="store each page's text as a web entry, under review")
    s.add_argument("--wing", help="with --save: the wing the entries go to")
    s.add_argument("--room", default="", help="with --save: the room (default none)")


def _check(args: argparse.Namespace) -> None:
    from memlens.vocab import NAME_RE

    if not args.urls and args.search is None:
        raise ValidationError("web needs at least one URL or --search QUERY")
    if args.save and not args.wing:
        raise ValidationError("--save needs --wing W (the wing the web entries go to)")
    if not args.save and (args.wing or args.room):
        raise ValidationError("--wing and --room only apply with --save")
    for name, value in (("--wing", args.wing), ("--room", args.room)):
        if value and not NAME_RE.match(value.strip()):
            raise ValidationError(f"{name} {value!r} is not a valid name (letters, digits, _ . -)")


def status_line(src: dict[str, Any]) -> str:
    code = str(src["status"]) if src["status"] is not None else "-"
    if src["ok"] and src["chars"]:
        extra = " (truncated)" if src["truncated"] else ""
        if src.get("flagged"):
            extra += f" ({src['flagged']} flagged line{'s' if src['flagged'] != 1 else ''})"
        title = f"  {json.dumps(src['title'], ensure_ascii=False)}" if src["title"] else ""
        return f"ok    {code:>3}  {src['chars']:>6} chars  {src['url']}{title}{extra}"
    return f"fail  {code:>3}  {src['url']}: {src['error'] or 'no text'}"


def cmd_web(args: argparse.Namespace) -> int:
    _check(args)
    from memlens.config import load_settings
    from memlens.web.context import gather_sync

    settings = load_settings()
    ctx = gather_sync(settings.web, urls=args.urls, query=args.search)
    saved: list[dict[str, Any]] | None = None
    if args.save and any(s.ok and s.text for s in ctx.texts):
        from memlens.cli.common import open_store
        from memlens.web.save import save_sources

        with open_store(args, create=True) as mem:
            saved = save_sources(mem, ctx, wing=args.wing.strip(), room=(args.room or "").strip())
    got_text = any(s["ok"] and s["chars"] for s in ctx.sources)
    if args.json:
        out = ctx.to_json()
        if args.save:
            out["saved"] = saved or []
        print(json.dumps(out, ensure_ascii=False))
    else:
        if ctx.search is not None:
            s = ctx.search
            found = f"{s['results']} result{'' if s['results'] == 1 else 's'}"
            print(f"search ({s['provider']}): " + (found if s["ok"] else f"failed: {s['error']}"))
        for src in ctx.sources:
            print(status_line(src))
        if ctx.context:
            print()
            print(ctx.context)
        if saved:
            new = sum(1 for s in saved if s["created"])
            print(f"\nsaved {new} new web entr{'y' if new == 1 else 'ies'} to wing {args.wing.strip()} (under review, untrusted)"
                  + (f"; {len(saved) - new} already stored" if len(saved) > new else "")
                  + ": " + ", ".join(s["id"] for s in saved))
    if args.save and not saved:
        print("memlens: nothing saved: no page gave text", file=sys.stderr)
    if not got_text and not args.json:
        print("memlens: no page gave text", file=sys.stderr)
    return 0 if got_text else 1

