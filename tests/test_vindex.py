"""The in-process vector index (memlens.store.speed.vindex): one scan over every wing of the scope, the same rows as
sqlite-vec's exact KNN, and never an answer from vectors or metadata older than the store."""

from __future__ import annotations

import base64
import json
import threading
import time

import numpy as np
import pytest

from memlens.store.scope import Scope
from memlens.store.speed import kernels, vindex
from memlens.store.speed.vindex import VectorIndex, _top
from tests.concurrency import run_threads
from tests.other_process import write

WINGS = ["w0", "w1", "w2", "w3"]
ROOMS = ["", "alpha", "beta"]
TYPES = ["note", "decision", "invariant"]
STATUSES = ["active", "active", "under_review", "deprecated"]
N = 1200


def _reference(sims: np.ndarray, k: int, tie: np.ndarray) -> np.ndarray:
    order = np.lexsort((tie, -sims))[:k]
    return order[sims[order] != -np.inf]


@pytest.mark.parametrize("sample", [vindex._SAMPLE, 16])
def test_top_is_the_exact_top_k_with_ties_and_masked_rows(monkeypatch, sample):
    """The sampled threshold only narrows the search: the rows returned are exactly a full sort's, ties by the
    tie key, masked (-inf) rows never, whatever the values' order and distribution."""
    monkeypatch.setattr(vindex, "_SAMPLE", sample)
    rng = np.random.default_rng(7)
    for trial in range(400):
        n = int(rng.choice([1, 3, 50, 700, 5000, 20000]))
        kind = trial % 5
        if kind == 0:
            sims = rng.standard_normal(n).astype(np.float32)
        elif kind == 1:  # sorted: a strided sample sees only the low end of each stride
            sims = np.sort(rng.standard_normal(n).astype(np.float32))
        elif kind == 2:  # many ties at the k-th value
            sims = rng.integers(0, 4, n).astype(np.float32)
        elif kind == 3:  # mostly masked out
            sims = rng.standard_normal(n).astype(np.float32)
            sims[rng.random(n) < 0.95] = -np.inf
        else:  # one outstanding row, the rest equal
            sims = np.zeros(n, dtype=np.float32)
            sims[int(rng.integers(0, n))] = 1.0
        finite = int(np.isfinite(sims).sum())
        if not finite:
            continue
        k = int(rng.integers(1, min(finite, 120) + 1))
        tie = rng.permutation(n).astype(np.int64)
        got = _top(sims.copy(), k, tie)
        assert got.tolist() == _reference(sims, k, tie).tolist(), (n, k, kind)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def filled(mem, tmp_path):
    """1,200 entries with random vectors over 4 wings of different sizes, rooms, types and statuses."""
    rng = np.random.default_rng(11)
    vecs = _unit(rng, N)
    wing_of = rng.choice(len(WINGS), N, p=[0.5, 0.3, 0.15, 0.05])
    src = tmp_path / "entries.jsonl"
    with src.open("w", encoding="utf-8") as fh:
        for i in range(N):
            fh.write(json.dumps({
                "id": f"v-{i:05d}", "wing": WINGS[wing_of[i]], "room": ROOMS[i % 3], "type": TYPES[i % 3],
                "status": STATUSES[i % 4], "text": f"entry number {i}", "model": mem.embedder.model_id,
                "vector": base64.b64encode(vecs[i].astype("<f4").tobytes()).decode("ascii"),
            }) + "\n")
    assert mem.import_jsonl(src)["imported"] == N
    return mem


def _knn(mem, index: str, qvec: np.ndarray, scope: Scope, n: int) -> list[tuple[int, float]]:
    """The store's KNN on one path: ``"sqlite-vec"`` (the speed layer off) or ``"memory"`` (the index warmed)."""
    before = mem.settings.search.vector_index
    mem.settings.search.vector_index = "sqlite-vec" if index == "sqlite-vec" else "auto"
    try:
        if index == "memory":
            mem.warm_index()
        knn = mem.store.knn(qvec, scope, n)
        assert knn.index == index
        return knn.hits[:n]
    finally:
        mem.settings.search.vector_index = before


SCOPES = [
    Scope(),
    Scope(statuses=["active", "under_review"]),
    Scope(wings=["w1"]),
    Scope(wings=["w0", "w2"], statuses=["active"]),
    Scope(wings=["w3", "w1", "w2"], types=["decision", "invariant"]),
    Scope(rooms=["alpha"], types=["decision", "note"], statuses=["active", "under_review"]),
    Scope(wings=["w0", "nowhere"], rooms=["beta"]),
    Scope(statuses=["superseded"]),  # nothing inside
]


@pytest.mark.parametrize("kernel", sorted(kernels.KERNELS))
@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: repr(s)[6:-1] or "unscoped")
def test_knn_returns_the_rows_of_sqlite_vecs_exact_knn(filled, monkeypatch, scope, kernel):
    """Unscoped, one wing, several wings, with filters: the same rows in the same order as vec0's exact scan,
    with the same similarities, with either product; also with the sampled threshold in use on these small wings."""
    monkeypatch.setattr(vindex, "_SAMPLE", 32)
    monkeypatch.setattr(kernels, "_kernel", kernel)
    monkeypatch.setattr(kernels, "ONE_CORE", 0)  # every scan is a large one: the chosen product runs it
    rng = np.random.default_rng(3)
    rowid, wing = filled.conn.execute("SELECT rowid, wing FROM entries WHERE id = 'v-00004'").fetchone()
    stored = filled.store.vectors({rowid: wing})[rowid]  # a query equal to a stored vector: that row first
    for qvec in [*_unit(rng, 12), stored]:
        for n in (1, 10, 60):
            want = _knn(filled, "sqlite-vec", qvec, scope, n)
            got = _knn(filled, "memory", qvec, scope, n)
            assert [r for r, _ in got] == [r for r, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)
    if scope.statuses == ["superseded"]:
        assert want == []
    else:
        assert len(want) == 60


def test_the_first_scan_chooses_the_product_for_the_process(filled, monkeypatch):
    """The kernels are timed once, before the first large scan; every later one, of any index, keeps that choice."""
    monkeypatch.setattr(kernels, "_kernel", None)
    monkeypatch.setattr(kernels, "ONE_CORE", 0)
    q = _unit(np.random.default_rng(9), 1)[0]
    first = VectorIndex().knn(filled.store, q, None, {}, 5)
    chosen = kernels.kernel()
    assert chosen in kernels.KERNELS
    assert VectorIndex().knn(filled.store, q, None, {}, 5) == first and kernels.kernel() == chosen


def test_a_small_scan_runs_on_the_calling_thread_whatever_was_chosen(filled, monkeypatch):
    """Up to ONE_CORE floats the scan is einsum's (BLAS's threads wait for a core whenever another process holds
    one); beyond it, the chosen product's. Either way the same rows and similarities."""
    q = _unit(np.random.default_rng(4), 1)[0]
    want = VectorIndex().knn(filled.store, q, None, {}, 10)
    calls: list[str] = []

    def sgemv(matrix: np.ndarray, qv: np.ndarray, out: np.ndarray) -> None:
        calls.append("sgemv")
        np.matmul(matrix, qv, out=out)

    monkeypatch.setitem(kernels.KERNELS, "sgemv", sgemv)
    monkeypatch.setattr(kernels, "_kernel", "sgemv")
    assert VectorIndex().knn(filled.store, q, None, {}, 10) == want and calls == []
    monkeypatch.setattr(kernels, "ONE_CORE", N * filled.dim - 1)  # one float short: a large scan
    got = VectorIndex().knn(filled.store, q, None, {}, 10)
    assert calls and [r for r, _ in got] == [r for r, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)


def test_warming_the_index_chooses_the_product_before_any_search(filled, monkeypatch):
    """When the vectors held make a large scan; a small store never times the products (its scans are einsum's)."""
    monkeypatch.setattr(kernels, "_kernel", None)
    assert VectorIndex().warm(filled.store) == N
    assert kernels.kernel() is None
    monkeypatch.setattr(kernels, "ONE_CORE", N * filled.dim - 1)
    assert VectorIndex().warm(filled.store) == N
    assert kernels.kernel() in kernels.KERNELS


def test_the_products_are_timed_beyond_the_last_level_cache(tmp_path, monkeypatch):
    """A matrix that fits in the CPU's last cache is read from it, which no large scan is: timed there, BLAS's two
    threads beat one einsum by 3x on a CPU with a 32 MB L3 where the two tie on a 150 MB scan."""
    cpu = tmp_path / "cache"
    for index, (level, size) in enumerate([(1, "48K"), (2, "1024K"), (3, "32768K")]):
        (cpu / f"index{index}").mkdir(parents=True)
        (cpu / f"index{index}" / "level").write_text(f"{level}\n")
        (cpu / f"index{index}" / "size").write_text(f"{size}\n")
    (cpu / "index3").mkdir()  # a cache that says nothing of its size (or not to this user): the others count
    (cpu / "index4").mkdir()
    (cpu / "index4" / "size").write_text("unknown\n")
    monkeypatch.setattr(kernels, "CPU_CACHES", cpu)
    assert kernels.calibration_floats() * 4 >= 2 * 32 * 1024 * 1024
    (cpu / "index2" / "size").write_text("1024M\n")  # bounded: never more than CALIBRATE_MAX_FLOATS
    assert kernels.calibration_floats() == kernels.CALIBRATE_MAX_FLOATS
    monkeypatch.setattr(kernels, "CPU_CACHES", tmp_path / "missing")  # no sysfs: the fixed size
    assert kernels.calibration_floats() == kernels.CALIBRATE_FLOATS


def test_threads_must_win_clearly_to_be_chosen():
    """Two BLAS threads that only tie one einsum lose: the one thread leaves the other core to the rest of the
    process (the model, the app) and does not wait for a core another process holds."""
    assert kernels.choose({"einsum": 6.3, "sgemv": 6.1}) == "einsum"
    assert kernels.choose({"einsum": 6.3, "sgemv": 4.2}) == "sgemv"
    assert kernels.choose({"einsum": 4.0, "sgemv": 6.0}) == "einsum"


def test_scanned_gives_the_similarity_of_every_ranked_row_until_the_next_scan(filled):
    """Beyond its hits, a scan knows the similarity of every row it ranked: those inside its wings and filters.
    Rows outside them are left out, and so is everything once asked, or once the thread has scanned again."""
    index = VectorIndex()
    q, q2 = _unit(np.random.default_rng(6), 2)
    wing_of = dict(filled.conn.execute("SELECT rowid, wing FROM entries"))
    hits = index.knn(filled.store, q, ["w0", "w1"], {"type": ["decision"]}, 5)
    token = index.last_scan()
    got = index.scanned(wing_of, token)
    inside = {r for r, w, t in filled.conn.execute("SELECT rowid, wing, type FROM entries")
              if w in ("w0", "w1") and t == "decision"}
    assert set(got) == inside and len(inside) > 100
    vectors = filled.store.vectors({r: wing_of[r] for r in inside})
    for r in inside:
        assert got[r] == pytest.approx(float(vectors[r] @ q), abs=1e-5)
    assert [(r, got[r]) for r, _ in hits] == hits  # the hits' own similarities, to the bit
    assert index.scanned(wing_of, token) == {}  # answered once
    index.knn(filled.store, q, ["w0", "w1"], {"type": ["decision"]}, 5)
    index.knn(filled.store, q2, None, {}, 5)
    assert index.scanned(wing_of, token) == {}  # nor for an older scan
    assert index.knn(filled.store, q2, ["w1"], {"status": ["superseded"]}, 5) == []
    assert index.last_scan() is None  # a scan that ranked nothing leaves no earlier one to answer for it


def test_knn_answers_the_top_k_of_all_wings_together(filled):
    """k rows in all, not k per wing, and a wing named twice counts once."""
    index = VectorIndex()
    q = _unit(np.random.default_rng(5), 1)[0]
    hits = index.knn(filled.store, q, None, {}, 7)
    assert len(hits) == 7 and len({r for r, _ in hits}) == 7
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    twice = index.knn(filled.store, q, ["w1", "w1", "w2"], {}, 500)
    assert len(twice) == len({r for r, _ in twice}) == len(index.knn(filled.store, q, ["w1", "w2"], {}, 500))


def test_writes_by_another_process_reach_every_scan(filled):
    """With the index warm and its per-scope rows and masks cached, an entry added by another process is found
    unscoped and scoped; once it leaves the filters (status) or is deleted, no scan returns it again."""
    mem = filled
    assert mem.warm_index() == N
    index = mem.vector_index
    text = "zebra crossings need a lollipop man"
    q = mem.embed([text])[0]
    active = {"status": ["active"]}
    scopes = [(None, {}), (None, active), (["w0", "w3"], active), (["w3"], {})]
    for wings, filters in scopes:  # fill the caches first
        index.knn(mem.store, q, wings, filters, 5)
        index.in_scope(mem.store, wings, filters)

    new_id = write(mem.path, "add", text, "w3")
    rowid = mem.conn.execute("SELECT rowid FROM entries WHERE id = ?", (new_id,)).fetchone()[0]
    for wings, filters in scopes:
        hits = index.knn(mem.store, q, wings, filters, 5)
        assert hits[0][0] == rowid and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        assert rowid in index.in_scope(mem.store, wings, filters)

    write(mem.path, "status", new_id, "deprecated")
    for wings, filters in scopes:
        inside = not filters
        assert (rowid in [r for r, _ in index.knn(mem.store, q, wings, filters, 5)]) == inside
        assert (rowid in index.in_scope(mem.store, wings, filters)) == inside

    write(mem.path, "delete", new_id)
    for _ in range(2):  # and it stays gone once the caches are rebuilt
        for wings, filters in scopes:
            assert rowid not in [r for r, _ in index.knn(mem.store, q, wings, filters, 50)]
            assert rowid not in index.in_scope(mem.store, wings, filters)
    assert [r for r, _ in index.knn(mem.store, q, None, {}, 20)] == [r for r, _ in _knn(mem, "sqlite-vec", q, Scope(), 20)]


def test_a_degenerate_vector_is_told_apart_from_tiny_and_huge_ones():
    """The one-pass test (the vector's square) answers only when it is positive and finite; every other case
    takes the component-wise test, so a vector whose square underflows or overflows is still usable."""
    from memlens.store.vectors import degenerate

    ok = np.ones(384, dtype=np.float32) / np.sqrt(384)
    tiny = np.full(384, 1e-30, dtype=np.float32)  # its square underflows to 0
    huge = np.full(384, 1e30, dtype=np.float32)  # its square overflows
    assert not any(degenerate(v) for v in (ok, tiny, huge, -ok))
    nan, inf = ok.copy(), ok.copy()
    nan[5], inf[7] = np.nan, -np.inf
    assert all(degenerate(v) for v in (np.zeros(384, dtype=np.float32), nan, inf))


def _wing_reads(monkeypatch) -> list[str]:
    """The wings the index reads from the store from now on, in order (each ``_read_wing``)."""
    reads: list[str] = []
    real_read = vindex._read_wing
    monkeypatch.setattr(vindex, "_read_wing", lambda host, wing: reads.append(wing) or real_read(host, wing))
    return reads


def _same_block(index: VectorIndex, mem, wing: str) -> None:
    """The index's block of ``wing`` holds what a fresh load of the wing holds: rows, vectors and filter values."""
    held = index._blocks[wing]
    fresh = VectorIndex()._block(mem.store, wing, mem.store.generations()[wing])
    assert held.generation == fresh.generation
    assert held.rowids.tolist() == fresh.rowids.tolist()
    assert np.array_equal(held.matrix, fresh.matrix)
    for col in vindex.FILTER_COLUMNS:
        names = {code: value for value, code in held.vocab[col].items()}
        fresh_names = {code: value for value, code in fresh.vocab[col].items()}
        assert [names[c] for c in held.codes[col].tolist()] == [fresh_names[c] for c in fresh.codes[col].tolist()]
    assert {r: held.position[r] for r in held.rowids.tolist()} == fresh.position
    assert (held.usable is None) == (fresh.usable is None)
    if held.usable is not None:
        assert held.usable.tolist() == fresh.usable.tolist()


def test_this_processs_adds_join_the_blocks_without_reading_the_wing_again(filled, monkeypatch):
    """An add by this process puts its row into the warm block it leaves current (a reload per add read the whole
    wing: the server's adds slowed as the wing grew); the block then equals a fresh load and every scan equals
    vec0's. Any other write (an update, another process's add) still has the wing read again."""
    mem = filled
    mem.warm_index()
    index = mem.vector_index
    reads = _wing_reads(monkeypatch)
    q = _unit(np.random.default_rng(9), 1)[0]
    for scope in SCOPES:
        index.knn(mem.store, q, scope.wings, scope.index_filters(), 5)
    wing_of = dict(mem.conn.execute("SELECT rowid, wing FROM entries"))
    token = index.knn(mem.store, q, None, {}, 5) and index.last_scan()
    reads.clear()  # (a wing that holds nothing, "nowhere", was read once by its scope)

    added = []

    def add() -> None:  # on another thread, as a server's calls come: this thread's scan stays the last it made
        added.extend([mem.add("a lighthouse keeper's log of storms", wing="w3", room="gamma", type="decision"),
                      mem.add("tide tables for the northern bay", wing="w0", status="under_review"),
                      mem.add_unique("how the fog horn was repaired", wing="w3", room="alpha")[0]])

    worker = threading.Thread(target=add)
    worker.start()
    worker.join(60)
    assert len(added) == 3
    assert reads == []  # no wing read again: neither by the adds' own near-duplicate checks nor by the scans below
    rowids = [mem.conn.execute("SELECT rowid FROM entries WHERE id = ?", (e.id,)).fetchone()[0] for e in added]
    scanned = index.scanned(dict(mem.conn.execute("SELECT rowid, wing FROM entries")), token)
    assert scanned.keys() == wing_of.keys()  # the rows added after that scan are not among those it ranked
    for wing in ("w0", "w3"):
        _same_block(index, mem, wing)
    assert reads == ["w0", "w3"]  # (the fresh loads above)
    reads.clear()
    queries = [*_unit(np.random.default_rng(10), 4), *mem.embed([e.text for e in added])]
    for scope in [*SCOPES, Scope(rooms=["gamma"]), Scope(wings=["w3"], types=["decision"])]:
        for qvec in queries:
            got = index.knn(mem.store, qvec, scope.wings, scope.index_filters(), 10)
            want = _knn(mem, "sqlite-vec", qvec, scope, 10)
            assert [r for r, _ in got] == [r for r, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)
    assert reads == []
    assert index.knn(mem.store, queries[-3], ["w3"], {"room": ["gamma"]}, 1)[0][0] == rowids[0]

    mem.update(added[1].id, text="tide tables for the southern bay")  # not an add: the wing is read again
    index.knn(mem.store, q, ["w0"], {}, 5)
    assert reads == ["w0"]
    _same_block(index, mem, "w0")
    reads.clear()

    other = write(mem.path, "add", "a storm log kept by another process", "w3")  # the block falls behind ...
    mine = mem.add("a storm log kept by this process", wing="w3")  # ... so this add cannot join it
    hits = {r for r, _ in index.knn(mem.store, mem.embed(["a storm log kept"])[0], ["w3"], {}, 50)}
    assert reads == ["w3"]
    both = {mem.conn.execute("SELECT rowid FROM entries WHERE id = ?", (i,)).fetchone()[0] for i in (other, mine.id)}
    assert both <= hits
    _same_block(index, mem, "w3")


@pytest.mark.model
def test_adds_from_many_threads_at_once_join_the_block_in_commit_order(real_mem, monkeypatch):
    """A server's tool calls add from many threads, each embedding with the real model: each add's rows join the
    block right after its commit, in commit order, and a check that read the generation just committed waits for
    them instead of reading the wing again. The block then equals a fresh load, and the adds' own near-duplicate
    checks found each other."""
    mem = real_mem
    mem.add("the shared wing exists", wing="team")
    mem.warm_index()
    index = mem.vector_index
    reads = _wing_reads(monkeypatch)
    threads_n, each = 32, 12
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []
    similar: list[int] = []

    def worker(i: int) -> None:
        barrier.wait(10)
        try:
            for j in range(each):
                similar.append(len(mem.add_unique(f"Finding {j} of agent {i}: shared over HTTP.", wing="team",
                                                  room=f"agent-{i}")[2]))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    run_threads(worker, threads_n)
    assert errors == []
    assert reads == []  # of 384 adds
    assert sum(similar) > 0
    _same_block(index, mem, "team")


def _pending_add(index: VectorIndex, wing: str, rowid: int, before: int) -> dict:
    """What ``SqliteWriter.appends`` holds after one add of ``rowid`` to ``wing`` (a vector of ones' direction)."""
    from memlens.store.writer import WingAppends

    vec = np.full(384, 1 / np.sqrt(384), dtype="<f4").tobytes()
    return {wing: WingAppends(before, 1, [(rowid, vec, ("", "fact", "note", "active"))])}


def test_a_search_waits_for_a_commits_rows_only_until_its_block_holds_them(filled, monkeypatch):
    """A search that read the generation a commit of this process leaves waits for that commit's rows, and goes
    on as soon as they joined, even when the next commit already announced its own; a commit that fails wakes
    it too, and the wing is then read."""
    mem = filled
    mem.warm_index()
    index = mem.vector_index
    reads = _wing_reads(monkeypatch)
    gen = index._blocks["w1"].generation
    top = int(index._blocks["w1"].rowids.max())
    first, second = _pending_add(index, "w1", top + 1, gen), _pending_add(index, "w1", top + 2, gen + 1)
    index.landing(first)
    got: list[tuple[int, float]] = []
    searcher = threading.Thread(target=lambda: got.append((index._block(mem.store, "w1", gen + 1).generation,
                                                           time.perf_counter())))
    searcher.start()
    time.sleep(0.1)
    assert got == []  # waiting for the rows of the commit in flight
    joined = time.perf_counter()
    index.append(first)
    index.landed(first)
    index.landing(second)  # the next commit announces itself at once: the search does not wait for it
    searcher.join(5)
    assert got and got[0][0] == gen + 1 and got[0][1] - joined < 0.5
    assert reads == []
    index.landed(second)  # (its commit failed)

    index.landing(second)
    searcher = threading.Thread(target=lambda: got.append((index._block(mem.store, "w1", gen + 2).generation,
                                                           time.perf_counter())))
    searcher.start()
    time.sleep(0.1)
    failed = time.perf_counter()
    index.landed(second)  # the commit failed: nothing joins, the search reads the wing
    searcher.join(5)
    assert got[1][1] - failed < 0.5 and reads == ["w1"]


def test_an_add_whose_rows_cannot_join_the_block_is_still_an_add(filled, monkeypatch):
    """The add is committed before its rows join the block: if joining fails (out of memory), the add is not
    reported as failed (a retried add would be stored twice); the block is dropped and the wing read again."""
    mem = filled
    mem.warm_index()
    index = mem.vector_index

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(vindex, "_appended", no_memory)
    entry = mem.add("a note added while memory ran out", wing="w2")
    assert mem.conn.execute("SELECT count(*) FROM entries WHERE text = ?", (entry.text,)).fetchone()[0] == 1
    assert "w2" not in index._blocks
    q = mem.embed([entry.text])[0]
    want = _knn(mem, "sqlite-vec", q, Scope(wings=["w2"]), 10)
    assert [r for r, _ in index.knn(mem.store, q, ["w2"], {}, 10)] == [r for r, _ in want]
    _same_block(index, mem, "w2")
