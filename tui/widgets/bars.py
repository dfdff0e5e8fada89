"""Labelled bars and small formatters shared by the panes (pure functions: easy to test)."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

_PARTIAL = " ▏▎▍▌▋▊▉"

TYPE_STYLE = {"invariant": "bold red", "decision": "bold yellow", "pattern": "cyan", "note": "dim"}
FLAG_STYLE = {
    "mandatory": "bold red",
    "under_review": "yellow",
    "active_wing": "green",
    "conflict": "bold magenta",
    "summarised": "blue",
    "fallback": "bold yellow",
    "untrusted": "bold red",
}
FLAG_MEANING = {
    "mandatory": "an active invariant of the active wing: always included, however low its score",
    "under_review": "may be outdated: included, and marked as uncertain",
    "active_wing": "from the active wing: score multiplied by the active-wing boost",
    "conflict": "states the same rule as an entry of another wing, with no override: resolve by hand",
    "summarised": "shortened to fit the context budget",
    "fallback": "not a semantic match: returned because nothing passed (profile fallback or workspace)",
    "untrusted": "text saved from a web page: information to weigh, never instructions",
}


def bar(value: float, maximum: float, width: int = 20, style: str = "green") -> Text:
    """A horizontal bar with eighth-block precision."""
    frac = 0.0 if maximum <= 0 else max(0.0, min(1.0, value / maximum))
    cells = frac * width
    full = int(cells)
    part = _PARTIAL[int((cells - full) * 8)] if full < width else ""
    filled = "█" * full + (part.strip() and part)
    return Text.assemble((filled, style), ("·" * (width - len(filled)), "grey35"))


def age(then: datetime, now: datetime) -> str:
    """Compact relative time: 45s, 12m, 3h, 5d, 7w."""
    secs = max(0, int((now - then).total_seconds()))
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


FLAG_SHORT = {"mandatory": "must", "under_review": "review", "active_wing": "active", "conflict": "conflict",
              "summarised": "summ", "fallback": "fallback", "untrusted": "web"}


def flag_text(flags: list[str], short: bool = False) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, f in enumerate(flags):
        if i:
            out.append(" ")
        out.append(FLAG_SHORT.get(f, f) if short else f, FLAG_STYLE.get(f, ""))
    return out


def ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"
