"""Deterministic task summaries: no model, same input → same text, so an agent's context is reproducible.

Split from ``memlens.working.tasks`` so the pure text logic stands alone and is easy to test.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from enum import Enum
from typing import Any


class Outcome(str, Enum):
    success = "success"
    failure = "failure"


_OUTCOME_ALIASES = {
    "success": "success", "succeeded": "success", "ok": "success", "passed": "success", "pass": "success",
    "failure": "failure", "failed": "failure", "fail": "failure", "error": "failure",
}  # fmt: skip


def _one_line(text: str, limit: int | None = None) -> str:
    s = " ".join(str(text).split())
    if limit is not None and len(s) > limit:
        s = s[: limit - 1].rstrip() + "…"
    return s


def _count(v: Any) -> int | None:
    """A non-negative integer count, or None (bools and fractions are not counts)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and v >= 0:
        return v
    if isinstance(v, float) and v >= 0 and math.isfinite(v) and v.is_integer():
        return int(v)
    return None


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) and v >= 0 else None


def _tests_part(v: Any) -> str | None:
    if not isinstance(v, Mapping):
        return None
    counts = {k: _count(v.get(k)) for k in ("passed", "failed", "errors", "skipped")}
    if all(c is None for c in counts.values()):
        return None
    out = [f"{counts['passed'] or 0} passed", f"{counts['failed'] or 0} failed"]
    out += [f"{counts[k]} {k}" for k in ("errors", "skipped") if counts[k]]
    return "tests: " + ", ".join(out)


def _checks_part(v: Any) -> str | None:
    results: dict[str, bool] = {}
    if isinstance(v, Mapping):
        results = {str(k): bool(ok) for k, ok in v.items() if isinstance(ok, bool)}
    elif isinstance(v, list):
        for item in v:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("passed"), bool):
                name = _one_line(item["name"], 40)
                results[name] = results.get(name, True) and item["passed"]
    if not results:
        return None
    failed = sorted(n for n, ok in results.items() if not ok)
    text = f"checks: {len(results) - len(failed)}/{len(results)} passed"
    if failed:
        shown = ", ".join(failed[:3]) + (f" +{len(failed) - 3} more" if len(failed) > 3 else "")
        text += f" (failed: {shown})"
    return text


def _lint_part(v: Any) -> str | None:
    if isinstance(v, bool):
        return "lint ok" if v else "lint failed"
    n = _count(v)
    if n is None and isinstance(v, Mapping):
        n = _count(v.get("issues", v.get("warnings")))
        if n is None and isinstance(v.get("ok"), bool):
            return "lint ok" if v["ok"] else "lint failed"
    if n is None:
        return None
    return "lint ok" if n == 0 else f"lint: {n} issue{'s' * (n != 1)}"


def _coverage_part(v: Any) -> str | None:
    x = _number(v)
    if x is None or x > 100:
        return None
    pct = x * 100 if x <= 1 else x
    return f"coverage {pct:.0f}%"


def _errors_part(v: Any) -> str | None:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list):
        return None
    errors = [_one_line(e) for e in v if isinstance(e, str) and e.strip()]
    if not errors:
        return None
    return f"errors: {len(errors)} (first: {json.dumps(_one_line(errors[0], 80), ensure_ascii=False)})"


def _notes_part(v: Any) -> str | None:
    if isinstance(v, list):
        v = " / ".join(_one_line(n) for n in v if isinstance(n, str) and n.strip())
    if not isinstance(v, str) or not v.strip():
        return None
    return "notes: " + _one_line(v, 120)


def _duration_part(report: Mapping[str, Any]) -> str | None:
    s = _number(report.get("duration_s"))
    if s is None:
        ms = _number(report.get("duration_ms"))
        s = None if ms is None else ms / 1000
    return None if s is None else f"took {s:.1f} s"


def report_digest(report: Mapping[str, Any] | None) -> str:
    """The part of a summary derived from a validation report ("" if nothing is understood).

    Understood fields (any subset, in any key order; everything else is ignored):

    * ``tests``: ``{"passed": int, "failed": int, "errors": int, "skipped": int}``
      → ``tests: 12 passed, 1 failed, 2 skipped``
    * ``checks``: ``[{"name": str, "passed": bool}, ...]`` or ``{name: bool}``
      → ``checks: 3/4 passed (failed: lint)`` (failed names sorted)
    * ``lint``: bool, an issue count, or ``{"ok": bool}`` / ``{"issues": int}``
      → ``lint ok`` / ``lint: 3 issues``
    * ``coverage``: a fraction (0..1) or a percentage → ``coverage 87%``
    * ``errors``: a list of messages (or one string) → ``errors: 2 (first: "...")``
    * ``notes``: a string or a list of strings → ``notes: ...`` (120 characters)
    * ``duration_s`` or ``duration_ms``: a number → ``took 12.3 s``

    A known field of another shape is ignored, never an error.
    """
    if not report or not isinstance(report, Mapping):
        return ""
    parts = [
        _tests_part(report.get("tests")),
        _checks_part(report.get("checks")),
        _lint_part(report.get("lint")),
        _coverage_part(report.get("coverage")),
        _errors_part(report.get("errors")),
        _notes_part(report.get("notes")),
        _duration_part(report),
    ]
    return "; ".join(p for p in parts if p)


def summarize(intent: str, outcome: str | Outcome, validation_report: Mapping[str, Any] | None = None) -> str:
    """Deterministic one-line summary: ``<intent> — <outcome>[; <report digest>]``.

    A pure function of its arguments (no model, no clock): the same input gives
    the same text, and the key order of the report does not matter.
    """
    value = outcome.value if isinstance(outcome, Outcome) else _OUTCOME_ALIASES.get(str(outcome).strip().lower(), outcome)
    head = f"{_one_line(intent)} — {Outcome(value).value}"
    digest = report_digest(validation_report)
    return f"{head}; {digest}" if digest else head
