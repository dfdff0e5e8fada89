"""Code at retrieval time: the "Relevant code" section of ``context``, behind validation gates.

Candidates are the nearest ``code`` chunks of the searched wings that have a
code index. Each passes these gates in turn, and a chunk that fails one is
dropped with that stage and a reason in the trace:

- ``code_threshold``: its similarity to the query is below ``MIN_SCORE``;
- ``code_exists``, ``code_workspace``, ``code_binary``, ``code_stale``: its file is gone, left
  the indexed workspace, became binary, or no longer holds the indexed lines
  (``memlens.ingest.gates``, the gates ``search`` applies too): old code is never served;
- ``code_cap``: beyond ``MAX_CHUNKS`` chunks or about ``MAX_CHARS`` characters.

An index whose last completed run is older than ``STALE_AFTER_S``, or a searched
wing without one (when the store has any code index), is skipped with stage
``code_index`` and reason ``degraded``: retrieval never re-indexes inline.
Code chunks that the memory search itself returned leave the memory sections
(stage ``code``): code reaches an agent only through these gates.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from memlens.ingest import gates, storage
from memlens.models import parse_ts, utcnow
from memlens.trace import Bundle, Dropped

if TYPE_CHECKING:
    from memlens.ingest.context import IngestContext
    from memlens.models import Entry

MAX_CHUNKS = 3
MAX_CHARS = 2048
MIN_SCORE = 0.25  # cosine similarity of query and chunk
CANDIDATES = 20
STALE_AFTER_S = 24 * 3600
_FENCE_LANG = {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go", ".rs": "rust", ".c": "c",
               ".h": "c", ".cpp": "cpp", ".java": "java", ".rb": "ruby", ".sh": "bash", ".toml": "toml", ".json": "json",
               ".yaml": "yaml", ".yml": "yaml", ".md": "markdown"}


def _drop(bundle: Bundle, id_: str, wing: str, stage: str, reason: str, detail: str, score: float | None = None) -> None:
    bundle.trace.dropped.append(Dropped(id=id_, stage=stage, reason=reason, detail=detail, score=score, wing=wing))


def code_section(mem: IngestContext, bundle: Bundle) -> str:
    """The markdown "Relevant code" section for ``bundle``'s query ("" when none); gates and drops go to its trace.

    Code chunks among the memory results leave them (they are shown here, once, after the gates).
    """
    trace = bundle.trace
    every = storage.code_indexes(mem)
    if not every:
        return ""  # this store indexes no code: nothing to say
    wings = list(trace.wings_searched or [])
    indexes = [ix for ix in every if ix["wing"] in wings]
    now = utcnow()
    fresh: list[str] = []
    for w in wings:
        mine = [ix for ix in indexes if ix["wing"] == w]
        if not mine:
            continue
        ok = [ix for ix in mine if ix["indexed_at"] and now - parse_ts(ix["indexed_at"]) <= timedelta(seconds=STALE_AFTER_S)]
        for ix in mine:
            if ix not in ok:
                _drop(bundle, f"code-index:{w}", w, "code_index", "degraded",
                      f"the code index of {ix['root']} was last completed at {ix['indexed_at']}, over "
                      f"{STALE_AFTER_S // 3600} h ago; skipped (run `memlens index` or keep --watch running)")
        if ok:
            fresh.append(w)
    if not indexes:
        w = trace.active_wing or (wings[0] if wings else "")
        _drop(bundle, f"code-index:{w}", w, "code_index", "degraded", "no code index for the searched wings; skipped")
    code_results = [r for r in bundle.results if r.entry.kind.value == "code"]
    if code_results:  # code reaches an agent only through the gates below, never unchecked among the notes
        bundle.results = [r for r in bundle.results if r.entry.kind.value != "code"]
        for i, r in enumerate(bundle.results):
            r.rank = i + 1
        for r in code_results:
            fine = r.entry.wing in fresh
            _drop(bundle, r.entry.id, r.entry.wing, "code", "code" if fine else "degraded",
                  "code is shown under Relevant code, after its gates" if fine
                  else "code of a wing whose code index is stale or missing is not served", r.score)
    if not fresh or not (trace.text or "").strip():
        _log(mem, fresh, 0, {})
        return ""
    qvec = mem.embed([trace.text])[0]
    from memlens.store.rows import vec_blob

    served: list[tuple[Entry, float]] = []
    chars = 0
    reasons: dict[str, int] = {}
    roots: dict[str, str] = {}
    gated = {(d.id, d.stage) for d in trace.dropped}  # the search's own gates dropped these already: said once
    for entry, sim in storage.code_candidates(mem, vec_blob(qvec), fresh, CANDIDATES):
        failed: gates.Verdict
        if sim < MIN_SCORE:
            failed = ("code_threshold", "threshold", f"similarity {sim:.3f} is below {MIN_SCORE}")
        else:
            failed = gates.check(entry.meta, entry.text, roots)
        if failed is None and (len(served) >= MAX_CHUNKS or (served and chars + len(entry.text) > MAX_CHARS)):
            failed = ("code_cap", "cap", f"at most {MAX_CHUNKS} chunks and about {MAX_CHARS} characters of code")
        if failed is not None:
            if (entry.id, failed[0]) not in gated:
                _drop(bundle, entry.id, entry.wing, failed[0], failed[1], failed[2], round(sim, 6))
            reasons[failed[1]] = reasons.get(failed[1], 0) + 1
            continue
        served.append((entry, sim))
        chars += len(entry.text)
    looked = len(served) + sum(reasons.values())
    # counts of this section's own look at the nearest chunks: the search's results dropped above are not in them
    trace.notes.append(f"code: {len(served)} of the {looked} nearest chunks served from {', '.join(fresh)}"
                       + (f"; the others dropped by the gates: {', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))}"
                          if reasons else ""))
    _log(mem, fresh, len(served), reasons)
    return render(served)


def render(served: list[tuple[Entry, float]]) -> str:
    if not served:
        return ""
    lines = ["## Relevant code", ""]
    for entry, sim in served:
        rel = entry.meta.get("path") or entry.meta.get("source")
        a, b = entry.meta["lines"]
        lang = _FENCE_LANG.get(os.path.splitext(str(rel))[1].lower(), "")
        text = entry.text if len(entry.text) <= MAX_CHARS else entry.text[:MAX_CHARS].rsplit("\n", 1)[0] + "\n…"
        fence = "````" if "```" in text else "```"
        lines += [f"### `{rel}:{a}-{b}` (score {sim:.2f})", "", f"{fence}{lang}", text, fence, ""]
    return "\n".join(lines)


def _log(mem: IngestContext, wings: list[str], served: int, reasons: dict[str, Any]) -> None:
    storage.log_code_recall(mem, {"wings": wings, "served": served, "dropped": reasons, "degraded": not wings})


def render_with_code(mem: IngestContext, bundle: Bundle) -> str:
    """``render_context`` plus the Relevant code section (the context an agent receives)."""
    from memlens.retrieval.budget import render_context

    section = code_section(mem, bundle)
    text = render_context(mem, bundle)
    return text if not section else text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
