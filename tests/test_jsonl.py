"""JSONL import/export: lossless round trips and all-or-nothing imports."""

import base64
import io
import json

import numpy as np
import pytest

from memlens import Memory
from memlens.embed import HashEmbedder
from memlens.errors import MemlensError, ValidationError
from memlens.models import content_hash, embed_text

from .conftest import DEMO, snapshot_store


def _export(mem, **kw) -> str:
    buf = io.StringIO()
    mem.export_jsonl(buf, **kw)
    return buf.getvalue()


def _write(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


class CountingEmbedder(HashEmbedder):
    def __init__(self):
        super().__init__()
        self.n = 0

    def embed(self, texts):
        self.n += len(texts)
        return super().embed(texts)


def test_demo_round_trips_losslessly_without_vectors(tmp_path, settings):
    with Memory.open(tmp_path / "a.db", settings=settings, embedder=HashEmbedder()) as a:
        a.import_jsonl(DEMO)
        first = _export(a)
    assert len(first.splitlines()) == len(DEMO.read_text().splitlines())
    # every field of the demo file survives (the file writes key/overrides as null too)
    src = [json.loads(line) for line in DEMO.read_text().splitlines()]
    out = [json.loads(line) for line in first.splitlines()]
    assert out == src
    dump = _write(tmp_path / "dump.jsonl", first.splitlines())
    with Memory.open(tmp_path / "b.db", settings=settings, embedder=HashEmbedder()) as b:
        b.import_jsonl(dump)
        assert _export(b) == first


def test_round_trip_with_vectors_reuses_them(tmp_path, settings):
    with Memory.open(tmp_path / "a.db", settings=settings, embedder=HashEmbedder()) as a:
        a.import_jsonl(DEMO)
        with_vecs = _export(a, with_vectors=True)
        some = next(iter(a.entries()))
        v_a = a.vector(some.id)
    rec = json.loads(with_vecs.splitlines()[0])
    assert rec["model"] == "hash-bow-384"
    assert len(base64.b64decode(rec["vector"])) == 384 * 4
    emb = CountingEmbedder()
    with Memory.open(tmp_path / "b.db", settings=settings, embedder=emb) as b:
        report = b.import_jsonl(_write(tmp_path / "v.jsonl", with_vecs.splitlines()))
        assert emb.n == 0, "vectors of the same model must be reused, not re-embedded"
        assert report == {"imported": 167, "embedded": 0, "reused_vectors": 167}
        np.testing.assert_array_equal(b.vector(some.id), v_a)
        assert _export(b, with_vectors=True) == with_vecs


def test_a_line_whose_text_is_not_what_its_vector_was_made_from_is_embedded_again(tmp_path, settings):
    """Curating an export by hand: the edited line's vector belonged to the old text (it would be served as fresh)."""
    with Memory.open(tmp_path / "a.db", settings=settings, embedder=HashEmbedder()) as a:
        a.import_jsonl(DEMO)
        lines = [json.loads(x) for x in _export(a, with_vectors=True).splitlines()]
    assert all(x["vector_of"] == content_hash(embed_text(x["title"], x["text"])) for x in lines)
    edited = lines[3]
    edited["text"] = "Tide tables for the north harbour are printed every week."
    emb = CountingEmbedder()
    with Memory.open(tmp_path / "b.db", settings=settings, embedder=emb) as b:
        report = b.import_jsonl(_write(tmp_path / "edited.jsonl", [json.dumps(x) for x in lines]))
        assert report == {"imported": 167, "embedded": 1, "reused_vectors": 166} and emb.n == 1
        e = b.get(edited["id"])
        np.testing.assert_array_equal(b.vector(e.id), HashEmbedder().embed([e.embed_text])[0])
        hit = next(r for r in b.search("north harbour tide tables printed weekly").results if r.entry.id == e.id)
        assert hit.vector == {"fresh": True, "model": "hash-bow-384", "hash_matches": True}
        assert json.loads(_export(b, with_vectors=True).splitlines()[3])["vector_of"] == content_hash(e.embed_text)
    bad = {**lines[0], "vector_of": 7}
    with Memory.open(tmp_path / "c.db", settings=settings, embedder=HashEmbedder()) as c:
        with pytest.raises(ValidationError, match="line 1: field 'vector_of' must be the content hash of a text"):
            c.import_jsonl(_write(tmp_path / "bad.jsonl", [json.dumps(bad)]))


def test_vectors_of_another_model_are_re_embedded(tmp_path, settings):
    line = {
        "id": "a",
        "wing": "w",
        "text": "hello there",
        "model": "some-other-model@123",
        "vector": base64.b64encode(b"\0" * 16).decode(),
    }
    emb = CountingEmbedder()
    with Memory.open(tmp_path / "b.db", settings=settings, embedder=emb) as b:
        report = b.import_jsonl(_write(tmp_path / "f.jsonl", [line]))
    assert report["embedded"] == 1 and emb.n == 1


def test_minimal_lines_get_defaults(mem, tmp_path):
    mem.import_jsonl(_write(tmp_path / "m.jsonl", [{"wing": "w", "text": "only text"}, "", {"wing": "w", "text": "two"}]))
    entries = list(mem.entries())
    assert [(e.kind.value, e.type.value, e.status.value) for e in entries] == [("fact", "note", "active")] * 2
    assert len({e.id for e in entries}) == 2


def test_duplicate_texts_in_one_file_are_embedded_once(tmp_path, settings):
    emb = CountingEmbedder()
    lines = [{"wing": "python", "text": "same"}, {"wing": "_global", "text": "same"}, {"wing": "w", "text": "other"}]
    with Memory.open(tmp_path / "x.db", settings=settings, embedder=emb) as m:
        report = m.import_jsonl(_write(tmp_path / "d.jsonl", lines))
    assert emb.n == 2 and report["embedded"] == 2 and report["reused_vectors"] == 1


GOOD = {"id": "g1", "wing": "w", "text": "fine"}


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ('{"id": "x", "wing": "w", "text": "unterminated', "line 2: invalid JSON"),
        ('["not", "an", "object"]', "line 2: expected a JSON object, got an array"),
        ("null", "line 2: expected a JSON object, got null"),
        ('"text"', "line 2: expected a JSON object, got a string"),
        ({"id": "x", "text": "no wing"}, "line 2: field 'wing' is required"),
        ({"id": "x", "wing": "w", "text": "t", "type": "law"}, "line 2: field 'type'"),
        ({"id": "x", "wing": "w", "text": "t", "status": "gone"}, "line 2: field 'status'"),
        ({"id": "x", "wing": "w", "text": "t", "salience": "high"}, "line 2: field 'salience'"),
        ({"id": "x", "wing": "w", "text": "t", "created_at": "yesterday"}, "line 2: field 'created_at'"),
        ({"id": "x", "wing": "w", "text": "t", "surprise": 1}, "line 2: unknown field 'surprise'"),
        ({"id": "g1", "wing": "w", "text": "dup"}, "line 2: field 'id': 'g1' already appears on line 1"),
        ({"id": "x", "wing": "w", "text": "t", "overrides": "ghost"}, "line 2: field 'overrides': no entry with id 'ghost'"),
        (
            {"id": "x", "wing": "w", "text": "t", "model": "hash-bow-384", "vector": "AAAAAA=="},
            "line 2: field 'vector' has 1 dimensions, expected 384",
        ),
        (
            {"id": "x", "wing": "w", "text": "t", "model": "hash-bow-384", "vector": "***"},
            "line 2: field 'vector' is not valid base64",
        ),
    ],
)
def test_bad_line_names_line_and_field_and_changes_nothing(mem, store_path, tmp_path, bad, fragment):
    mem.add("already here", wing="w", id="pre")
    before = snapshot_store(store_path)
    path = _write(tmp_path / "bad.jsonl", [GOOD, bad, {"id": "g3", "wing": "w", "text": "after"}])
    with pytest.raises(ValidationError) as err:
        mem.import_jsonl(path)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)
    assert snapshot_store(store_path) == before


def test_id_already_in_store_is_refused(mem, store_path, tmp_path):
    mem.add("already here", wing="w", id="pre")
    before = snapshot_store(store_path)
    with pytest.raises(ValidationError, match="line 1: field 'id': 'pre' already exists in the store"):
        mem.import_jsonl(_write(tmp_path / "f.jsonl", [{"id": "pre", "wing": "w", "text": "again"}]))
    assert snapshot_store(store_path) == before


def test_binary_and_non_utf8_files_are_refused(mem, store_path, tmp_path):
    before = snapshot_store(store_path)
    binary = tmp_path / "blob.jsonl"
    binary.write_bytes(b'{"wing": "w", "text": "ok"}\n\x7fELF\x02\x01\x01\x00\x00\x00')
    with pytest.raises(ValidationError, match="line 2: binary data"):
        mem.import_jsonl(binary)
    png = tmp_path / "img.jsonl"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValidationError, match="line 1: not UTF-8"):
        mem.import_jsonl(png)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"wing": "w", "text": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(ValidationError, match="line 1: not UTF-8"):
        mem.import_jsonl(latin)
    with pytest.raises(MemlensError, match="no such file"):
        mem.import_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(MemlensError, match="is a directory"):
        mem.import_jsonl(tmp_path)
    assert snapshot_store(store_path) == before


def test_failure_while_embedding_writes_nothing(tmp_path, settings):
    class Exploding(HashEmbedder):
        def embed(self, texts):
            raise MemlensError("model crashed")

    path = tmp_path / "x.db"
    with Memory.open(path, settings=settings, embedder=HashEmbedder()) as m:
        m.add("seed", wing="w")
    before = snapshot_store(path)
    with Memory.open(path, settings=settings, embedder=Exploding()) as m:
        with pytest.raises(MemlensError, match="model crashed"):
            m.import_jsonl(_write(tmp_path / "f.jsonl", [{"wing": "w", "text": "new"}]))
    assert snapshot_store(path) == before


def test_overrides_may_point_into_the_same_file(mem, tmp_path):
    mem.import_jsonl(_write(tmp_path / "o.jsonl", [
        {"id": "shared", "wing": "ros2", "text": "depth 10"},
        {"id": "proj", "wing": "p", "text": "depth 1", "overrides": "shared"},
    ]))
    assert mem.get("proj").overrides == "shared"


def test_a_file_whose_overrides_make_a_cycle_is_refused_before_anything_is_written(mem, tmp_path):
    mem.add("seed", wing="w", id="seed")
    before = snapshot_store(mem.path)
    lines = [{"id": "a", "wing": "w", "text": "first"}, {"id": "c", "wing": "w", "text": "third", "overrides": "d"},
             {"id": "d", "wing": "w", "text": "fourth", "overrides": "e"},
             {"id": "e", "wing": "w", "text": "fifth", "overrides": "c"}]
    with pytest.raises(ValidationError, match=r"line 2: field 'overrides': c -> d -> e -> c would be a cycle of overrides"):
        mem.import_jsonl(_write(tmp_path / "cycle.jsonl", lines))
    assert snapshot_store(mem.path) == before
    lines[3]["overrides"] = "seed"  # a chain, not a cycle
    mem.import_jsonl(_write(tmp_path / "chain.jsonl", lines))
    assert mem.get("c").overrides == "d" and mem.get("e").overrides == "seed"


def test_export_by_wing(mem):
    mem.add("a", wing="x")
    mem.add("b", wing="y")
    out = [json.loads(line) for line in _export(mem, wing="y").splitlines()]
    assert [r["text"] for r in out] == ["b"]
