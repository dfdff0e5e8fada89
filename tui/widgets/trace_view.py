"""The retrieval trace: why this entry, and what the call did (rendered from engine data only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from .bars import FLAG_MEANING, FLAG_STYLE, TYPE_STYLE, bar, ms

if TYPE_CHECKING:
    from memlens.trace import Bundle, Result, Trace

STAGE_ORDER = ("parse", "embed", "vector", "lexical", "score", "rerank", "policy", "budget")


def _num(v: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if v is None else fmt.format(v)


def vector_note(v: dict, store_model: str) -> str:
    """Why a result's vector is stale: made by another model, from another text, or both."""
    why = [] if v.get("model") == store_model else [f"made by {v.get('model')}, the store's model is {store_model}"]
    if not v.get("hash_matches"):
        why.append("the text changed since it was embedded")
    return "; ".join(why)


def result_section(r: Result, bundle: Bundle) -> RenderableType:
    e, c, t = r.entry, r.components, bundle.trace
    head = Text.assemble(
        (f"#{r.rank} ", "bold"), (e.title, "bold"), "  ", (e.type.value, TYPE_STYLE.get(e.type.value, "")),
        f" · {e.wing}/{e.room or '-'} · {e.status.value} · ", (e.id, "dim"),
    )
    norm = t.normalisation.get(e.kind.value) or t.normalisation.get("pool") or {}
    sb, bb = norm.get("similarity"), norm.get("bm25")
    fus = t.fusion
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=11, style="bold")
    grid.add_column(width=20)
    grid.add_column()
    grid.add_row("similarity", bar(c.similarity or 0, 1.0, style="green"),
                 f"{_num(c.similarity)} raw cosine · knn rank {c.vector_rank or '—'} · norm {c.similarity_norm:.3f}"
                 + (f" in [{sb[0]:.3f}, {sb[1]:.3f}] ({e.kind.value})" if sb else ""))
    grid.add_row("bm25", bar(c.bm25_norm, 1.0, style="blue"),
                 f"{_num(c.bm25, '{:.2f}')} raw · fts rank {c.bm25_rank or '—'} · norm {c.bm25_norm:.3f}"
                 + (f" in [{bb[0]:.2f}, {bb[1]:.2f}]" if bb else ""))
    rel_note = f"{fus.get('vector_weight', 0.8)}·sim_n + {fus.get('lexical_weight', 0.2)}·bm25_n"
    if c.year_boost is not None:
        rel_note += f" + year {c.year_boost:+.3f}"
    if c.summary is not None:
        rel_note = f"conversation: 0.6·raw + 0.3·summary({c.summary:.3f}) + 0.1·recency"
    grid.add_row("relevance", bar(c.relevance, 1.0, style="green"), f"{c.relevance:.3f} = {rel_note}")
    grid.add_row("recency", bar(c.recency, 1.0, style="yellow"),
                 f"{c.recency:.3f} · {c.age_days:.1f} days old · half-life {fus.get('half_life_days', 30):g} d")
    grid.add_row("salience", bar(c.salience, 1.0, style="magenta"), f"{c.salience:.3f}")
    grid.add_row("boost", bar(c.boost, 2.0, style="cyan"), f"×{c.boost:g}" + ("  (active wing)" if c.boost != 1 else ""))
    if c.rerank is not None:
        grid.add_row("rerank", bar(c.rerank, 1.0, style="red"), f"{c.rerank:.3f} · was rank {c.rank_before_rerank}")
    w = t.weights
    formula = (f"({w.get('relevance', 1):g}·{'rerank' if c.rerank is not None else 'relevance'} + {w.get('recency', 0):g}·recency"
               f" + {w.get('salience', 0):g}·salience) × {c.boost:g}")
    grid.add_row("final", bar(r.score, max(1.0, r.score), style="bold green"), f"{r.score:.3f} = {formula}")
    parts: list[RenderableType] = [head, grid]
    for f in r.flags:
        parts.append(Text.assemble(("  ● ", FLAG_STYLE.get(f, "")), (f, FLAG_STYLE.get(f, "")), f": {FLAG_MEANING.get(f, '')}"))
    if r.conflicts_with:
        whys = {other: _why(t, r.entry.id, other) for other in r.conflicts_with}
        parts.append(
            Text(
                f"  conflicts with {', '.join(o + (f' ({w})' if w else '') for o, w in whys.items())}", style="magenta"
            )
        )
    if r.vector is not None and not r.vector["fresh"]:
        parts.append(Text(f"  ⟳ stale vector: {vector_note(r.vector, t.model)} (memlens reembed)", style="yellow"))
    if r.hides:
        parts.append(Text(f"  hides {', '.join(r.hides)} (explicit override)", style="dim"))
    if len(r.found_in) > 1:
        parts.append(Text(f"  found in wings {', '.join(r.found_in)} (deduplicated)", style="dim"))
    return Group(*parts)


def call_section(bundle: Bundle, show_dropped: bool) -> RenderableType:
    t = bundle.trace
    lat = t.latency_ms
    top = max([lat.get(s, 0.0) for s in STAGE_ORDER] + [0.001])
    stages = Table.grid(padding=(0, 1))
    stages.add_column(width=8)
    stages.add_column(width=16)
    stages.add_column(justify="right", width=7)
    for s in STAGE_ORDER:
        stages.add_row(s, bar(lat.get(s, 0.0), top, width=16, style="cyan"), ms(lat.get(s, 0.0)))
    stages.add_row(Text("total", style="bold"), "", Text(ms(lat.get("total", 0.0)), style="bold"))
    info: list[RenderableType] = []
    cache = t.cache
    if t.cache_hit:
        info.append(Text.assemble(("cache hit", "bold green"), f" · age {cache.age_s or 0:.1f}s of {cache.ttl_s:g}s"))
    elif not cache.enabled:
        info.append(Text("cache off", style="dim"))
    else:
        line = Text.assemble(("cache miss", "bold yellow"))
        inv = cache.invalidated_by
        if inv and inv.get("reason") == "ttl":
            line.append(f" · previous entry expired after {inv.get('age_s', 0):.0f}s")
        elif inv:
            line.append(f" · invalidated by {inv.get('action')} of {inv.get('entry_id')} in {inv.get('wing')} at {inv.get('ts')}")
        info.append(line)
    info.append(Text(f"profile {t.profile} · model {t.model}", style="dim"))
    info.append(Text("wings: " + "  ".join(f"{w} {t.results_per_wing.get(w, 0)}" for w in t.wings_searched)))
    info.append(Text("kinds: " + ("  ".join(f"{k} {n}" for k, n in sorted(t.counts.items())) or "—")))
    cand = t.candidates
    info.append(Text(f"candidates: knn {cand.get('vector', 0)} · fts {cand.get('lexical', 0)} · pool {cand.get('pool', 0)}"))
    info.append(Text(f"dropped: {len(t.dropped)}  " + ("(d hides)" if show_dropped else "(d lists them)"), style="bold"))
    if len(t.conflicts) == 1:
        a, b = t.conflicts[0]
        why = _why(t, a, b)
        info.append(Text(f"conflicts: {a} vs {b}" + (f" ({why})" if why else ""), style="magenta"))
    elif t.conflicts:
        rules = [d.get("rule", "") for d in t.conflict_details]
        by_key = sum(r == "same key" for r in rules)
        info.append(Text(f"conflicts: {len(t.conflicts)} pairs · {by_key} same key · {len(rules) - by_key} same subject",
                         style="magenta"))
    if t.degraded:
        info.append(Text(f"degraded: {t.degraded['reason']} → {t.degraded.get('source')}", style="bold yellow"))
    grid = Table.grid(padding=(0, 3))
    grid.add_column()
    grid.add_column()
    grid.add_row(stages, Group(*info))
    parts: list[RenderableType] = [grid]
    if show_dropped and t.dropped:
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1), expand=True)
        table.add_column("id", no_wrap=True)
        table.add_column("wing", no_wrap=True)
        table.add_column("stage", style="yellow", no_wrap=True)
        table.add_column("why", overflow="fold")
        for d in t.dropped:
            table.add_row(d.id, d.wing or "", d.stage, Text(d.detail))
        parts.append(table)
    return Group(*parts)


class TracePane(Static):
    """Selected result's formula on top, the call below; ``d`` lists dropped candidates."""

    def show(self, bundle: Bundle | None, result: Result | None, show_dropped: bool) -> None:
        if bundle is None:
            self.update(Text("Type a query above. The trace of the selected result appears here.", style="dim"))
            return
        parts: list[RenderableType] = []
        if result is not None:
            parts += [result_section(result, bundle), Text("")]
        elif not bundle.results:
            parts += [Text("No results. Press d to see what was dropped and why, or x to ask why an entry is missing.",
                           style="dim"), Text("")]
        parts.append(call_section(bundle, show_dropped))
        self.update(Group(*parts))


def _why(t: Trace, a: str, b: str) -> str:
    """The rule that flagged the pair: ``same key`` or ``same subject 0.55`` (the cosine); "" if the trace has no detail."""
    pair = sorted([a, b])
    d = next((d for d in t.conflict_details if d.get("pair") == pair), None)
    if d is None:
        return ""
    return "same key" if d.get("rule") == "same key" else f"same subject {d.get('similarity', 0):.2f}"
