"""``memlens lint``: the review's evidence over the whole store, as findings with a severity.

Kinds (severity):

* ``duplicate`` (warning in one wing, info across wings, where search already merges the same text):
  clusters of near-duplicates, the review's rule (``memlens.review.evidence.duplicates``);
* ``authority`` (info): a note or pattern near-duplicating an invariant or decision;
* ``conflict`` (warning): invariants and decisions of two wings on the same subject (cosine at least
  ``[retrieval] conflict_similarity``, below the duplicate threshold) that no ``overrides`` links, or
  entries of two wings sharing a key with different text;
* ``overrides`` (error when the target is missing, warning when it is deprecated);
* ``unused`` (info): no logged search of the last ``unused_days`` returned the entry although its wing
  was searched (entries younger than that are left out);
* ``stale_vector`` (warning): the stored vector was not made by the store's model from the text as it is;
* ``too_long`` (warning for an invariant, which is never dropped, info otherwise): the entry alone is
  longer than ``[review] budget`` tokens, so no context of that budget keeps it whole;
* ``pending`` (warning): under review for longer than ``pending_days``.

Deprecated entries take part only as override targets. Everything is read through the store's
interface in two passes (rows with vectors, then the stamps), so both backends lint alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from memlens.models import AUTHORITY, content_hash, embed_text, format_ts
from memlens.review.evidence import RULES, SAME_KEY, SAME_SUBJECT, Thresholds, duplicates
from memlens.review.pairs import similar_pairs
from memlens.store.rows import CREATED_AT, ID, KEY, KIND, OVERRIDES, STATUS, TEXT, TITLE, TYPE, UPDATED_AT, WING
from memlens.store.writes import override_cycle

if TYPE_CHECKING:
    from memlens.config import ReviewConfig

SEVERITIES = ("info", "warning", "error")
LINE_COST = 30  # tokens of an entry's line in a context beyond its title and text (markup, wing, id, flags)


class LintSource(Protocol):
    """The store roles lint reads."""

    @property
    def model_id(self) -> str: ...
    def export_rows(self, wing: str | None, with_vectors: bool) -> Iterator[tuple[tuple[Any, ...], bytes | None, str | None]]: ...
    def stamp_rows(self, wing: str | None = None) -> list[tuple[Any, ...]]: ...
    def retrieval_count_rows(self, wing: str | None = None, since: str | None = None) -> list[tuple[Any, ...]]: ...


def finding(kind: str, severity: str, entries: list[str], detail: str, **numbers: Any) -> dict[str, Any]:
    return {"kind": kind, "severity": severity, "entries": entries, "detail": detail, **numbers}


class _Live:
    """The entries search can return (not deprecated): their columns and unit vectors, in store order."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.vecs: list[np.ndarray] = []

    def matrix(self) -> np.ndarray:
        return np.stack(self.vecs).astype(np.float32) if self.vecs else np.zeros((0, 1), np.float32)


def _clusters(pairs: list[tuple[int, int, float]]) -> list[tuple[list[int], float]]:
    """Connected groups of the pairs (union-find), each with its highest similarity."""
    parent: dict[int, int] = {}

    def root(i: int) -> int:
        parent.setdefault(i, i)
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j, _ in pairs:
        parent[root(i)] = root(j)
    members: dict[int, set[int]] = {}
    top: dict[int, float] = {}
    for i, j, s in pairs:
        r = root(i)
        members.setdefault(r, set()).update((i, j))
        top[r] = max(top.get(r, 0.0), s)
    return [(sorted(m), top[r]) for r, m in members.items()]


def _similarity_findings(live: _Live, th: Thresholds) -> tuple[list[dict[str, Any]], str]:
    rows, vecs = live.rows, live.matrix()
    close, method = similar_pairs(vecs, th.duplicate)
    pairs = [(i, j, s) for i, j, s in close if duplicates(s, _text(rows[i]), _text(rows[j]), th)[0]]
    twins = {(i, j) for i, j, _ in pairs}
    out = []
    for members, top in _clusters(pairs):
        ids = [rows[k][ID] for k in members]
        wings = sorted({rows[k][WING] for k in members})
        out.append(finding("duplicate", "warning" if len(wings) == 1 else "info", ids,
                           f"{len(ids)} near-duplicates in {', '.join(wings)}: keep one (merge them or edit one)",
                           similarity=round(top, 4), wings=wings))
    for i, j, s in pairs:
        hi, lo = sorted((i, j), key=lambda k: AUTHORITY[rows[k][TYPE]])
        if rows[hi][TYPE] in RULES and AUTHORITY[rows[lo][TYPE]] > AUTHORITY[rows[hi][TYPE]]:
            out.append(finding("authority", "info", [rows[lo][ID], rows[hi][ID]],
                               f"a {rows[lo][TYPE]} restating the {rows[hi][TYPE]} {rows[hi][ID]}", similarity=round(s, 4)))
    rules = [k for k, r in enumerate(rows) if r[TYPE] in RULES]
    if len(rules) > 1:
        rule_pairs, _ = similar_pairs(vecs[rules], th.conflict)
        for a, b, s in rule_pairs:
            ra, rb = rows[rules[a]], rows[rules[b]]
            # rules of one wing on one subject mostly refine each other: that question is asked of a new write only
            # (``memlens review``); a duplicate pair is reported as one
            if (ra[WING] == rb[WING] or (rules[a], rules[b]) in twins or (ra[KEY] and ra[KEY] == rb[KEY])
                    or ra[OVERRIDES] == rb[ID] or rb[OVERRIDES] == ra[ID]):  # a shared key: the key's rule decides
                continue
            out.append(finding("conflict", "warning", [ra[ID], rb[ID]], "same subject, neither overrides the other: "
                               "read both", rule=SAME_SUBJECT, similarity=round(s, 4)))
    return out, method


def _text(row: tuple[Any, ...]) -> str:
    return f"{row[TITLE]}\n{row[TEXT]}"


def _key_conflicts(live: _Live, th: Thresholds) -> list[dict[str, Any]]:
    by_key: dict[str, list[int]] = {}
    for k, r in enumerate(live.rows):
        if r[KEY]:
            by_key.setdefault(r[KEY], []).append(k)
    out = []
    for key, members in by_key.items():
        for n, a in enumerate(members):
            for b in members[n + 1 :]:
                ra, rb = live.rows[a], live.rows[b]
                if ra[WING] == rb[WING] or ra[TEXT] == rb[TEXT] or ra[OVERRIDES] == rb[ID] or rb[OVERRIDES] == ra[ID]:
                    continue
                s = float(live.vecs[a] @ live.vecs[b])
                if s >= th.same_key and ra[KIND] == rb[KIND]:
                    continue  # the same fact in two wings: search merges them
                out.append(finding("conflict", "warning", [ra[ID], rb[ID]], f"the same key {key!r} in "
                                   f"{ra[WING]} and {rb[WING]} with different text, no override", rule=SAME_KEY,
                                   similarity=round(s, 4)))
    return out


def lint(src: LintSource, th: Thresholds, config: ReviewConfig, *, now: datetime,
         count_tokens: Callable[[str], int] | None = None) -> dict[str, Any]:
    """``{"findings": [{kind, severity, entries, detail, ...}], "summary": {...}}``, the most severe first."""
    t0 = time.perf_counter()
    status: dict[str, str] = {}
    live = _Live()
    findings: list[dict[str, Any]] = []
    pending_before = format_ts(now - timedelta(days=config.pending_days))
    overrides: list[tuple[str, str]] = []
    long: list[tuple[str, str, str]] = []
    for row, blob, _ in src.export_rows(None, True):
        status[row[ID]] = row[STATUS]
        if row[STATUS] == "deprecated":
            continue
        if row[OVERRIDES]:
            overrides.append((row[ID], row[OVERRIDES]))
        if row[STATUS] == "under_review" and (row[UPDATED_AT] or row[CREATED_AT]) < pending_before:
            findings.append(finding("pending", "warning", [row[ID]], f"under review since {row[UPDATED_AT]}: "
                                    "accept, reject or deprecate it"))
        if len(row[TITLE]) + len(row[TEXT]) + LINE_COST > config.budget:  # a word piece is at least a character
            long.append((row[ID], row[TYPE], f"- **{row[TITLE]}**: {row[TEXT]} _({row[WING]} · {row[ID]})_"))
        vec = np.frombuffer(blob, "<f4") if blob is not None else None
        if vec is not None and float(np.abs(vec).sum()) > 0:
            live.rows.append(row)
            live.vecs.append(vec)
    found, method = _similarity_findings(live, th)
    findings += found + _key_conflicts(live, th)
    links = dict(overrides)
    cycles = set()  # each cycle once, from its smallest id
    for eid in links:
        c = override_cycle(eid, links.get)
        if c is not None:
            at = c.index(min(c[:-1]))
            cycles.add((*c[at:-1], *c[:at]))
    for ids in sorted(cycles):
        findings.append(finding("overrides", "error", list(ids), f"{' -> '.join([*ids, ids[0]])} is a cycle of "
                                "overrides: each entry hides the next, so search returns none of them"))
    for eid, target in overrides:
        if target not in status:
            findings.append(finding("overrides", "error", [eid, target], f"{eid} overrides {target}, which does not exist"))
        elif status[target] == "deprecated":
            findings.append(finding("overrides", "warning", [eid, target],
                                    f"{eid} overrides {target}, which is deprecated: the override hides nothing"))
    findings += _unused(src, live, config, now)
    findings += _stale(src, status)
    for eid, type_, line in long:
        tokens = count_tokens(line) if count_tokens is not None else len(line)  # without a tokenizer: its bound
        if tokens > config.budget:
            findings.append(finding("too_long", "warning" if type_ == "invariant" else "info", [eid],
                                    f"{tokens} tokens: longer than a {config.budget}-token context can hold "
                                    + ("(invariants are never dropped)" if type_ == "invariant" else "whole"), tokens=tokens))
    findings.sort(key=lambda f: (-SEVERITIES.index(f["severity"]), f["kind"], f["entries"]))
    summary: dict[str, Any] = {"entries": len(status), "checked": len(live.rows), "pairs": method,
                               "seconds": round(time.perf_counter() - t0, 3)}
    for key in ("severity", "kind"):
        counts: dict[str, int] = {}
        for f in findings:
            counts[f[key]] = counts.get(f[key], 0) + 1
        summary[f"by_{key}"] = counts
    return {"findings": findings, "summary": summary}


def _unused(src: LintSource, live: _Live, config: ReviewConfig, now: datetime) -> list[dict[str, Any]]:
    since = format_ts(now - timedelta(days=config.unused_days))
    old = {r[ID] for r in live.rows if r[CREATED_AT] < since}
    out = []
    for eid, wing, _type, _title, searched, returned in src.retrieval_count_rows(None, since):
        if eid in old and searched and not returned:
            out.append(finding("unused", "info", [eid], f"no logged search of the last {config.unused_days:g} days "
                               f"returned it, while {searched} searched {wing}", searched=int(searched)))
    return out


def _stale(src: LintSource, status: dict[str, str]) -> list[dict[str, Any]]:
    model = src.model_id
    out = []
    for _rowid, eid, _wing, title, text, digest, made_by in src.stamp_rows():
        if status.get(eid, "deprecated") == "deprecated":
            continue  # not retrieved: its vector does not matter until it is restored (reembed covers it then)
        now_hash = content_hash(embed_text(title, text))
        if made_by != model or digest != now_hash:
            why = f"made by {made_by}, the store's model is {model}" if made_by != model else "made from an older text"
            out.append(finding("stale_vector", "warning", [eid], f"its vector was {why}: memlens reembed"))
    return out


def exit_status(report: dict[str, Any], severity: str) -> int:
    """1 when a finding is at or above ``severity``."""
    floor = SEVERITIES.index(severity)
    return int(any(SEVERITIES.index(f["severity"]) >= floor for f in report["findings"]))
