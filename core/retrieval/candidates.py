"""Candidate generation: which stored entries a search weighs at all.

    gate → embed → vector (KNN inside the scope) → lexical (text matches inside the scope; in a long-lived
         process on a worker thread while the query is embedded)
         ↘ listing (no free text: the scope in authority order)
    → load (rows, the entries policy must see anyway, vectors, similarities)

A candidate found only by the lexical generator still gets its true cosine
similarity, looked up by rowid, so every result carries every component.
"""

from __future__ import annotations

import time

import numpy as np

from memlens.limits import MAX_QUERY_TERMS, knn_rows
from memlens.retrieval import beside
from memlens.retrieval.policy import Candidate
from memlens.retrieval.run import Run
from memlens.retrieval.terms import lexical_terms
from memlens.store.scope import StoredRow
from memlens.store.vectors import clean, degenerate
from memlens.trace import Components


def gate(run: Run) -> None:
    """Decide what to look for: free text, a filters-only listing, or nothing (the trace says why)."""
    plan, trace, text = run.plan, run.trace, run.text
    run.found.n_cand = knn_rows(plan.k, run.settings.search.candidates)  # never past sqlite-vec's KNN limit
    if plan.kinds == []:
        trace.notes.append(f"profile {plan.profile.name!r} allows no kind that the query asked for")
    elif text and len(text.split()) < plan.profile.min_query_tokens:
        trace.notes.append(
            f"query has {len(text.split())} token(s); profile {plan.profile.name!r} needs {plan.profile.min_query_tokens}"
        )
    else:
        run.found.mode = "text" if text else "listing"


def has_text(run: Run) -> bool:
    return run.found.mode == "text"


def is_listing(run: Run) -> bool:
    return run.found.mode == "listing"


def start_lexical(run: Run) -> None:
    """Hand the lexical generator to the process's worker thread, to rank the text matches while the query is
    embedded (``memlens.retrieval.beside``), when the store can (``Reads.lexical_beside``) and the worker is free."""
    store, scope = run.store, run.plan.search_scope
    if not store.lexical_beside(scope):
        return
    sel, n = lexical_terms(run.text), run.found.n_cand

    def job() -> tuple[list[tuple[int, float]], float]:
        t = time.perf_counter()
        with store.settled():
            hits = store.lexical(sel.text, scope, n)
        return hits, (time.perf_counter() - t) * 1000

    future = beside.submit(job)
    if future is not None:
        run.found.beside = (sel, future)


def embed(run: Run) -> None:
    run.found.qvec = run.ctx.embed([run.text])[0]


def vector(run: Run) -> None:
    """The KNN generator: nearest stored vectors inside the scope."""
    qvec, trace, store = run.found.qvec, run.trace, run.store
    assert qvec is not None
    if degenerate(qvec):
        run.found.qvec = clean(qvec)
        hits: list[tuple[int, float]] = []
        trace.notes.append("the query's vector is degenerate (zero or not finite): text matches only")
        index = store.vector_index()
    else:
        knn = store.knn(qvec, run.plan.search_scope, run.found.n_cand)
        hits, index, run.found.knn_gens, run.found.scanned = knn.hits, knn.index, knn.gens, knn.scanned
        if knn.note:
            trace.notes.append(knn.note)
    trace.fusion["vector_index"] = index
    trace.fusion["lexical"] = store.lexical_scorer
    hits = hits[: run.found.n_cand]
    run.found.sims.update(hits)
    run.found.vec_rank.update(zip([rowid for rowid, _ in hits], range(1, len(hits) + 1)))


def lexical(run: Run) -> None:
    """The lexical generator: the best text matches inside the scope, for every term of the query up to the cap
    (``memlens.retrieval.terms``); the trace lists the terms used. When it ran beside the embedding
    (``start_lexical``), its answer is taken here and its time there counts as this stage's."""
    if run.found.beside is not None:
        sel, future = run.found.beside
        t = time.perf_counter()
        hits, took_ms = future.result()
        # the pipeline times this stage (the wait, and what follows); the generator's time beyond the wait counts too
        run.lat["lexical"] += max(0.0, took_ms - (time.perf_counter() - t) * 1000)
    else:
        sel = lexical_terms(run.text)
        hits = run.store.lexical(sel.text, run.plan.search_scope, run.found.n_cand, run.found.knn_gens)
    run.trace.fusion["lexical_terms"] = sel.terms
    if sel.cut:
        run.trace.notes.append(f"the lexical search used the first {MAX_QUERY_TERMS} of the query's {sel.distinct} "
                               "distinct terms")
    run.found.bm25.update(hits)
    run.found.bm25_rank.update(zip([rowid for rowid, _ in hits], range(1, len(hits) + 1)))
    run.found.ordered = list(dict.fromkeys([*run.found.sims, *run.found.bm25]))


def listing(run: Run) -> None:
    """Filters only: the scope in authority order, most salient first."""
    run.found.ordered = run.store.listing(run.plan.search_scope, run.found.n_cand)


def _rows(run: Run, rowids: list[int]) -> list[StoredRow]:
    """The sound rows of ``rowids``, in that order (a row that does not decode is left out, noted in the trace)."""
    if not rowids:
        return []
    got = run.store.rows(rowids)
    run.trace.notes.extend(got.damaged)
    return got.rows


def _load(run: Run, rowids: list[int], pool: dict[int, Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """Candidates for the rows of ``rowids``, each with what the generators found for it (similarity, ranks, bm25).
    Returns the new candidates without a similarity yet (text-only matches, pull-ins), and those with a key."""
    sims, vec_rank, bm25, bm25_rank = run.found.sims, run.found.vec_rank, run.found.bm25, run.found.bm25_rank
    unscored, keyed = [], []
    for r in _rows(run, rowids):
        rowid = r[0]
        if rowid not in pool:
            sim = sims.get(rowid)
            comps = Components(sim, vec_rank.get(rowid), bm25.get(rowid), bm25_rank.get(rowid))
            pool[rowid] = c = Candidate(r, comps)
            if sim is None:
                unscored.append(c)
            if r[10] is not None:  # (rowid, content_hash, *ENTRY_COLUMNS): the key
                keyed.append(c)
    return unscored, keyed


def _pull_in(run: Run, pool: dict[int, Candidate], keyed: list[Candidate]) -> tuple[set[int], list[int]]:
    """What policy must see even if the generators missed it: the profile's pull-ins (mandatory invariants),
    and the entries that override a candidate or share its key (``keyed``: the pool's candidates with a key)."""
    plan = run.plan
    mandatory = run.hooks.pull_in(run) if run.hooks.pull_in is not None else set()
    extra = [r for r in mandatory if r not in pool]
    ids = [c.id for c in pool.values()]
    keys = {c.key for c in keyed if c.key}
    if ids and run.text:
        extra += [r for r in run.store.related(ids, keys, plan.search_scope) if r not in pool]
    return mandatory, extra


def fetch_vectors(run: Run, need: dict[int, str]) -> None:
    """Add the stored vectors of the ``need`` rowids (rowid -> wing) that ``run.vectors`` lacks."""
    need = {r: w for r, w in need.items() if r not in run.vectors}
    if need:
        run.vectors.update(run.store.vectors(need))


def _similarities(run: Run, pool: dict[int, Candidate], unscored: list[Candidate], keyed: list[Candidate]) -> None:
    """Vectors for the candidates the KNN did not score (``unscored``) and for the key groups dedup compares
    (``keyed``). A KNN that scanned the whole scope computed most of those similarities already (the in-process
    index): they are read from it."""
    qvec, sims = run.found.qvec, run.found.sims
    assert qvec is not None
    if run.found.scanned is not None and unscored:
        sims.update(run.found.scanned({c.rowid: c.wing for c in unscored}))
    fetch_vectors(run, {c.rowid: c.wing for c in (*unscored, *keyed) if c.rowid not in sims or c.key})
    rowids = [r for r in run.vectors if r in pool]
    if not rowids:
        return
    mat = np.stack([run.vectors[r] for r in rowids])  # one matrix: the zero test and the products in two numpy calls
    zero: list[bool] = np.logical_not(mat.any(axis=1)).tolist()
    unusable = sorted(pool[r].id for r, z in zip(rowids, zero) if z)
    if unusable:
        run.trace.notes.append(f"no usable vector (all zeros or not finite), similarity counted as 0: {', '.join(unusable[:5])}"
                               + (f" and {len(unusable) - 5} more" if len(unusable) > 5 else ""))
    unscored_at = [i for i, r in enumerate(rowids) if r not in sims]
    if unscored_at:
        # einsum: on this thread (BLAS would split these few dozen rows between threads that wait for a core when
        # other work holds one)
        sims.update(zip([rowids[i] for i in unscored_at], np.einsum("ij,j->i", mat[unscored_at], qvec).tolist()))


def load(run: Run) -> None:
    """The pool: the generators' rows, the pull-ins, their vectors and every candidate's raw components."""
    trace = run.trace
    trace.candidates = {"vector": len(run.found.sims), "lexical": len(run.found.bm25), "over_fetch": run.found.n_cand}
    pool: dict[int, Candidate] = {}
    unscored, keyed = _load(run, run.found.ordered, pool)
    mandatory, extra = _pull_in(run, pool, keyed)
    more, more_keyed = _load(run, list(dict.fromkeys(extra)), pool)
    unscored += more
    keyed += more_keyed
    trace.candidates["pulled_in"] = len(set(extra))
    if pool and run.found.qvec is not None:
        _similarities(run, pool, unscored, keyed)
        sims = run.found.sims
        for c in unscored:  # the similarities found since the candidates were made
            c.comps.similarity = sims.get(c.rowid)
    for rowid in mandatory:
        m = pool.get(rowid)
        if m is not None:
            m.mandatory = m.keep = True
            m.source = "mandatory" if rowid in extra else m.source
    trace.candidates["pool"] = len(pool)
    run.pool = list(pool.values())
