"""An in-process exact vector index for long-lived processes (the app, batch search, agents).

sqlite-vec's brute-force scan runs 2.5–4.5× slower than a plain matrix product
over the same vectors (tests/bench). A process that searches repeatedly can
therefore keep a float32 copy of each wing's vectors in memory (about 150 MB
for 100k × 384) and scan it with numpy. The results are the same exact KNN.

The copy is checked against the store on every search. Each wing block
remembers the wing generation it was loaded at, and every write to a wing, by
any process, bumps that generation (core/store/writer.py). A stale block is reloaded
before it is used, so the index can never answer from old vectors. One case is
known without reading: a transaction of this process that only added entries to
a wing whose block was current just before it (``append``, after the commit) puts
the new rows after the block's own, at the generation the transaction left, which
is what a reload would read (an agent's add then costs no read of its wing). A
single-shot process (one CLI search) never pays for loading: the index is used
only after ``warm_index()`` (the store's, or ``Memory``'s).

A search scans its whole scope at once: every wing's block is multiplied into
its slice of one similarity buffer, rows outside the filters are masked with a
mask kept per scope (rebuilt when a wing of the scope changes generation), and
one selection returns the top k of all the wings together. The cost is about
one pass over the scope's vectors (memory-bound), so an unscoped search costs
what a flat scan of the whole store does.

Which product runs that pass (numpy's einsum on the calling thread, or BLAS's sgemv on
its threads) is chosen once per process: ``memlens.store.speed.kernels``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memlens.store.speed import kernels
from memlens.store.speed.rowcache import RowCache
from memlens.store.staging import visible
from memlens.store.vectors import degenerate_rows


class IndexHost(Protocol):
    """What the index reads from (the store, or the ``Memory`` over it): this thread's connection, the vector
    size, the generations and wings."""

    path: Path

    @property
    def conn(self) -> Any: ...
    @property
    def dim(self) -> int: ...
    def generations(self, wings: Iterable[str] | None = None) -> dict[str, int]: ...
    def wings(self) -> list[str]: ...

FILTER_COLUMNS = ("room", "kind", "type", "status")
_SCOPES_KEPT = 4  # in_scope() sets: about 1 MB per 20k rowids (5 MB for an unscoped 100k)
_SPANS_KEPT = 8  # _span() rowids and masks: about 1 MB per 100k rows
_NEG_INF = float("-inf")  # a masked-out row's similarity in the scan's buffer
_SAMPLE = 2048  # rows sampled by _top() to guess a threshold below the k-th best
_LANDING_WAIT_S = 1.0  # at most (a safety net: the commit notifies once its rows joined, microseconds later)


@dataclass
class _Block:
    wing: str
    generation: int
    rowids: np.ndarray  # (n,) int64
    matrix: np.ndarray  # (n, dim) float32, unit rows (a degenerate stored vector is a zero row)
    usable: np.ndarray | None  # (n,) bool, False for a degenerate stored vector; None when all are usable
    codes: dict[str, np.ndarray]  # filter column -> (n,) int32 codes
    vocab: dict[str, dict[str, int]]  # filter column -> value -> code
    position: dict[int, int]  # rowid -> row of matrix (shared with the blocks appended from this one: see ``_appended``)
    spare: np.ndarray | None = None  # (capacity, dim): ``matrix`` is its first rows, the rest is room for appends


@dataclass
class _Span:
    """Some wings' blocks side by side, as one KNN scans them, with the mask of one scope's filters."""

    rowids: np.ndarray  # (n,) the blocks' rowids, concatenated in block order
    outside: np.ndarray | None  # (n,) bool, True outside the filters; None when every row is inside
    drop: np.ndarray | None  # (n,) bool, outside or without a usable vector: never a neighbour; None if no row
    kept: int  # rows not dropped


def _outside(block: _Block, filters: dict[str, list[str]]) -> np.ndarray | None:
    """The rows of ``block`` outside ``filters`` (None when none is): a filter that allows every value the
    block holds costs nothing."""
    mask: np.ndarray | None = None
    for col, values in filters.items():
        vocab = block.vocab[col]
        allowed = np.zeros(len(vocab), dtype=bool)
        allowed[[vocab[v] for v in values if v in vocab]] = True
        if allowed.all():
            continue
        out = ~allowed[block.codes[col]]
        mask = out if mask is None else mask | out
    return mask


def _top(sims: np.ndarray, k: int, tie: np.ndarray) -> np.ndarray:
    """Positions of the ``k`` largest of ``sims`` (1 <= k <= len), best first, ties by ``tie``; -inf left out.

    A strided sample gives a threshold that about 4k rows reach; when at least ``k`` do, the top ``k`` are
    all among them (the k-th best is >= the threshold), so only those are partitioned. Otherwise, the
    whole array is. Exact either way, and the same rows whatever the partition's order.
    """
    n = len(sims)
    pool = None  # positions holding every value >= the k-th best
    step = n // _SAMPLE
    if k < n and step > 1:
        sample = sims[::step]
        j = -(-4 * k // step)  # the j-th best of the sample: about j * step rows at or above it
        if j < len(sample):
            t = np.partition(sample, len(sample) - j)[len(sample) - j]
            cand = np.flatnonzero(sims >= t)
            if len(cand) >= k:
                pool = cand
    if pool is None:  # the rows at or above the k-th best of the whole array (all of its ties)
        pool = np.flatnonzero(sims >= np.partition(sims, n - k)[n - k]) if k < n else np.arange(n)
    elif k < len(pool):  # the same among the sampled rows
        kth = np.partition(sims[pool], len(pool) - k)[len(pool) - k]
        pool = pool[sims[pool] >= kth]
    top: np.ndarray = pool[np.lexsort((tie[pool], -sims[pool]))][:k]
    if sims[top[-1]] != -np.inf:  # best first: the last is a similarity, so all are (no row masked out)
        return top
    kept: np.ndarray = top[sims[top] != -np.inf]
    return kept


def _read_wing(mem: IndexHost, wing: str) -> tuple[int, list[tuple[Any, ...]], dict[int, np.ndarray]]:
    """One consistent snapshot of a wing: its generation, metadata rows and vector chunks.

    Vectors are read from sqlite-vec's chunk table (``<table>_vector_chunks00``,
    1024 vectors a blob, sqlite-vec 0.1.9 layout, version pinned): 0.16 s for
    100k vectors, against ~10 s for a row-by-row scan of the virtual table.
    """
    conn, dim = mem.conn, mem.dim
    conn.execute("BEGIN")
    try:
        gen = conn.execute("SELECT generation FROM wings WHERE wing = ?", (wing,)).fetchone()
        meta = conn.execute(
            "SELECT e.rowid, e.room, e.kind, e.type, e.status, r.chunk_id, r.chunk_offset FROM entries e "
            f"JOIN entries_vec_rowids r ON r.rowid = e.rowid WHERE e.wing = ? AND {visible('e')} ORDER BY e.rowid",
            (wing,),
        ).fetchall()
        chunk_ids = sorted({m[5] for m in meta})
        chunks: dict[int, np.ndarray] = {}
        for i in range(0, len(chunk_ids), 200):
            part = chunk_ids[i : i + 200]
            q = f"SELECT rowid, vectors FROM entries_vec_vector_chunks00 WHERE rowid IN ({','.join('?' * len(part))})"
            for cid, blob in conn.execute(q, part):
                if not isinstance(blob, bytes) or len(blob) % (dim * 4):
                    raise _damaged(mem, wing, f"a vector chunk of {len(blob) if isinstance(blob, bytes) else blob!r} bytes")
                chunks[cid] = np.frombuffer(blob, dtype="<f4").reshape(-1, dim)
    finally:
        if conn.in_transaction:  # (SQLite ends it by itself when it meets a damaged page)
            conn.execute("COMMIT")
    return (gen[0] if gen else 0), meta, chunks


def _appended(block: _Block, generation: int, rows: list[tuple[int, bytes, tuple[str, str, str, str]]]) -> _Block | None:
    """``block`` with ``rows`` (rowid, vector bytes, filter values) after its last row, at ``generation``: what a
    load at that generation reads, as the rows come after every rowid it holds. None when they do not (or a vector
    is not of the block's size or is degenerate): the block is loaded again instead.

    The matrix grows into spare room (an eighth more, at least 256 rows, made on the first append) so an add
    does not copy the wing's vectors; the rows written there lie past every earlier block's matrix, which is a
    view of the same buffer's first rows. The rowid -> row map is shared too: a row past a block's end is not
    that block's (``VectorIndex.scanned`` and ``vectors`` check).
    """
    n, m, dim = len(block.rowids), len(rows), block.matrix.shape[1]
    new_ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=m)
    if (n and new_ids[0] <= block.rowids[-1]) or (m > 1 and bool((np.diff(new_ids) <= 0).any())):
        return None
    if any(len(r[1]) != dim * 4 for r in rows):
        return None
    vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(m, dim)
    if degenerate_rows(vecs).any():
        return None
    spare = block.spare
    if spare is None or len(spare) < n + m:
        spare = np.empty((n + m + max(256, (n + m) // 8), dim), dtype=np.float32)
        spare[:n] = block.matrix
    spare[n : n + m] = vecs
    vocab = dict(block.vocab)
    codes = {}
    for j, col in enumerate(FILTER_COLUMNS):
        values = vocab[col]
        if any(r[2][j] not in values for r in rows):  # a new value: a new map (earlier blocks keep theirs)
            values = vocab[col] = dict(values)
        fresh = np.fromiter((values.setdefault(r[2][j], len(values)) for r in rows), dtype=np.int32, count=m)
        codes[col] = np.concatenate([block.codes[col], fresh])
    usable = None if block.usable is None else np.concatenate([block.usable, np.ones(m, dtype=bool)])
    position = block.position
    for i, rowid in enumerate(new_ids.tolist()):
        position[rowid] = n + i
    return _Block(block.wing, generation, np.concatenate([block.rowids, new_ids]), spare[: n + m], usable, codes, vocab,
                  position, spare)


def _damaged(mem: IndexHost, wing: str, what: str) -> Exception:
    """sqlite-vec's tables do not hold together: the store is damaged (one line, later writes refused)."""
    from memlens.store import corruption

    detail = f"{what} in the vectors of wing {wing!r}"
    corruption.mark(mem.path, detail)
    return corruption.corrupt_error(mem.path, detail)


class VectorIndex:
    def __init__(self) -> None:
        self._blocks: dict[str, _Block] = {}
        self._lock = threading.Lock()
        self._joined = threading.Condition(self._lock)  # notified when the rows of a commit joined their blocks
        # wing -> (generation before, generation after) of a commit of this process whose added rows are to join
        self._landing: dict[str, tuple[int, int]] = {}
        self._scopes: dict[tuple[Any, ...], frozenset[int]] = {}  # see in_scope()
        self._spans: dict[tuple[Any, ...], _Span] = {}  # see _span()
        self._local = threading.local()  # each thread's output buffer (_buffer())
        self.rows = RowCache()  # the entry rows searches read, kept beside the vectors (memlens.store.speed.rowcache)

    def _block(self, mem: IndexHost, wing: str, generation: int) -> _Block:
        with self._lock:
            block = self._blocks.get(wing)
            if self._joining(wing, generation, block):  # its rows join this block in microseconds: wait, not read
                self._joined.wait_for(lambda: not self._joining(wing, generation, self._blocks.get(wing)),
                                      timeout=_LANDING_WAIT_S)
                block = self._blocks.get(wing)
        # a block newer than the caller's generations (this process's adds joined it since they were read) holds
        # what a load would read now, as a reload would: generations only grow
        if block is not None and block.generation >= generation:
            return block
        gen, meta, chunks = _read_wing(mem, wing)
        n = len(meta)
        matrix = np.empty((n, mem.dim), dtype=np.float32)
        try:
            for i, m in enumerate(meta):
                matrix[i] = chunks[m[5]][m[6]]
        except (KeyError, IndexError, TypeError):
            raise _damaged(mem, wing, f"entry rowid {meta[i][0]} placed at chunk {meta[i][5]!r}, offset {meta[i][6]!r}") from None
        bad = degenerate_rows(matrix)  # no direction, no similarity: never a neighbour (core/store/vectors.py)
        matrix[bad] = 0.0
        usable = ~bad if bad.any() else None
        vocab: dict[str, dict[str, int]] = {}
        codes: dict[str, np.ndarray] = {}
        for j, col in enumerate(FILTER_COLUMNS):
            values = vocab.setdefault(col, {})
            codes[col] = np.fromiter((values.setdefault(m[1 + j], len(values)) for m in meta), dtype=np.int32, count=n)
        rowids = np.fromiter((m[0] for m in meta), dtype=np.int64, count=n)
        block = _Block(wing, gen, rowids, matrix, usable, codes, vocab, {int(r): i for i, r in enumerate(rowids)})
        with self._lock:
            held = self._blocks.get(wing)
            if held is not None and held.generation > block.generation:  # adds joined it while this one was read
                return held
            self._blocks[wing] = block
        return block

    def holds(self, mem: IndexHost, wings: list[str] | None, gens: dict[str, int]) -> bool:
        """Whether every wing of ``wings`` (None: all) has its block here at ``gens`` already: a search would
        read none of them again."""
        names = wings if wings is not None else mem.wings()
        with self._lock:
            blocks = self._blocks
            return all((b := blocks.get(w)) is not None and b.generation >= gens.get(w, 0) for w in names)

    def _joining(self, wing: str, generation: int, block: _Block | None) -> bool:
        """Whether a commit of this process is adding its rows to ``block`` and brings it to at least ``generation``
        (under ``_lock``)."""
        land = self._landing.get(wing)
        return (block is not None and land is not None and land[0] == block.generation
                and block.generation < generation <= land[1])

    def landing(self, appends: dict[str, Any]) -> None:
        """A transaction of this process that added entries (``SqliteWriter.appends``) is about to commit: until
        ``append`` (or ``landed`` when the commit failed), a search that reads the generation it leaves waits for
        its rows to join the block instead of reading the whole wing again."""
        with self._lock:
            for wing, track in appends.items():
                if not track.other and track.rows:
                    self._landing[wing] = (track.before, track.before + track.bumps)

    def landed(self, appends: dict[str, Any]) -> None:
        """The commit announced by ``landing`` is over (its rows joined, or it failed): nobody waits for it."""
        with self._lock:
            for wing, track in appends.items():
                if self._landing.get(wing) == (track.before, track.before + track.bumps):
                    del self._landing[wing]
            self._joined.notify_all()

    def append(self, appends: dict[str, Any]) -> None:
        """What a transaction of this process committed (``SqliteWriter.appends``: wing -> ``WingAppends``): a
        wing it changed only by adding entries, whose block was current just before it, takes the added rows and
        the generation the transaction left (a load would read the same). Any other block stays as it is and is
        loaded again when a search finds its generation behind (before, every add cost the next search, or the
        add's own check for near-duplicates, a read of the whole wing: 35 ms at 6,000 entries)."""
        for wing, track in appends.items():
            if track.other or not track.rows or track.bumps != len(track.rows):
                continue
            with self._lock:
                block = self._blocks.get(wing)
            if block is None or block.generation != track.before:
                continue
            try:  # outside the lock (the first append to a large wing copies its vectors once); appends of one
                grown = _appended(block, track.before + track.bumps, track.rows)  # store file come one at a time
            except Exception:  # (out of memory): the write is committed and must not fail; the wing is read again
                grown = None
            with self._lock:  # a block is never taken back to an older generation
                if self._blocks.get(wing) is block:
                    if grown is None:
                        del self._blocks[wing]
                    else:
                        self._blocks[wing] = grown

    def warm(self, mem: IndexHost, stop: Callable[[], bool] | None = None) -> int:
        """Load every wing now, and choose the large scans' product if the vectors held make one and none is chosen
        yet (~0.1 s that the process's first large search would otherwise pay); returns the number of vectors held.
        ``stop`` is asked before each wing: once it says True, the rest is left for the searches that need it."""
        gens = mem.generations()
        held = 0
        for w in mem.wings():
            if stop is not None and stop():
                return held
            held += len(self._block(mem, w, gens.get(w, 0)).rowids)
        kernels.prepare(held * mem.dim, mem.dim)
        return held

    def knn(self, mem: IndexHost, qvec: np.ndarray, wings: list[str] | None, filters: dict[str, list[str]], k: int,
            gens: dict[str, int] | None = None) -> list[tuple[int, float]]:
        """The top ``k`` (rowid, cosine similarity) inside the wings and filters, best first (ties by rowid).

        One scan over the scope: each wing's block is multiplied into its slice of one output buffer, the
        rows outside the filters are masked out (the mask is kept per scope, see ``_span``), and a single
        selection finds the top ``k`` of all wings together. ``gens`` is ``mem.generations()`` when the
        caller already has it (one read per search).
        """
        self._local.scan = None  # no earlier scan answers scanned() for this one
        gens = mem.generations() if gens is None else gens
        blocks, span = self._span(mem, wings, filters, gens)
        if not span.kept or k <= 0:
            return []
        sims = self._buffer(len(span.rowids))
        q = np.asarray(qvec, dtype=np.float32)
        product = kernels.for_scan(len(span.rowids) * q.shape[0], q.shape[0])
        at = 0
        starts = {}
        for b in blocks:
            product(b.matrix, q, sims[at : at + len(b.rowids)])
            starts[b.wing] = (b.position, at, len(b.rowids))  # not the block: a reloaded wing's matrix is not kept
            at += len(b.rowids)
        if span.drop is not None:
            np.copyto(sims, np.float32(-np.inf), where=span.drop)
        self._local.scan = (object(), starts, sims)  # for one scanned(), until this thread's next scan
        top = _top(sims, min(k, span.kept), span.rowids)
        return list(zip(span.rowids[top].tolist(), sims[top].tolist()))

    def last_scan(self) -> object | None:
        """A token for this thread's last scan, None if it ranked nothing (``scanned`` answers once for it, until
        the thread scans again)."""
        scan = getattr(self._local, "scan", None)
        return None if scan is None else scan[0]

    def scanned(self, wing_of: dict[int, str], token: object) -> dict[int, float]:
        """The similarities the scan ``token`` computed for the rowids of ``wing_of`` (rowid -> its wing) that it
        ranked: inside its wings and filters, with a usable vector. Others, and every rowid once this thread has
        scanned again or asked once already, are left out (the caller multiplies their stored vectors itself)."""
        scan = getattr(self._local, "scan", None)
        if scan is None or scan[0] is not token:
            return {}
        self._local.scan = None  # asked once: its buffer and positions are not held any longer
        starts, sims = scan[1], scan[2]
        found, at = [], []  # the rowids the scan ranked, and where their similarities are in its buffer
        for r, wing in wing_of.items():
            got = starts.get(wing)
            i = got[0].get(r) if got is not None else None
            if got is not None and i is not None and i < got[2]:  # (past the end: appended after this scan's block)
                found.append(r)
                at.append(got[1] + i)
        if not found:
            return {}
        return {r: v for r, v in zip(found, sims[at].tolist()) if v != _NEG_INF}

    def _buffer(self, n: int) -> np.ndarray:
        """This thread's output buffer for ``n`` similarities (reused: a search allocates nothing per row)."""
        buf: np.ndarray | None = getattr(self._local, "sims", None)
        if buf is None or len(buf) < n:
            buf = self._local.sims = np.empty(max(n, 1024), dtype=np.float32)
        return buf[:n]

    def _span(self, mem: IndexHost, wings: list[str] | None, filters: dict[str, list[str]],
              gens: dict[str, int]) -> tuple[list[_Block], _Span]:
        """The current non-empty blocks of the scope's wings, and their rows side by side with the filters'
        mask. Every block is checked against ``gens`` first (a stale one is reloaded), and the span is kept
        under the blocks' own generations and sizes, so a write anywhere in the scope makes a new one."""
        names = list(dict.fromkeys(wings if wings is not None else mem.wings()))
        blocks = [b for b in (self._block(mem, w, gens.get(w, 0)) for w in names) if len(b.rowids)]
        key = (tuple((b.wing, b.generation, len(b.rowids)) for b in blocks),
               tuple(sorted((c, tuple(v)) for c, v in filters.items())))
        with self._lock:
            span = self._spans.get(key)
        if span is not None:
            return blocks, span
        rowids = np.concatenate([b.rowids for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
        outside_parts, drop_parts, any_outside, any_drop = [], [], False, False
        for b in blocks:
            out = _outside(b, filters)
            drop = out if b.usable is None else (~b.usable if out is None else out | ~b.usable)
            any_outside |= out is not None
            any_drop |= drop is not None
            outside_parts.append(out if out is not None else np.zeros(len(b.rowids), dtype=bool))
            drop_parts.append(drop if drop is not None else np.zeros(len(b.rowids), dtype=bool))
        outside = np.concatenate(outside_parts) if any_outside else None
        drop_all = np.concatenate(drop_parts) if any_drop else None
        kept = len(rowids) - (int(drop_all.sum()) if drop_all is not None else 0)
        span = _Span(rowids, outside, drop_all, kept)
        with self._lock:
            while len(self._spans) >= _SPANS_KEPT:
                self._spans.pop(next(iter(self._spans)))
            self._spans[key] = span
        return blocks, span

    def in_scope(self, mem: IndexHost, wings: list[str] | None, filters: dict[str, list[str]],
                 gens: dict[str, int] | None = None) -> frozenset[int]:
        """The rowids inside ``wings`` and ``filters``, from the metadata held beside the vectors.

        The lexical generator tests FTS5 matches against this set instead of
        joining each match to its entries row (tests/test_search.py holds the
        two to the same rows). Sets are kept per scope, filters and wing
        generations, so a write anywhere in the scope, by any process, makes a
        new one; the last few are kept. ``gens`` is ``mem.generations()`` when the caller already has it.
        """
        gens = mem.generations() if gens is None else gens
        names = wings if wings is not None else mem.wings()
        key = (tuple(names), tuple(sorted((c, tuple(v)) for c, v in filters.items())), tuple(gens.get(w, 0) for w in names))
        with self._lock:
            hit = self._scopes.get(key)
        if hit is not None:
            return hit
        _, span = self._span(mem, wings, filters, gens)
        found = frozenset((span.rowids if span.outside is None else span.rowids[~span.outside]).tolist())
        with self._lock:
            while len(self._scopes) >= _SCOPES_KEPT:
                self._scopes.pop(next(iter(self._scopes)))
            self._scopes[key] = found
        return found

    def vectors(self, wing_of: dict[int, str]) -> dict[int, np.ndarray]:
        """The held vectors of the rowids in ``wing_of`` (rowid -> its wing); the caller reads the rest."""
        out: dict[int, np.ndarray] = {}
        with self._lock:
            blocks = dict(self._blocks)
        for r, wing in wing_of.items():
            b = blocks.get(wing)
            i = b.position.get(r) if b is not None else None
            if b is not None and i is not None and i < len(b.rowids):
                out[r] = b.matrix[i]
        return out

    @property
    def size(self) -> int:
        with self._lock:
            return sum(len(b.rowids) for b in self._blocks.values())
