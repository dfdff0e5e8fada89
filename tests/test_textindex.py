"""The text index is merged after bulk writes (memlens.store.textindex): an import written in many short
transactions leaves FTS5 one segment, not one per transaction, and finds exactly what it found before."""

from __future__ import annotations

import json

from memlens.store import staging, textindex


def _jsonl(path, n: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"e{i}", "wing": "w", "title": f"topic {i % 41}",
                                 "text": f"entry {i} about gardens, rivers and word {i % 97}"}) + "\n")


def _matches(mem, term: str) -> list[tuple[int, float]]:
    return mem.conn.execute("SELECT rowid, bm25(entries_fts, 2.0, 1.0) FROM entries_fts WHERE entries_fts MATCH ? "
                            "ORDER BY 2, rowid", (term,)).fetchall()


def test_an_import_in_many_transactions_leaves_one_segment(mem, tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "BATCH_S", 0.0)  # one 64-row transaction at a time: a segment each
    monkeypatch.setattr(staging, "pause", lambda: None)
    monkeypatch.setattr(textindex, "tidy", lambda conn, path: False)
    _jsonl(tmp_path / "a.jsonl", 1500)
    mem.import_jsonl(tmp_path / "a.jsonl")
    before = textindex.segments(mem.conn)
    assert before > textindex.SEGMENTS_MAX  # what an untidied import leaves
    found = {t: _matches(mem, t) for t in ("gardens", "word", "topic", "entry")}
    monkeypatch.undo()
    assert textindex.tidy(mem.conn, mem.path) is True
    assert textindex.segments(mem.conn) == 1
    assert {t: _matches(mem, t) for t in found} == found


def test_import_tidies_and_a_small_index_is_left_alone(mem, tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "BATCH_S", 0.0)
    monkeypatch.setattr(staging, "pause", lambda: None)
    _jsonl(tmp_path / "a.jsonl", 1500)
    mem.import_jsonl(tmp_path / "a.jsonl")
    assert textindex.segments(mem.conn) == 1
    new = mem.add("one more entry about rivers and a heron", wing="w")
    assert textindex.tidy(mem.conn, mem.path) is False  # few segments: nothing rewritten
    rowid = mem.conn.execute("SELECT rowid FROM entries WHERE id = ?", (new.id,)).fetchone()[0]
    assert [r for r, _ in _matches(mem, "heron")] == [rowid]


def test_a_large_index_keeps_its_segments(mem, tmp_path, monkeypatch):
    """Rewriting a large index would hold the write lock for seconds: above ROWS_MAX rows nothing is merged."""
    monkeypatch.setattr(staging, "BATCH_S", 0.0)
    monkeypatch.setattr(staging, "pause", lambda: None)
    monkeypatch.setattr(textindex, "ROWS_MAX", 1000)
    _jsonl(tmp_path / "a.jsonl", 1500)
    mem.import_jsonl(tmp_path / "a.jsonl")
    assert textindex.rows(mem.conn) == 1500
    assert textindex.segments(mem.conn) > textindex.SEGMENTS_MAX
    assert textindex.tidy(mem.conn, mem.path) is False
