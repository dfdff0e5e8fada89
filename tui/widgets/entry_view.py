"""How the entry screen shows an entry: the metadata the form does not edit, and its audit history."""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from memlens.attribution import describe as describe_client
from memlens.models import Entry, parse_ts

from .bars import TYPE_STYLE, age, bar
from .code import location

STATUS_STYLE = {"active": "green", "under_review": "bold yellow", "deprecated": "bold red"}
ACTION_STYLE = {"add": "green", "import": "green", "update": "yellow"}
HIDDEN_DIFF = {"updated_at", "created_at"}


def _when(ts: Any, now: datetime) -> str:
    return f"{parse_ts(ts):%Y-%m-%d %H:%M} · {age(parse_ts(ts), now)} ago"


def _short(value: Any, width: int = 34) -> str:
    text = json.dumps(value) if isinstance(value, dict) else "—" if value in (None, "") else " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def changed_span(before: str, after: str, context: int = 16, width: int = 90) -> tuple[str, str]:
    """The part of a long text that changed, with a little context on each side: a useful diff in a narrow pane."""
    a, b = " ".join(before.split()), " ".join(after.split())
    p = len(os.path.commonprefix([a, b]))
    s = len(os.path.commonprefix([a[p:][::-1], b[p:][::-1]]))
    lo = max(0, p - context)

    def cut(t: str) -> str:
        mid = t[lo: len(t) - max(0, s - context)]
        mid = ("…" if lo else "") + mid + ("…" if s > context else "")
        return mid if len(mid) <= width else mid[: width - 1] + "…"

    return cut(a), cut(b)


def metadata(info: dict[str, Any], now: datetime) -> RenderableType:
    """Everything about the entry that the form does not edit, plus vector freshness."""
    e: Entry = info["entry"]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=10, style="bold")
    grid.add_column(overflow="fold")
    grid.add_row("id", e.id)
    grid.add_row("where", f"{e.wing} / {e.room or '—'}")
    code_at = location(e, full=True)
    if code_at is not None:
        grid.add_row("code", Text(code_at, style="cyan"))
    grid.add_row("kind·type", Text.assemble(e.kind.value, " · ", (e.type.value, TYPE_STYLE.get(e.type.value, ""))))
    grid.add_row("status", Text(e.status.value, style=STATUS_STYLE.get(e.status.value, "")))
    grid.add_row("key", Text(e.key or "—"))
    grid.add_row("salience", Text.assemble(bar(e.salience, 1.0, width=12, style="magenta"), f" {e.salience:g}"))
    grid.add_row("overrides", Text(e.overrides or "—"))
    if info.get("overridden_by"):
        grid.add_row("hidden by", Text(", ".join(info["overridden_by"]) + " (override)", style="yellow"))
    grid.add_row("created", _when(e.created_at, now))
    grid.add_row("updated", _when(e.updated_at or e.created_at, now))
    grid.add_row("meta", Text(json.dumps(e.meta, ensure_ascii=False, sort_keys=True) if e.meta else "{}"))
    fresh = (Text("fresh ✓", style="green") if info.get("fresh")
             else Text("stale ✗ text or model changed since embedding", style="bold yellow"))
    grid.add_row("vector", Text.assemble(f"{(info.get('model') or '?').split('@')[0]} · ", fresh))
    grid.add_row("hash", f"{(info.get('content_hash') or '')[:16]}…")
    return grid


def audit_history(rows: list[dict[str, Any]], now: datetime) -> RenderableType:
    """Newest first: seq, when, action, and for updates each changed field before → after."""
    if not rows:
        return Text("No audit rows for this entry.", style="dim")
    parts: list[RenderableType] = []
    for row in rows:
        action = row["action"]
        head = Text.assemble((f"#{row['seq']} ", "bold"), (action, ACTION_STYLE.get(action, "")), "  ",
                             (_when(row["ts"], now), "dim"))
        if parts:
            parts.append(Text(""))
        parts.append(head)
        client = describe_client((row.get("detail") or {}).get("client"))
        if client:  # written by an agent through the MCP server (or another attributed client)
            parts.append(Text.assemble(("  by ", "dim"), (client, "cyan")))
        review = (row.get("detail") or {}).get("review")
        if isinstance(review, dict):  # a reviewer's action: ctrl+b on the entry screen undoes the newest one
            why = f" · {review['reason']}" if review.get("reason") else ""
            parts.append(Text(f"  review: {review.get('action')}{why}", style="magenta"))
        before, after = row.get("before") or {}, row.get("after") or {}
        if action == "update":
            changed = [k for k in after if k not in HIDDEN_DIFF and before.get(k) != after.get(k)]
            for k in changed:
                old, new = before.get(k), after.get(k)
                if isinstance(old, str) and isinstance(new, str) and max(len(old), len(new)) > 30:
                    old, new = changed_span(old, new)
                    parts.append(Text.assemble(f"  {k}: ", ("− " + old, "red")))
                    parts.append(Text.assemble(" " * (len(k) + 4), ("+ " + new, "green")))
                else:
                    parts.append(Text.assemble(f"  {k}: ", (_short(old), "red"), " → ", (_short(new), "green")))
            if not changed:
                parts.append(Text("  no field changed", style="dim"))
            if (row.get("detail") or {}).get("reembedded"):
                parts.append(Text("  ↻ re-embedded: the text the model sees changed", style="cyan"))
        elif action in ("add", "import"):
            parts.append(Text(f"  created in {after.get('wing')} as {after.get('type')} ({after.get('status')})", style="dim"))
    return Group(*parts)
