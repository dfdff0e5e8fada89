"""``memlens salvage`` copies what replay keeps: the retrieval log and the golden queries, the rows that decode."""

from __future__ import annotations

from memlens.replay import golden, storage
from tests.conftest import bounded


def test_salvage_copies_the_retrieval_log_and_golden_queries_and_skips_damaged_rows(mem, store_path, tmp_path):
    from memlens import Memory
    from memlens.store.check import check_store
    from memlens.store.salvage import salvage

    ids = [mem.add(t, wing="w").id for t in ("alpha beta", "gamma delta", "alpha epsilon", "zeta eta")]
    for q in ("alpha", "gamma", "alpha epsilon", "zeta"):
        mem.search(q, active_wing="w", k=3)
    mem.context("alpha", active_wing="w")
    for q, expect in (("alpha", ids[0]), ("gamma", ids[1]), ("zeta", ids[3])):
        golden.add(mem, q, expect, within=3)
    conn = mem.conn
    seqs = [s for (s,) in conn.execute("SELECT seq FROM retrieval_log ORDER BY seq")]
    assert len(seqs) == 5
    # damage, as a hand edit would: hits that are not JSON, a request that is not an object, a golden
    # query asking for nothing, and a log row whose audit row does not exist
    conn.execute("UPDATE retrieval_log SET hits = 'not json' WHERE seq = ?", (seqs[1],))
    conn.execute("UPDATE retrieval_log SET request = '[1, 2]' WHERE seq = ?", (seqs[2],))
    conn.execute("INSERT INTO retrieval_log(seq, request, client, context, hits) VALUES (?, ?, 'cli', 0, '[]')",
                 (seqs[-1] + 1000, '{"query": "orphan"}'))
    gids = [g["id"] for g in golden.listing(mem)]
    conn.execute("UPDATE golden SET within = 0 WHERE id = ?", (gids[1],))
    kept_log = [e for e in storage.logged(mem) if e["seq"] not in (seqs[1], seqs[2])]
    kept_golden = [g for g in golden.listing(mem) if g["id"] != gids[1]]
    assert [e["seq"] for e in kept_log] == [seqs[0], seqs[3], seqs[4]] and kept_log[-1]["context"] is True
    mem.close()

    new = tmp_path / "new.db"
    out = bounded(lambda: salvage(store_path, new, settings=mem.settings, embedder=mem._embedder))
    assert (out["retrieval_log"], out["retrieval_log_skipped"]) == (3, 3)
    assert (out["golden"], out["golden_skipped"]) == (2, 1)
    assert out["saved"] == 4 and out["lost"] == 0
    with Memory.open(new, settings=mem.settings, embedder=mem._embedder, create=False) as copy:
        assert storage.logged(copy) == kept_log  # same seq, time, request, client, context flag and ranked hits
        assert storage.golden_list(copy) == kept_golden
        expected = [e["seq"] for e in kept_log if ids[0] in [h["id"] for h in e["hits"]]][::-1]
        assert expected and [a["seq"] for a in storage.access(copy, ids[0])] == expected  # the access log reads it
    assert bounded(lambda: check_store(new))["ok"]
