"""Replay logged retrievals against today's store (or proposed settings) and diff the ranked lists.

Each logged retrieval is run again with the arguments it was made with (query, active wing, wings, k,
profile, budget, user), the cache bypassed, and its new ranked list compared with the logged one:

* ``entered``: ids in the new list only; ``left``: ids in the logged list only;
* ``moved``: ids in both at another rank, ``{"id", "from", "to"}`` (1-based ranks);
* ``why``: for each of them, the reason: for an entry that left, the stage that dropped it in the new
  trace, or that it was deleted or deprecated; for a moved one, the score component that changed most
  (the logged components against the new trace's);
* ``before`` / ``after``: the two ranked lists of ids;
* ``tau``: Kendall's tau-b between the two rankings over the union of both lists, an id missing from a
  list ranked after all of that list's ids (tied with the other missing ones); 1.0 means the same order.
  The summary's ``kendall_tau`` is its mean over the replayed queries (``null`` when none is defined).

Replays are never logged as retrievals: they run on a copy of the engine whose audit level is
``writes``, so replaying the log does not grow the log, move the access counts or replay itself.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError, ValidationError
from memlens.models import format_ts, parse_ts, utcnow
from memlens.replay import storage

if TYPE_CHECKING:
    from memlens.replay.context import ReplayContext

DEFAULT_LAST = 20
EPS = 1e-6


def parse_since(text: str) -> str:
    """``30m``, ``12h``, ``7d`` (ago) or an ISO-8601 date/time, as the audit's timestamp text."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if m:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[m.group(2)]
        try:
            return format_ts(utcnow() - timedelta(**{unit: float(m.group(1))}))
        except OverflowError:  # an age older than the calendar (99999999999d): everything there is
            return format_ts(datetime(1, 1, 1, tzinfo=timezone.utc))
    try:
        return format_ts(parse_ts(text))
    except (ValueError, TypeError):
        raise ValidationError(f"--since: {text[:40]!r} is neither a time (ISO-8601) nor an age like 30m, 12h, 7d") from None


def _value(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text
    except RecursionError:
        raise ValidationError(f"--set: {text[:40]!r}…: invalid JSON: nested too deeply") from None


def apply_sets(settings: Any, assignments: list[str]) -> Any:
    """A copy of ``settings`` with each ``section.key=value`` (nested keys allowed) applied and checked."""
    if not assignments:
        return settings
    from pydantic import ValidationError as PydanticError

    from memlens.config import Settings
    from memlens.profiles import check_profiles
    from memlens.setting_checks import describe_error

    data = settings.model_dump()
    for a in assignments:
        path, sep, raw = a.partition("=")
        parts = [p.strip() for p in path.split(".")]
        if not sep or len(parts) < 2 or not all(parts):
            raise ValidationError(f"--set {a[:60]!r}: expected section.key=value, e.g. retrieval.weights.recency=0.2")
        node = data
        for p in parts[:-1]:
            if not isinstance(node.get(p, {}), dict):
                raise ValidationError(f"--set {path}: {p!r} is not a table")
            node = node.setdefault(p, {})
        node[parts[-1]] = _value(raw.strip())
    try:
        new = Settings.model_validate(data)
    except PydanticError as exc:
        err = exc.errors()[0]
        raise ValidationError(describe_error(dict(err), Settings, tuple(err["loc"]), "from --set")) from None
    check_profiles(new.profiles, lambda loc: "from --set")
    return new


def kendall_tau(old: list[str], new: list[str]) -> float | None:
    """Kendall's tau-b of two rankings over their union (missing ids tied after the rest); None if undefined."""
    if old == new:
        return 1.0
    union = list(dict.fromkeys([*old, *new]))
    ra = {x: (old.index(x) if x in old else len(old)) for x in union}
    rb = {x: (new.index(x) if x in new else len(new)) for x in union}
    conc = disc = ties_a = ties_b = 0
    for i, x in enumerate(union):
        for y in union[i + 1 :]:
            da, db = ra[x] - ra[y], rb[x] - rb[y]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return round((conc - disc) / denom, 6) if denom else None


def _left_reason(eid: str, bundle: Any, states: dict[str, str]) -> str:
    for d in bundle.trace.dropped:
        if d.id == eid:
            return f"dropped at stage {d.stage}: {d.detail}" if d.detail else f"dropped at stage {d.stage}"
    state = states.get(eid)
    if state is None:
        return "deleted"
    if state == "deprecated":
        return "deprecated (left out unless the query asks for status=deprecated)"
    return "no longer among the candidates (memlens explain QUERY --id ID says why)"


WEIGHTED = ("relevance", "recency", "salience")


def _parts(hit: dict[str, Any] | Any, weights: dict[str, float]) -> dict[str, float]:
    """What each component adds to a score: weight × value for the weighted ones, the value for boost and rerank."""
    get = hit.get if isinstance(hit, dict) else (lambda c: getattr(hit, c, None))
    out = {c: float(weights.get(c, 1.0 if c == "relevance" else 0.0)) * float(get(c) or 0.0) for c in WEIGHTED}
    out.update({c: float(get(c) or 0.0) for c in ("boost", "rerank")})
    return out


def _component_change(old: dict[str, Any], comps: Any, old_w: dict[str, float], new_w: dict[str, float]) -> str:
    """The component of the score that changed most between the logged hit and the new result."""
    before, now = _parts(old, old_w), _parts(comps, new_w)
    name = max(before, key=lambda c: abs(now[c] - before[c]))
    if abs(now[name] - before[name]) <= EPS:
        return "same score; other entries entered, left or moved around it"
    what = f"{name} × weight" if name in WEIGHTED and old_w.get(name) != new_w.get(name) else name
    return f"{what} {before[name]:.3f} → {now[name]:.3f}"


def diff(entry: dict[str, Any], bundle: Any, mem: ReplayContext) -> dict[str, Any]:
    """The ranking diff of one logged retrieval against its replay ``bundle``."""
    old_hits = entry["hits"]
    old = [h["id"] for h in old_hits]
    new = [r.entry.id for r in bundle.results]
    entered = [i for i in new if i not in old]
    left = [i for i in old if i not in new]
    moved = [{"id": i, "from": old.index(i) + 1, "to": new.index(i) + 1} for i in new
             if i in old and old.index(i) != new.index(i)]
    why: dict[str, str] = {}
    states = storage.entry_states(mem, left) if left else {}
    for i in left:
        why[i] = _left_reason(i, bundle, states)
    results = {r.entry.id: r for r in bundle.results}
    by_id = {h["id"]: h for h in old_hits}
    old_w = entry["request"].get("weights_used") or bundle.trace.weights
    for m in moved:
        why[m["id"]] = _component_change(by_id[m["id"]], results[m["id"]].components, old_w, bundle.trace.weights)
    since = entry.get("baseline_ts") or entry["ts"]  # an impact preview's baseline ran just before the change
    after_what = "by the change" if entry.get("baseline_ts") else "after the logged retrieval"
    for i in entered:
        r = results[i]
        stamp = r.entry.updated_at or r.entry.created_at
        later = stamp is not None and format_ts(stamp) > since
        why[i] = (f"added or edited {after_what} ({format_ts(stamp)}); " if later else "") + \
            f"now rank {r.rank} with score {r.score:.3f}"
    return {"seq": entry["seq"], "ts": entry["ts"], "query": entry["request"].get("query", ""),
            "changed": bool(entered or left or moved), "entered": entered, "left": left, "moved": moved,
            "top1_changed": (old[:1] != new[:1]), "tau": kendall_tau(old, new), "why": why, "before": old, "after": new}


def run_request(mem: ReplayContext, request: dict[str, Any]) -> Any:
    """The search a logged request describes, run again (cache bypassed)."""
    args = {k: request.get(k) for k in ("active_wing", "wings", "k", "budget", "user")}
    return mem.search(request.get("query", ""), profile=request.get("profile") or "memory", use_cache=False, **args)


def replay_entries(mem: ReplayContext, entries: list[dict[str, Any]], on_bundle: Any = None) -> list[dict[str, Any]]:
    """Replay ``entries`` (from ``storage.logged``) on ``mem`` as it is: one diff each (``on_bundle(bundle)``: each new run)."""
    out = []
    for e in entries:
        try:
            bundle = run_request(mem, e["request"])
        except MemlensError as exc:
            old = [h["id"] for h in e["hits"]]
            out.append({"seq": e["seq"], "ts": e["ts"], "query": e["request"].get("query", ""), "changed": True,
                        "entered": [], "left": old, "moved": [], "top1_changed": bool(old), "tau": None,
                        "why": {i: f"the query fails now: {exc}" for i in old}, "error": str(exc), "before": old,
                        "after": []})
            continue
        if on_bundle is not None:
            on_bundle(bundle)
        out.append(diff(e, bundle, mem))
    return out


def summarise(queries: list[dict[str, Any]], sets: list[str] | None = None) -> dict[str, Any]:
    taus = [q["tau"] for q in queries if q["tau"] is not None]
    return {"replayed": len(queries), "changed": sum(q["changed"] for q in queries),
            "top1_changed": sum(q["top1_changed"] for q in queries),
            "kendall_tau": round(sum(taus) / len(taus), 6) if taus else None,
            "errors": sum(1 for q in queries if "error" in q), "settings": list(sets or [])}


def select(mem: ReplayContext, *, last: int | None = None, since: str | None = None,
           query: str | None = None) -> list[dict[str, Any]]:
    if last is None and since is None and query is None:
        last = DEFAULT_LAST
    return storage.logged(mem, last=last, since=parse_since(since) if since else None, query=query)


def replay(mem: ReplayContext, *, last: int | None = None, since: str | None = None, query: str | None = None,
           sets: list[str] | None = None, on_bundle: Any = None) -> dict[str, Any]:
    """``{"queries": [...], "summary": {...}}`` for the selected logged retrievals (see the module's doc)."""
    entries = select(mem, last=last, since=since, query=query)
    runner = storage.with_settings(mem, apply_sets(mem.settings, sets or []))
    queries = replay_entries(runner, entries, on_bundle)
    return {"queries": queries, "summary": summarise(queries, sets)}
