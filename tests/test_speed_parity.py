"""The speed layer (``memlens.store.speed``) changes no ranking.

The plain SQLite path (``search.vector_index = "sqlite-vec"``: every read is SQL) is the reference. Each search is
run on it and, right after, on copies of the same store with the layer on:

* ``auto``, never warmed: what the layer keeps from the start (stamps, the wings and rooms);
* ``auto`` after ``warm_index(text=True)``: the vectors, rows and every word's postings held in process (what
  ``memlens eval`` and the app use);
* ``auto`` after ``warm_index()``: the vectors held in process, postings read the second time a word is asked.

Every question set (tests/data/<set>, real model) and the demo memory's searches (each entry's title, in one of the
scopes tests use: everywhere, its wing active, its wing only) run twice, so the second pass meets everything the
first one kept; the demo's searches run again after writes (an entry added, one updated, one deleted), which every
copy must see. The results must be the same entries in the same order, with the same scores (the vector
similarity is computed by sqlite-vec on one side and numpy on the other: equal within float32 rounding).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DEMO
from tests.data import beir

MODES = {"auto": None, "warm": True, "vectors": False}  # name -> warm_index(text=...) at the start, or None: never
SCORE_TOLERANCE = 1e-5

Search = tuple[str, dict[str, Any]]


def _open(path: Path, tmp: Path, name: str, setting: str, real_embedder: Any) -> Any:
    from memlens import Memory
    from memlens.config import load_settings

    copy = tmp / f"{name}.db"
    shutil.copy(path, copy)
    return Memory.open(copy, settings=load_settings(search={"vector_index": setting}), embedder=real_embedder)


def _ranked(mem: Any, query: str, kw: dict[str, Any]) -> list[tuple[str, float]]:
    return [(r.entry.id, r.score) for r in mem.search(query, use_cache=False, **kw).results]


def _differences(mems: dict[str, Any], searches: list[Search], label: str) -> list[str]:
    """Each search on the reference and then on every copy with the layer on; what differs, one line each."""
    out = []
    for query, kw in searches:
        want = _ranked(mems["off"], query, kw)
        for name in MODES:
            got = _ranked(mems[name], query, kw)
            same_order = [i for i, _ in got] == [i for i, _ in want]
            if not same_order or any(abs(a - b) > SCORE_TOLERANCE for (_, a), (_, b) in zip(got, want)):
                at = next((i for i, (a, b) in enumerate(zip(got, want)) if a[0] != b[0] or abs(a[1] - b[1]) > SCORE_TOLERANCE),
                          min(len(got), len(want)))
                out.append(f"{label} {name} {query!r} {kw}: from rank {at + 1}, {got[at:at + 2]} != {want[at:at + 2]}")
    return out


@pytest.fixture
def opened(tmp_path, real_embedder):
    """open(store) -> the reference and one copy per mode, warmed as the mode says; closed after the test."""
    held: list[Any] = []

    def open_all(path: Path) -> dict[str, Any]:
        mems = {"off": _open(path, tmp_path, "off", "sqlite-vec", real_embedder)}
        for name, text in MODES.items():
            mems[name] = _open(path, tmp_path, name, "auto", real_embedder)
            if text is not None:
                assert mems[name].warm_index(text=text) > 0
        held.extend(mems.values())
        assert mems["off"].vector_index is None and mems["off"].store.speed is None
        assert mems["warm"].vector_index is not None and mems["auto"].vector_index is None
        return mems

    yield open_all
    for mem in held:
        mem.close()


@pytest.mark.parametrize("name", beir.SETS)
def test_every_question_set_ranks_the_same_with_the_speed_layer_on_and_off(question_stores, opened, name):
    from memlens.retrieval.evaluate import load_queries

    queries = load_queries(beir.DATA / name / "queries.jsonl")
    searches: list[Search] = [(q["text"], {"k": 10, "profile": "memory"}) for q in queries]  # as `memlens eval`
    mems = opened(question_stores[name])
    diffs = [d for p in (1, 2) for d in _differences(mems, searches, f"{name} pass {p}")]
    assert not diffs, f"{len(diffs)} searches differ:\n" + "\n".join(diffs[:10])


def _demo_searches() -> list[Search]:
    import json
    import re

    entries = [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines() if line.strip()]
    out: list[Search] = []
    for i, e in enumerate(entries):
        words = re.sub(r"[^\w\s]", " ", e["title"])  # plain words: a title may hold query syntax (`key=value`)
        scopes: list[dict[str, Any]] = [{}, {"active_wing": e["wing"]}, {"wings": [e["wing"]], "k": 20}]
        out.append((words, scopes[i % 3]))
    return out


def test_the_demo_memorys_searches_rank_the_same_with_the_speed_layer_on_and_off_before_and_after_writes(
        demo_store, opened):
    mems = opened(demo_store)
    searches = _demo_searches()
    diffs = [d for p in (1, 2) for d in _differences(mems, searches, f"demo pass {p}")]
    first = searches[0]
    victim, edited = _ranked(mems["off"], *first)[0][0], _ranked(mems["off"], *first)[1][0]
    for mem in mems.values():  # the same writes on every copy; each must see them at its next search
        mem.add(f"{first[0]}: a new entry that says so again", wing="lifecore_ros2", id="parity-added")
        mem.update(edited, text=f"{first[0]} (rewritten for the parity test)")
        mem.delete(victim)
    after = _differences(mems, searches, "demo after writes")
    assert not diffs + after, f"{len(diffs + after)} searches differ:\n" + "\n".join((diffs + after)[:10])
    assert victim not in {i for i, _ in _ranked(mems["warm"], *first)}
    assert "parity-added" in {i for i, _ in _ranked(mems["warm"], *first)}
