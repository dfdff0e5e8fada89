"""The 1M PostgreSQL benchmark's store builder: copies keep their wing, get ids of their own, and read back through
memlens's own JSONL parser as the vectors the exact answer is computed on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from memlens.io.jsonl import parse_line
from tests.bench.postgres_1m import exact_numpy, noisy_store, write_jsonl


def _real(n: int, dim: int = 16) -> tuple[list[dict[str, Any]], np.ndarray]:
    rng = np.random.default_rng(1)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    records = [{"id": f"c{i:04d}", "wing": f"wing_{i % 3}", "kind": "document", "type": "note", "title": f"t{i}",
                "text": f"chunk {i} of some text", "created_at": "2026-01-01T00:00:00Z", "meta": {"source": "x"}}
               for i in range(n)]
    return records, v / np.linalg.norm(v, axis=1, keepdims=True)


def test_copies_keep_wing_and_get_unique_ids() -> None:
    records, vecs = _real(40)
    store = noisy_store([r["id"] for r in records], [r["wing"] for r in records], vecs, 130)
    assert len(set(store.ids)) == 130 and store.ids[:40] == [r["id"] for r in records]
    assert store.ids[40] == "c0000-1" and store.ids[129] == "c0009-3"
    assert store.wings == [records[o]["wing"] for o in store.origin]
    np.testing.assert_array_equal(store.vectors[:40], vecs)  # the real vectors untouched
    cos = np.einsum("ij,ij->i", store.vectors[40:], vecs[store.origin[40:]])
    assert np.allclose(np.linalg.norm(store.vectors, axis=1), 1, atol=1e-5)
    assert 0.85 < cos.min() and cos.max() < 0.999  # near their original, never equal to it
    assert len({store.vectors[i].tobytes() for i in range(130)}) == 130


def test_jsonl_reads_back_and_exact_answer_respects_scope(tmp_path: Path) -> None:
    records, vecs = _real(30)
    store = noisy_store([r["id"] for r in records], [r["wing"] for r in records], vecs, 75)
    path = tmp_path / "c.jsonl"
    write_jsonl(path, records, store, "m")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 75
    for i in (0, 29, 30, 74):
        entry, blob = parse_line(path, i + 1, lines[i], "m", 16)
        assert entry.id == store.ids[i] and entry.wing == store.wings[i] and entry.text == records[store.origin[i]]["text"]
        assert blob is not None
        np.testing.assert_allclose(np.frombuffer(blob, dtype="<f4"), store.vectors[i], atol=1e-6)
    rowids = np.arange(75) + 1
    q = store.vectors[[3, 50]] + 0.01
    got = exact_numpy(store, rowids, q, ["wing_1"])
    for qi, e in zip(q, got):
        sims = store.vectors @ qi
        want = [int(i) + 1 for i in sorted(np.flatnonzero(np.array(store.wings) == "wing_1"), key=lambda i: -sims[i])[:10]]
        assert [h[0] for h in e.hits] == want
