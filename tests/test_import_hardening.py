"""Hostile import lines and values: one line-numbered refusal each, the store unchanged."""

import base64
import io
import json
from datetime import timedelta, timezone

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memlens import Memory
from memlens.embed import HashEmbedder
from memlens.errors import MemlensError, ValidationError
from memlens.io.jsonl import parse_line
from memlens.models import format_ts, parse_ts

from .conftest import snapshot_store

GOOD = '{"id": "g1", "wing": "w", "text": "fine"}'


def _b64(values) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


def _vec_line(vector: str) -> str:
    return json.dumps({"id": "x", "wing": "w", "text": "t", "model": "hash-bow-384", "vector": vector})


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


HOSTILE = [
    # degenerate vectors, and every other way a vector enters
    (_vec_line(_b64(np.zeros(384))), "field 'vector' is all zeros"),
    (_vec_line(_b64([np.nan] * 384)), "field 'vector' contains NaN or infinity"),
    (_vec_line(_b64([np.inf] + [0.0] * 383)), "field 'vector' contains NaN or infinity"),
    (_vec_line(base64.b64encode(b"\0" * 1537).decode()), "field 'vector' is 1537 bytes, not a whole number"),
    (_vec_line(_b64(np.ones(383))), "field 'vector' has 383 dimensions, expected 384"),
    (_vec_line("AAA"), "field 'vector' is not valid base64"),
    ('{"id": "x", "wing": "w", "text": "t", "vector": 12, "model": "hash-bow-384"}', "field 'vector' must be base64 text"),
    # values that crashed the parser or the store
    ('{"id": "x", "wing": "w", "text": "t", "salience": ' + "1" * 5000 + "}", "invalid JSON: a number with 5000 digits"),
    ('{"id": "x", "wing": "w", "text": "t", "meta": ' + _nested(100_000) + "}", "invalid JSON: nested too deeply"),
    ('{"id": "x", "wing": "w", "text": "t", "title": ' + "[" * 5000 + "]" * 5000 + "}", "invalid JSON: nested too deeply"),
    ('{"id": "x", "wing": "w", "text": "t", "meta": ' + _nested(40) + "}", "field 'meta': nested deeper than 32 levels"),
    (
        '{"id": "x", "wing": "w", "text": "t", "created_at": "0001-01-01T00:00:00+14:00"}',
        "field 'created_at': timestamp out of range",
    ),
    (
        '{"id": "x", "wing": "w", "text": "t", "updated_at": "9999-12-31T23:00:00-14:00"}',
        "field 'updated_at': timestamp out of range",
    ),
    ('{"id": "x", "wing": "w", "text": "\\ud800"}', "field 'text': contains an unpaired surrogate"),
    ('{"id": "x", "wing": "w", "text": "t", "title": "a\\udfff"}', "field 'title': contains an unpaired surrogate"),
    ('{"id": "x", "wing": "w", "text": "t", "key": "\\udc80"}', "field 'key': contains an unpaired surrogate"),
    (
        '{"id": "x", "wing": "w", "text": "t", "meta": {"\\ud800": 1}}',
        "field 'meta': has a string that contains an unpaired surrogate",
    ),
    ('{"id": "x", "wing": "w", "text": "t", "meta": {"a": ["\\ud800"]}}', "field 'meta': has a string that contains an unpaired"),
    ('{"id": "x", "wing": "w", "text": "t", "meta": {"a": NaN}}', "invalid JSON: NaN is not a JSON number"),
    ('{"id": "x", "wing": "w", "text": "t", "meta": {"a": -Infinity}}', "invalid JSON: -Infinity is not a JSON number"),
    ('{"id": "x", "wing": "w", "text": "t", "meta": {"a": 1e999}}', "field 'meta': has NaN or an infinity"),
    ('{"id": "x", "wing": "w", "text": "t", "salience": NaN}', "invalid JSON: NaN is not a JSON number"),
    (
        '{"id": "x", "wing": "w", "text": "t", "meta": {"n": ' + "9" * 30 + "}}",
        "field 'meta': has an integer outside the 64-bit range",
    ),
    ('{"id": "x", "wing": "w", "text": "t", "id": "y"}', "invalid JSON: key 'id' appears twice in one object"),
    ('{"id": "x", "wing": "w", "text": "t", "meta": {"a": 1, "a": 2}}', "invalid JSON: key 'a' appears twice"),
    ('{"id": "x\\n", "wing": "w", "text": "t"}', "field 'id': must be 1-128 characters"),
    ('{"id": "x", "wing": "w", "text": "t", "key": "a\\u0000b"}', "field 'key': must not contain NUL bytes"),
    ('{"id": "x", "wing": "w", "text": "t", "title": "a\\u0000"}', "field 'title': must not contain NUL bytes"),
]


@pytest.mark.parametrize("bad, fragment", HOSTILE, ids=[f"case{i}" for i in range(len(HOSTILE))])
def test_hostile_line_is_refused_with_its_line_number(mem, store_path, tmp_path, bad, fragment):
    mem.add("already here", wing="w", id="pre")
    before = snapshot_store(store_path)
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + "\n" + bad + "\n" + '{"id": "g3", "wing": "w", "text": "after"}\n', encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        mem.import_jsonl(path)
    msg = str(err.value)
    assert f"line 2: {fragment}" in msg
    assert "\n" not in msg and len(msg) < 400
    assert snapshot_store(store_path) == before


def test_json_errors_name_the_column_once(mem, tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text('{"id": "x", "wing": "w", "text": "cut off', encoding="utf-8")  # no newline: the string never ends
    with pytest.raises(ValidationError) as err:
        mem.import_jsonl(path)
    assert "Unterminated string starting at column 34" in str(err.value)
    assert "at at" not in str(err.value)
    path.write_text('{"id": "x" "wing": "w"}\n', encoding="utf-8")
    with pytest.raises(ValidationError, match="Expecting ',' delimiter at column 12"):
        mem.import_jsonl(path)


def test_vector_not_of_unit_length_is_scaled(mem, tmp_path):
    v = np.zeros(384, dtype=np.float32)
    v[:2] = [3.0, 4.0]
    path = tmp_path / "v.jsonl"
    path.write_text(_vec_line(_b64(v)) + "\n", encoding="utf-8")
    mem.import_jsonl(path)
    stored = mem.vector("x")
    np.testing.assert_allclose(stored[:2], [0.6, 0.8], rtol=1e-6)
    assert abs(float(np.linalg.norm(stored)) - 1.0) < 1e-6


def test_year_one_round_trips(mem, tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text('{"id": "old", "wing": "w", "text": "very old", "created_at": "0001-01-01T00:00:00Z"}\n', encoding="utf-8")
    mem.import_jsonl(path)
    assert mem.get("old").to_record()["created_at"] == "0001-01-01T00:00:00Z"
    assert format_ts(parse_ts("0001-01-01T00:00:00Z")) == "0001-01-01T00:00:00Z"
    assert [r.entry.id for r in mem.search("very old", active_wing="w").results] == ["old"]


def test_byte_order_mark_on_the_first_line_is_accepted(mem, tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "bom", "wing": "w", "text": "ok"}\n')
    assert mem.import_jsonl(path)["imported"] == 1


def test_a_pipe_is_read_once_and_imported(tmp_path, settings):
    """A FIFO (or ``<(cmd)``) can be read only once: it is spooled like stdin, not read again (which would block)."""
    import os
    import threading

    from .conftest import run_cli

    store = tmp_path / "s.db"
    with Memory.open(store, settings=settings, embedder=HashEmbedder()):
        pass
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    v = HashEmbedder().embed(["through a pipe"])[0]
    line = json.dumps({"id": "p1", "wing": "w", "text": "through a pipe", "model": "hash-bow-384", "vector": _b64(v)})

    def feed() -> None:
        with fifo.open("w") as fh:
            fh.write(line + "\n")

    threading.Thread(target=feed, daemon=True).start()
    done = run_cli("--store", str(store), "import", str(fifo), timeout=60)
    assert done.returncode == 0, done.stderr
    with Memory.open(store, settings=settings, embedder=HashEmbedder()) as mem:
        assert mem.get("p1").text == "through a pipe"


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"text": "\ud800"}, "field 'text': contains an unpaired surrogate"),
        ({"meta": {"x": float("nan")}}, "field 'meta': has NaN"),
        ({"meta": {"x": object()}}, "field 'meta': has a value of type object"),
        ({"meta": {"x": 2**70}}, "field 'meta': has an integer outside the 64-bit range"),
        ({"created_at": "0001-01-01T00:00:00+14:00"}, "field 'created_at': timestamp out of range"),
    ],
)
def test_memory_add_refuses_the_same_values(mem, store_path, fields, fragment):
    before = snapshot_store(store_path)
    args = {"text": "t", "wing": "w", **fields}
    with pytest.raises(ValidationError, match=fragment):
        mem.add(args.pop("text"), wing=args.pop("wing"), **args)
    assert snapshot_store(store_path) == before


def test_memory_add_refuses_deep_python_meta(mem, store_path):
    deep: dict = {}
    cur = deep
    for _ in range(100_000):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(ValidationError, match="nested deeper than 32 levels"):
        mem.add("t", wing="w", meta=deep)
    with pytest.raises(ValidationError, match="unpaired surrogate"):
        mem.update(mem.add("ok", wing="w").id, meta={"k": "\udc00"})


# -- property-based: whatever the line, a clean error or a clean import -------------------

_chars = st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", "\x00", "\ufeff", "\n"]))


def _txt(n: int) -> st.SearchStrategy[str]:
    return st.text(_chars, max_size=n)


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _txt(12))
_json = st.recursive(_scalars, lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(_txt(5), kids, max_size=3)),
                     max_leaves=12)
_stamps = st.builds(lambda d, h: d.replace(tzinfo=timezone(timedelta(hours=h))).isoformat(),
                    st.datetimes(), st.integers(-14, 14))
_field_values = {
    "id": st.one_of(_txt(10), st.just("dup"), _json),
    "wing": st.one_of(st.sampled_from(["w", "_global", " x ", ""]), _txt(6), _json),
    "room": st.one_of(_txt(6), _json),
    "kind": st.one_of(st.sampled_from(["fact", "turn", "law"]), _json),
    "type": st.one_of(st.sampled_from(["note", "invariant", "x"]), _json),
    "status": st.one_of(st.sampled_from(["active", "deprecated", "gone"]), _json),
    "title": st.one_of(_txt(20), _json),
    "text": st.one_of(_txt(30), _json),
    "key": st.one_of(st.none(), _txt(6), _json),
    "salience": st.one_of(st.floats(), st.integers(), _json),
    "overrides": st.one_of(st.none(), st.just("dup"), _txt(4)),
    "created_at": st.one_of(_stamps, _txt(25), _json),
    "meta": _json,
    "model": st.one_of(st.just("hash-bow-384"), _txt(4)),
    "vector": st.one_of(st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()), _txt(8),
                        st.lists(st.floats(width=32), min_size=384, max_size=384).map(_b64)),
    "surprise": _json,
}
_field_values["created_at"] = st.one_of(_stamps, st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"]),
                                        _txt(25), _json)
_field_values["text"] = st.one_of(st.text(_chars, min_size=1, max_size=30), _json)
# one field drawn freely on an otherwise valid record (reaches the deep checks), or many at once
_one_field = st.sampled_from(sorted(_field_values)).flatmap(
    lambda k: _field_values[k].map(lambda v: {"wing": "w", "text": "base", k: v}))
_records = st.one_of(_one_field,
                     st.fixed_dictionaries({}, optional=_field_values).map(lambda r: {"wing": "w", "text": "base", **r}))
_lines = st.one_of(
    _records.map(lambda r: json.dumps(r, allow_nan=True).encode()),
    _txt(60).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=60),
)


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(_lines, min_size=1, max_size=4))
def test_generated_lines_give_clean_errors_only(mem, store_path, tmp_path, lines):
    _ = mem.conn  # the store exists
    before = snapshot_store(store_path)
    path = tmp_path / "gen.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
    try:
        mem.import_jsonl(path)
    except MemlensError as exc:
        assert "\n" not in str(exc)
        assert snapshot_store(store_path) == before
    else:  # imported: what is stored exports as strict JSON that imports back; then remove it again
        buf = io.StringIO()
        mem.export_jsonl(buf, with_vectors=True)
        for line in buf.getvalue().splitlines():
            parse_line(path, 1, line, "hash-bow-384", 384)
        for e in list(mem.entries()):
            mem.delete(e.id)


@hsettings(max_examples=300, deadline=None)
@given(text=st.one_of(_txt(200), _records.map(lambda r: json.dumps(r, allow_nan=True))))
def test_parse_line_raises_only_validation_errors(text):
    from pathlib import Path

    try:
        parse_line(Path("f.jsonl"), 7, text, "hash-bow-384", 384)
    except ValidationError as exc:
        assert str(exc).startswith("f.jsonl: line 7: ")


def test_rows_written_by_earlier_versions_still_read_and_export_cleanly(mem, store_path):
    """Earlier versions stored year 1 as "1-01-01T…" and accepted NaN in meta: reading works, export refuses in one line."""
    mem.add("legacy entry", wing="w", id="legacy")
    mem.conn.execute("UPDATE entries SET created_at = '1-01-01T00:00:00Z', meta = '{\"x\": NaN}' WHERE id = 'legacy'")
    e = mem.get("legacy")
    assert e.created_at.year == 1 and e.to_record()["created_at"] == "0001-01-01T00:00:00Z"
    assert [r.entry.id for r in mem.search("legacy entry", active_wing="w").results] == ["legacy"]
    with pytest.raises(MemlensError, match="entry 'legacy' holds NaN or an infinity in 'meta'"):
        mem.export_jsonl(io.StringIO())
