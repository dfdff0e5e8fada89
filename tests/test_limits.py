"""Hostile and odd input: degenerate stored vectors, numbers out of range, batch lines,
long queries, non-UTF-8 arguments and huge entries. Each gets a clean answer or a one-line error."""

from __future__ import annotations

import json
import math
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from memlens import Memory
from memlens.config import load_settings
from memlens.errors import QueryError, ValidationError
from memlens.limits import MAX_BUDGET, MAX_K, MAX_QUERY_CHARS, MAX_QUERY_TERMS, SQLITE_VEC_MAX_KNN
from memlens.retrieval.search import fts_query
from memlens.store import db

from .conftest import run_cli, snapshot_store
from .test_cli import one_line_error

DEGENERATE = {
    "zeros": np.zeros(384, dtype="<f4"),
    "nan": np.full(384, np.nan, dtype="<f4"),
    "inf": np.where(np.arange(384) == 0, np.inf, 0).astype("<f4"),
}


def _set_vector(path: Path, entry_id: str, vec: np.ndarray) -> int:
    """Write a vector straight into the store, as a foreign tool or an old import could have."""
    conn = db.connect(path, create=False)
    try:
        rowid = conn.execute("SELECT rowid FROM entries WHERE id = ?", (entry_id,)).fetchone()[0]
        conn.execute("UPDATE entries_vec SET embedding = ? WHERE rowid = ?", (vec.astype("<f4").tobytes(), rowid))
        conn.commit()
        return rowid
    finally:
        conn.close()


def _finite_components(bundle) -> None:
    for r in bundle.results:
        for name, v in r.components.model_dump().items():
            assert not (isinstance(v, float) and not math.isfinite(v)), (r.entry.id, name, v)
        assert math.isfinite(r.score)


# -- 1. degenerate vectors ------------------------------------------------------------------------------

# python holds 30 entries: a KNN over the wing (k = 50 candidates) returns every row, the degenerate one too
PY_IDS = ["py-anti-001", "py-anti-002", "py-anti-003"]


@pytest.fixture
def degenerate_store(demo_store, tmp_path) -> Path:
    path = tmp_path / "degenerate.db"
    shutil.copy(demo_store, path)
    for eid, vec in zip(PY_IDS, DEGENERATE.values()):
        _set_vector(path, eid, vec)
    return path


@contextmanager
def _open_on(path, embedder, index: str, **search):
    """``path`` opened for searches on one KNN path: ``"sqlite-vec"`` (the speed layer off) or ``"memory"`` (the
    in-process index, warmed as a long-lived process does)."""
    settings = load_settings(search={"vector_index": "sqlite-vec" if index == "sqlite-vec" else "auto", **search})
    with Memory.open(path, settings=settings, embedder=embedder) as mem:
        if index == "memory":
            mem.warm_index()
        yield mem


@pytest.mark.model
@pytest.mark.parametrize("index", ["sqlite-vec", "memory"])
def test_degenerate_vectors_never_crash_search_context_explain(degenerate_store, real_embedder, index):
    with _open_on(degenerate_store, real_embedder, index) as mem:
        b = mem.search("mutable default arguments", active_wing="python", use_cache=False)
        assert b.trace.fusion["vector_index"] == index
        _finite_components(b)
        found = {r.entry.id: r for r in b.results}
        assert found["py-anti-001"].components.similarity == 0.0  # found by its text; no vector, similarity 0
        assert any("no usable vector" in n and "py-anti-001" in n for n in b.trace.notes), b.trace.notes
        # the KNN never returns a degenerate row
        assert all(r.components.vector_rank is None for r in b.results if r.entry.id in PY_IDS)
        assert mem.context("mutable default arguments", active_wing="python", budget=300).startswith("# Memory context")
        for eid in PY_IDS:
            out = mem.explain("mutable default arguments", eid, active_wing="python")
            assert out["verdict"] in ("returned", "dropped", "not retrieved")
            assert "NaN" not in json.dumps(out) and "Infinity" not in json.dumps(out)


@pytest.mark.model
def test_degenerate_rows_do_not_displace_neighbours_in_sqlite_vec(degenerate_store, real_embedder):
    """vec0 returns a degenerate row with a NULL distance in place of a real one; both paths agree anyway."""
    conn = db.connect(degenerate_store, create=False)
    usable = conn.execute(
        "SELECT count(*) FROM entries WHERE wing = 'python' AND status IN ('active', 'under_review') AND id NOT IN (?, ?, ?)",
        PY_IDS,
    ).fetchone()[0]
    conn.close()
    hits = {}
    for index in ("sqlite-vec", "memory"):
        with _open_on(degenerate_store, real_embedder, index, candidates=usable) as mem:
            b = mem.search("asyncio tasks and threads", wings=["python"], k=5, use_cache=False)
            assert b.trace.fusion["vector_index"] == index
            hits[index] = [(r.entry.id, round(r.components.similarity, 5)) for r in b.results]
            assert b.trace.candidates["vector"] == usable  # every usable vector in scope, none displaced
    assert hits["sqlite-vec"] == hits["memory"]


@pytest.mark.model
def test_degenerate_vectors_cli(degenerate_store):
    for args in (["search", "mutable default arguments", "--active-wing", "python"],
                 ["context", "mutable default arguments", "--active-wing", "python"],
                 ["explain", "mutable default arguments", "--id", "py-anti-002", "--active-wing", "python"],
                 ["search", "--json", "wing=python kind=fact"]):
        proc = run_cli("--store", str(degenerate_store), *args)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr


def test_degenerate_vector_in_a_key_group_is_a_conflict_not_a_crash(mem, store_path):
    a = mem.add("Use tabs for indentation in every file", wing="w1", key="indent", type="invariant")
    b = mem.add("Use tabs for indentation in every file here", wing="w2", key="indent", type="invariant")
    assert mem.search("tabs indentation", wings=["w1", "w2"], use_cache=False).trace.conflicts == []  # duplicates
    _set_vector(store_path, b.id, DEGENERATE["nan"])
    bundle = mem.search("tabs indentation", wings=["w1", "w2"], use_cache=False)
    _finite_components(bundle)
    assert sorted([a.id, b.id]) in bundle.trace.conflicts  # cosine 0: not the same memory


# -- 2. numeric bounds ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "args, fragment",
    [
        (["search", "x", "-k", "1366"], f"from 1 to {MAX_K}"),
        (["search", "x", "-k", "100000000000000000000"], f"from 1 to {MAX_K}"),
        (["search", "x", "-k", "0"], f"from 1 to {MAX_K}"),
        (["search", "x", "-k", "abc"], "whole number"),
        (["search", "x", "--budget", "0"], f"from 1 to {MAX_BUDGET}"),
        (["search", "x", "--budget", "1e999"], "whole number"),
        (["context", "x", "--active-wing", "w", "-k", "-5"], f"from 1 to {MAX_K}"),
        (["explain", "x", "--id", "a", "--budget", "99999999999999999999999"], f"from 1 to {MAX_BUDGET}"),
        (["eval", "q.jsonl", "r.tsv", "-k", "5000"], f"from 1 to {MAX_K}"),
        (["add", "x", "--wing", "w", "--salience", "nan"], "from 0 to 1"),
        (["edit", "e1", "salience=nan"], "field 'salience': must be a number from 0 to 1, not 'nan'"),
        (["tasks", "-n", "100000000000000000000"], "-n/--window must be a whole number from 0 to"),
        (["search"], "search needs a QUERY"),
    ],
)
def test_numbers_out_of_range_are_one_line_errors(tmp_path, args, fragment):
    store = tmp_path / "s.db"
    proc = run_cli("--store", str(store), *args, cwd=tmp_path, timeout=60)
    one_line_error(proc, fragment)
    assert not store.exists()  # refused before the store was created


def test_api_bounds(mem):
    mem.add("hello world", wing="w")
    for kw in ({"k": 10**20}, {"k": 0}, {"k": "3"}, {"k": True}, {"budget": 10**30}, {"budget": -1}):
        with pytest.raises(ValidationError, match="from 1 to"):
            mem.search("hello", **kw)
    with pytest.raises(ValidationError, match="limit must be from 1"):
        mem.audit(limit=10**30)
    with pytest.raises(ValidationError, match="limit must be from 1"):
        mem.retrievals(limit=0)
    with pytest.raises(ValidationError, match="window size"):
        mem.tasks.window(10**30)
    with pytest.raises(ValidationError, match="wings must be a list"):
        mem.search("hello", wings="w")
    for kw in ({"user": 5}, {"profile": 3}, {"active_wing": ["w"]}):
        with pytest.raises(ValidationError, match="must be a string"):
            mem.search("hello", **kw)
    with pytest.raises(ValidationError, match="query must be a string"):
        mem.search(None)


@pytest.mark.parametrize("index", ["sqlite-vec", "memory"])
def test_knn_rows_never_exceed_sqlite_vec_limit(store_path, hash_embedder, index):
    """Any k and any candidates setting: the KNN asks for at most 4096 rows."""
    with _open_on(store_path, hash_embedder, index) as m:
        m.settings.search.candidates = 10**6  # whatever the configuration allows, the pipeline clamps
        m.add("alpha beta", wing="w")
        b = m.search("alpha", k=MAX_K, use_cache=False)
        assert b.trace.fusion["vector_index"] == index
        assert b.trace.candidates["over_fetch"] == SQLITE_VEC_MAX_KNN
        assert [r.entry.text for r in b.results] == ["alpha beta"]


# -- 3. --queries lines ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "line, fragment",
    [
        ({"query": "x", "k": "abc"}, "line 2: k: Input should be a valid integer"),
        ({"query": "x", "budget": "abc"}, "line 2: budget: Input should be a valid integer"),
        ({"query": "x", "active_wing": 5}, "line 2: active_wing: Input should be a valid string"),
        ({"query": "x", "k": 10**30}, "line 2: k: Input should be less than or equal to 1000"),
        ({"query": "x", "wings": ["python", 3]}, "line 2: wings.1: Input should be a valid string"),
        ({"query": "x", "colour": "red"}, "line 2: colour: unknown field"),
        ({"k": 3}, "line 2: query: required"),
        pytest.param({"query": "x" * (MAX_QUERY_CHARS + 1)}, "line 2: query: String should have at most", id="long-query"),
        ({"query": "wing=nowhere x"}, "line 2: unknown wing 'nowhere'"),
        ({"query": "x", "profile": "nope"}, "line 2: unknown profile 'nope'"),
        pytest.param("[" * 100_000 + "]" * 100_000, "line 2: invalid JSON: nested too deeply", id="nested"),
        ([1, 2], "line 2: expected a JSON object"),
        pytest.param('{"query": "x', "line 2: invalid JSON: Unterminated string starting at column 11", id="unterminated"),
        pytest.param('{"query": "x",}', "line 2: invalid JSON: Expecting property name enclosed in double quotes at column",
                     id="trailing-comma"),
    ],
)
def test_batch_lines_are_typed_and_fail_the_batch(demo_store, tmp_path, line, fragment):
    store = tmp_path / "d.db"
    shutil.copy(demo_store, store)
    before = snapshot_store(store)
    qf = tmp_path / "q.jsonl"
    text = line if isinstance(line, str) else json.dumps(line)
    qf.write_text(json.dumps({"id": "ok", "query": "callbacks"}) + "\n" + text + "\n")
    proc = run_cli("--store", str(store), "search", "--queries", str(qf), "--active-wing", "lifecore_ros2", timeout=120)
    one_line_error(proc, fragment)
    assert proc.stdout == ""  # all or nothing: the good first line was not run either
    assert snapshot_store(store) == before


def test_batch_file_that_is_not_a_regular_file(tmp_path):
    proc = run_cli("--store", str(tmp_path / "s.db"), "search", "--queries", str(tmp_path), timeout=60)
    one_line_error(proc, "not a regular file")


def _batch(mem, monkeypatch):
    """The store's path for in-process `memlens` runs with ``mem``'s hashing embedder (``mem`` closed)."""
    from memlens import embed

    monkeypatch.setattr(embed, "make_embedder", lambda *a, **k: embed.HashEmbedder())
    mem.add("harbour tides and their tables", wing="w")
    path = str(mem.path)
    mem.close()
    return path


def test_batch_file_may_start_with_a_byte_order_mark(mem, tmp_path, capsys, monkeypatch):
    """A BOM an editor wrote is dropped, as import drops it (it was 'invalid JSON: Unexpected UTF-8 BOM')."""
    from memlens.cli.main import main

    path = _batch(mem, monkeypatch)
    qf = tmp_path / "q.jsonl"
    qf.write_bytes(b'\xef\xbb\xbf{"id": "q1", "query": "harbour", "k": 1}\r\n{"query": "tides"}\n')
    assert main(["--store", path, "search", "--queries", str(qf), "--active-wing", "w"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ["q1", 2]


@pytest.mark.parametrize("lines, fragment", [
    ([{"id": "a", "query": "x"}, {"id": "b", "query": "y"}, {"id": "a", "query": "z"}],
     "line 3: id: 'a' already appears on line 1"),
    ([{"id": 2, "query": "x"}, {"query": "y"}], "line 2: id: none given, so it is answered as 2, which line 1 already uses"),
    ([{"query": "x"}, {"id": 1, "query": "y"}], "line 2: id: 1 already appears on line 1"),
])
def test_batch_refuses_an_id_used_twice(mem, tmp_path, capsys, monkeypatch, lines, fragment):
    """Two lines answered under one id could not be told apart in the output: refused before any search, as
    import refuses an id used twice."""
    from memlens.cli.main import main

    path = _batch(mem, monkeypatch)
    qf = tmp_path / "q.jsonl"
    qf.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["--store", path, "search", "--queries", str(qf), "--active-wing", "w"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"memlens: error: {qf}: {fragment}\n"
    qf.write_text("".join(json.dumps(q) + "\n" for q in ({"id": 1, "query": "x"}, {"id": "1", "query": "y"},
                                                         {"id": "A", "query": "z"}, {"id": "a", "query": "w"})))
    assert main(["--store", path, "search", "--queries", str(qf), "--active-wing", "w"]) == 0  # four distinct ids
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [1, "1", "A", "a"]


# -- 4. query length ------------------------------------------------------------------------------------

def test_long_query_is_refused_with_the_limit(mem):
    e = mem.add("hello world", wing="w")
    with pytest.raises(QueryError, match=f"limit is {MAX_QUERY_CHARS:,}"):
        mem.search("word " * 200_000)
    with pytest.raises(QueryError, match="limit is"):
        mem.explain("word " * 200_000, e.id)
    with pytest.raises(QueryError, match="limit is"):
        mem.context("word " * 200_000)
    assert len(mem.search("word " * (MAX_QUERY_CHARS // 5), use_cache=False).trace.query) == MAX_QUERY_CHARS


def test_many_terms_are_cut_and_the_trace_says_so(mem):
    e = mem.add("zebra", wing="w")
    words = [f"t{i}x" for i in range(MAX_QUERY_TERMS + 40)]
    fq = fts_query(" ".join(words))
    assert fq.count(" OR ") == MAX_QUERY_TERMS - 1
    b = mem.search(" ".join(words + ["zebra"]), use_cache=False)
    assert any(f"first {MAX_QUERY_TERMS} of the query's {MAX_QUERY_TERMS + 41}" in n for n in b.trace.notes)
    assert b.trace.candidates["lexical"] == 0  # "zebra" was past the cut
    b = mem.search(" ".join(["zebra", *words]), use_cache=False)
    assert [r.entry.id for r in b.results if r.components.bm25_rank] == [e.id]


def test_long_query_cli(tmp_path):
    proc = run_cli("--store", str(tmp_path / "s.db"), "search", "w " * 60_000, timeout=60)
    one_line_error(proc, f"the limit is {MAX_QUERY_CHARS:,}")
    assert not (tmp_path / "s.db").exists()


# -- 6. non-UTF-8 arguments -----------------------------------------------------------------------------

BAD = "caf\udce9"  # what Python makes of the bytes b"caf\xe9" in argv


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["add", BAD, "--wing", "w"], "TEXT is not valid UTF-8 (byte 0xe9 at character 4)"),
        (["add", "x", "--wing", "w", "--title", BAD], "--title is not valid UTF-8"),
        (["add", "x", "--wing", BAD], "--wing is not valid UTF-8"),
        (["search", BAD], "QUERY is not valid UTF-8"),
        (["search", "x", "--wing", BAD], "--wing is not valid UTF-8"),
        (["context", BAD, "--active-wing", "w"], "QUERY is not valid UTF-8"),
        (["explain", "x", "--id", BAD], "--id is not valid UTF-8"),
        (["task", "block", BAD, "--reason", "r"], "ID is not valid UTF-8"),
        (["task", "block", "t1", "--reason", BAD], "--reason is not valid UTF-8"),
        (["edit", "e1", f"title={BAD}"], "FIELD=VALUE is not valid UTF-8"),
    ],
)
def test_non_utf8_text_arguments_are_one_line_errors(tmp_path, args, fragment):
    store = tmp_path / "s.db"
    proc = run_cli("--store", str(store), *args, timeout=60)
    one_line_error(proc, fragment)
    assert not store.exists()


@pytest.mark.model
def test_non_utf8_file_names_work(tmp_path):
    store = tmp_path / "st\udce9.db"
    src = tmp_path / "in\udce9.jsonl"
    src.write_text(json.dumps({"id": "a1", "wing": "w", "text": "caf\u00e9 au lait"}) + "\n")
    imp = run_cli("--store", str(store), "import", str(src))
    assert imp.returncode == 0, imp.stderr
    out = run_cli("--store", str(store), "search", "lait", "--wing", "w", "--workspace", str(tmp_path / "w\udce9"))
    assert out.returncode == 0, out.stderr
    assert "a1" in out.stdout
    stats = run_cli("--store", str(store), "stats", errors="surrogateescape")  # it prints the file name's bytes
    assert stats.returncode == 0, stats.stderr
    assert str(store) in stats.stdout


def test_api_refuses_non_utf8_text(mem):
    for call in (lambda: mem.add(BAD, wing="w"), lambda: mem.add("x", wing="w", title=BAD),
                 lambda: mem.add("x", wing="w", meta={"k": [BAD]})):
        with pytest.raises(ValidationError, match="not valid UTF-8"):
            call()
    with pytest.raises(QueryError, match="not valid UTF-8"):
        mem.search(BAD)
    with pytest.raises(ValidationError, match="not valid UTF-8"):
        mem.search("x", active_wing=BAD)
    with pytest.raises(ValidationError, match="field 'intent': is not valid UTF-8"):
        mem.tasks.complete("t1", BAD)
    with pytest.raises(ValidationError, match="field 'reason': is not valid UTF-8"):
        mem.tasks.block("t2", BAD)
    assert mem.count() == 0 and mem.tasks.count() == 0


def test_import_refuses_lone_surrogates_from_json_escapes(mem, tmp_path):
    src = tmp_path / "esc.jsonl"
    src.write_text('{"id": "a1", "wing": "w", "text": "ok"}\n{"id": "a2", "wing": "w", "text": "caf\\udce9"}\n')
    with pytest.raises(ValidationError, match=r"line 2: field 'text': contains an unpaired surrogate \(not valid UTF-8\)"):
        mem.import_jsonl(src)
    assert mem.count() == 0


# -- 11. huge entries -----------------------------------------------------------------------------------

def test_entry_text_cap_on_add_update_import(mem, tmp_path):
    from memlens.limits import DEFAULT_MAX_ENTRY_CHARS

    long = "word " * (DEFAULT_MAX_ENTRY_CHARS // 5) + "x"
    with pytest.raises(ValidationError, match="limit is 100,000 .*split it into smaller entries"):
        mem.add(long, wing="w")
    e = mem.add("short", wing="w")
    with pytest.raises(ValidationError, match="limits.max_entry_chars"):
        mem.update(e.id, text=long)
    src = tmp_path / "big.jsonl"
    src.write_text(
        json.dumps({"id": "ok1", "wing": "w", "text": "fine"})
        + "\n"
        + json.dumps({"id": "big", "wing": "w", "text": long})
        + "\n"
    )
    with pytest.raises(ValidationError, match="line 2: field 'text': is 100,001 characters"):
        mem.import_jsonl(src)
    assert mem.count() == 1


def test_title_key_and_meta_are_bounded_too(mem):
    for kw, fragment in (({"title": "t" * 1001}, "field 'title': is 1,001 characters"),
                         ({"key": "k" * 1001}, "field 'key': is 1,001 characters"),
                         ({"wing": "w" * 100_000}, "field 'wing': is 100,000 characters; the limit is 1,000"),
                         ({"room": "r" * 1001}, "field 'room': is 1,001 characters"),
                         ({"meta": {"notes": "m" * 100_000}}, "field 'meta': is 100,013 characters as JSON")):
        with pytest.raises(ValidationError, match=fragment):
            mem.add("x", **{"wing": "w", **kw})
    assert mem.count() == 0


def test_entry_text_cap_is_a_setting(tmp_path):
    store = tmp_path / "s.db"
    proc = run_cli("--store", str(store), "add", "a" * 51, "--wing", "w", env={"MEMLENS_LIMITS__MAX_ENTRY_CHARS": "50"},
                   timeout=120)
    one_line_error(proc, "the limit is 50 (setting limits.max_entry_chars)")


@pytest.mark.model
def test_entry_from_before_the_cap_is_cut_in_context_and_budget(demo_mem, real_embedder):
    """An entry stored before the cap: context shows and counts only its first 100k characters."""
    mem = demo_mem
    huge = "Callbacks must never block the executor thread. " * 60_000  # 2.9M characters
    conn = mem.conn
    conn.execute("UPDATE entries SET text = ? WHERE id = 'py-anti-001'", (huge,))
    conn.commit()
    text = mem.context("mutable default arguments", active_wing="python", budget=500, use_cache=False)
    assert f"[cut at 100,000 of {len(huge):,} characters]" in text
    assert len(text) < 120_000
    b = mem.search("mutable default arguments", active_wing="python", budget=500, use_cache=False)
    item = next(i for i in b.trace.budget["items"] if i["id"] == "py-anti-001")
    assert item["tokens"] < real_embedder.count_tokens(huge[:200_000]) / 1.5
    # its other fields stay editable; a new text must fit
    assert mem.update("py-anti-001", status="under_review").status.value == "under_review"
    with pytest.raises(ValidationError, match="limit is 100,000"):
        mem.update("py-anti-001", text=huge)



def test_a_degenerate_stored_vector_is_not_reused_for_the_same_text(mem, store_path, tmp_path):
    first = mem.add("Pin the toolchain version in CI", wing="w1")
    _set_vector(store_path, first.id, DEGENERATE["zeros"])
    again = mem.add("Pin the toolchain version in CI", wing="w2")  # same text: normally reuses the stored vector
    assert np.any(mem.vector(again.id))
    src = tmp_path / "same.jsonl"
    src.write_text(json.dumps({"id": "imp1", "wing": "w3", "text": "Pin the toolchain version in CI"}) + "\n")
    mem.import_jsonl(src)
    assert np.any(mem.vector("imp1"))


@pytest.mark.parametrize("ts", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_timestamps_past_the_calendar_in_utc_are_errors(mem, tmp_path, ts):
    with pytest.raises(ValidationError, match="timestamp out of range"):
        mem.tasks.complete("t1", "x", completed_at=ts)
    src = tmp_path / "ts.jsonl"
    src.write_text(json.dumps({"id": "a1", "wing": "w", "text": "x", "created_at": ts}) + "\n")
    with pytest.raises(ValidationError, match="line 1: field 'created_at': timestamp out of range"):
        mem.import_jsonl(src)
    proc = run_cli("--store", str(tmp_path / "s.db"), "task", "block", "t2", "--reason", "r", "--at", ts, timeout=60)
    one_line_error(proc, "timestamp out of range")
