"""The associative code memory: indexing a workspace of real Python code, and its gates at retrieval time.

Mechanics with the hashing embedder; retrieval quality with the real model is in test_ingest_model.py.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from memlens.ingest import index, index_status, recall, storage
from tests.conftest import run_cli, snapshot_store
from tests.ingest_material import code_workspace


@pytest.fixture
def ws(tmp_path):
    root = code_workspace(tmp_path / "ws", ("json", "email"))
    return root


def test_walker_honours_gitignore_skip_list_binaries_size_and_symlinks(mem, ws, tmp_path):
    (ws / ".gitignore").write_text("*.log\nemail/mime/\n!keep.log\n")
    (ws / "debug.log").write_text("noise\n")
    (ws / "keep.log").write_text("kept because the .gitignore says so\n")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "x.js").write_text("var x = 1;\n")
    (ws / "data.bin").write_bytes(b"head\x00tail" * 10)
    (ws / "big.py").write_text("x = 1\n" * 100_000)
    (ws / "latin1.py").write_bytes(b"name = 'caf\xe9'\n")
    outside = tmp_path / "secret.py"
    outside.write_text("API_KEY = 'never indexed'\n")
    (ws / "escape.py").symlink_to(outside)
    (ws / "inner.py").symlink_to(ws / "json" / "decoder.py")
    (ws / "sub").mkdir()
    (ws / "sub" / ".gitignore").write_text("local_only.py\n")
    (ws / "sub" / "local_only.py").write_text("x = 2\n")
    out = index(mem, ws, wing="proj")
    reasons = {os.path.relpath(s["path"], ws): s["reason"] for s in out["skipped"]}
    assert reasons["debug.log"] == "ignored by .gitignore" and "keep.log" not in reasons
    assert reasons["email/mime"] == "ignored by .gitignore"
    assert reasons["sub/local_only.py"] == "ignored by .gitignore"
    assert reasons["node_modules"] == "folder on the default skip list"
    assert reasons["data.bin"].startswith("binary")
    assert reasons["big.py"].startswith("larger than 500 KB")
    assert reasons["latin1.py"].startswith("not UTF-8 text")
    assert reasons["escape.py"] == "symbolic link out of the folder (never followed)"
    assert reasons["inner.py"].startswith("symbolic link inside the folder")
    sources = {os.path.relpath(s.path, ws) for s in storage.all_sources(mem, "proj")}
    assert "keep.log" in sources and "json/decoder.py" in sources
    assert not any("never indexed" in e.text for e in mem.entries())
    assert not any(p.startswith(("email/mime/", "node_modules")) for p in sources)


def test_python_is_chunked_at_syntax_boundaries(mem, ws):
    index(mem, ws, wing="proj")
    entries = [e for e in mem.entries("proj") if e.meta["path"] == "json/decoder.py"]
    assert {e.kind.value for e in entries} == {"code"} and {e.meta["parser"] for e in entries} == {"code:tree-sitter:python"}
    src = (ws / "json" / "decoder.py").read_text().split("\n")
    spans = sorted(tuple(e.meta["lines"]) for e in entries)
    for (_, b), (c, _) in zip(spans, spans[1:]):
        assert c == b + 1  # contiguous, no overlap
    assert spans[0][0] == 1
    for e in entries:
        a, b = e.meta["lines"]
        assert e.text == "\n".join(src[a - 1 : b])  # exactly the file's lines
        assert e.title.startswith(f"json/decoder.py:{a}-{b}")
    # no chunk boundary falls inside a top-level definition that fits the model's window on its own
    import ast

    checked = 0
    by_path: dict[str, set[int]] = {}
    for e in mem.entries("proj"):
        by_path.setdefault(e.meta["path"], set()).add(e.meta["lines"][0])
    for rel, starts in by_path.items():
        if not rel.endswith(".py"):
            continue
        lines = (ws / rel).read_text().split("\n")
        for node in ast.parse("\n".join(lines)).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if mem.embedder.count_tokens("\n".join(lines[first - 1 : node.end_lineno])) < 150:
                    checked += 1
                    assert not any(first < s <= node.end_lineno for s in starts), (rel, node.name, first, node.end_lineno)
    assert checked >= 20


def test_non_python_text_falls_back_to_line_windows(mem, ws):
    (ws / "notes.toml").write_text("\n".join(f"key{i} = {i}" for i in range(400)) + "\n")
    index(mem, ws, wing="proj")
    entries = sorted((e for e in mem.entries("proj") if e.meta["path"] == "notes.toml"), key=lambda e: e.meta["lines"])
    assert entries and {e.meta["parser"] for e in entries} == {"code:lines"}
    assert entries[0].meta["lines"][0] == 1 and entries[-1].meta["lines"][1] == 400


def test_incremental_run_with_nothing_changed_touches_nothing(mem, ws, store_path, monkeypatch):
    first = index(mem, ws, wing="proj")
    assert first["added"] > 10
    before = snapshot_store(store_path)
    from memlens.ingest import pipeline

    calls = []
    real = pipeline._read
    monkeypatch.setattr(pipeline, "_read", lambda *a: calls.append(a) or real(*a))
    again = index(mem, ws, wing="proj")
    assert (again["added"], again["updated"], again["removed"], again["chunks"]) == (0, 0, 0, 0)
    assert again["unchanged"] == first["added"]
    assert calls == []  # size + mtime_ns matched: not one file read, so none hashed
    assert snapshot_store(store_path) == before


def test_edit_and_delete_in_a_workspace(mem, ws):
    index(mem, ws, wing="proj")
    target = ws / "json" / "encoder.py"
    target.write_text(target.read_text() + "\n\ndef brand_new_helper():\n    return 'zebra'\n")
    (ws / "json" / "tool.py").unlink()
    out = index(mem, ws, wing="proj")
    assert (out["added"], out["updated"], out["removed"]) == (0, 1, 1)
    assert any("brand_new_helper" in e.text for e in mem.entries("proj"))
    assert not any(e.meta["path"] == "json/tool.py" for e in mem.entries("proj"))


def _context(mem, query, **kw):
    bundle = mem.search(query, active_wing="proj", use_cache=False, **kw)
    return recall.render_with_code(mem, bundle), bundle


def _code_drops(bundle):
    return {(d.stage, d.reason) for d in bundle.trace.dropped if d.stage.startswith("code")}


def test_relevant_code_section_and_each_gate(mem, ws, monkeypatch, tmp_path):
    monkeypatch.setattr(recall, "MIN_SCORE", -1.0)  # the hashing embedder's similarities are low: gate mechanics only
    index(mem, ws, wing="proj")
    query = "def py_scanstring s end strict BACKSLASH STRINGCHUNK match chunks content terminator"
    text, bundle = _context(mem, query)
    assert "## Relevant code" in text and "json/decoder.py:" in text and "(score " in text
    section = text.split("## Relevant code", 1)[1]
    assert section.count("### `") <= recall.MAX_CHUNKS
    served = [e for e in mem.entries("proj") if "py_scanstring" in e.text]
    assert not any(r.entry.kind.value == "code" for r in bundle.results)  # code shows once, in its section
    # edit the file the best chunk comes from: its lines no longer match -> stale, never served
    decoder = ws / "json" / "decoder.py"
    decoder.write_text(decoder.read_text().replace("def py_scanstring(", "def py_scanstring_renamed("))
    text, bundle = _context(mem, query)
    assert ("code_stale", "stale") in _code_drops(bundle)
    assert "py_scanstring_renamed" not in text
    # gone
    decoder.unlink()
    text, bundle = _context(mem, query)
    assert ("code_exists", "missing") in _code_drops(bundle) and "json/decoder.py:" not in text.split("## Relevant", 1)[-1]
    # now binary
    decoder.write_bytes(b"\x00" * 100)
    _, bundle = _context(mem, query)
    assert ("code_binary", "binary") in _code_drops(bundle)
    # replaced by a link that leads out of the workspace
    decoder.unlink()
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text("x = 1\n")
    decoder.symlink_to(elsewhere)
    _, bundle = _context(mem, query)
    assert ("code_workspace", "outside_workspace") in _code_drops(bundle)
    assert served  # the query named a real function of the indexed code


def test_threshold_and_cap_gates(mem, ws, monkeypatch):
    index(mem, ws, wing="proj")
    monkeypatch.setattr(recall, "MIN_SCORE", 0.999)
    _, bundle = _context(mem, "decode a JSON document")
    assert ("code_threshold", "threshold") in _code_drops(bundle)
    monkeypatch.setattr(recall, "MIN_SCORE", -1.0)
    text, bundle = _context(mem, "decode a JSON document from a string")
    assert ("code_cap", "cap") in _code_drops(bundle)
    shown = text.split("## Relevant code", 1)[1]
    assert 1 <= shown.count("### `") <= 3 and len(shown) < recall.MAX_CHARS + 3 * 200


def test_stale_or_missing_index_is_skipped_as_degraded(mem, ws, monkeypatch):
    monkeypatch.setattr(recall, "MIN_SCORE", -1.0)
    _, bundle = _context(mem, "decode json")
    assert not _code_drops(bundle)  # a store without any code index says nothing
    index(mem, ws, wing="proj")
    mem.add("Decoding json is done by the json package.", wing="other")
    _, bundle = mem.search("decode json", active_wing="other", use_cache=False), None
    text = recall.render_with_code(mem, _)
    assert ("code_index", "degraded") in _code_drops(_) and "Relevant code" not in text
    mem.conn.execute("UPDATE ingest_runs SET finished_at = '2000-01-01T00:00:00Z'")
    calls = []
    monkeypatch.setattr("memlens.ingest.index", lambda *a, **k: calls.append(1))
    text, bundle = _context(mem, "decode json")
    assert ("code_index", "degraded") in _code_drops(bundle) and "Relevant code" not in text
    assert calls == []  # never re-indexed inline
    assert not any(r.entry.kind.value == "code" for r in bundle.results)  # nor served unchecked among the notes
    assert ("code", "degraded") in _code_drops(bundle)


def test_index_status(mem, ws):
    index(mem, ws, wing="proj")
    (ws / "json" / "scanner.py").write_text("changed = True\n")
    st = index_status(mem)
    ix = st["indexes"][0]
    assert ix["wing"] == "proj" and ix["workspace"] == str(ws) and ix["files"] == st["files"] > 10
    assert ix["stale_files"] == 1 and 0 < st["stale_ratio"] < 1
    assert st["last_run"]["status"] == "ok" and st["last_run"]["added"] == ix["files"]
    assert st["queue_depth"] == 0 and st["chunks"] == ix["chunks"] > ix["files"]


def test_watch_reindexes_a_saved_file_in_the_background(mem, ws):
    from memlens.ingest.watch import Watcher

    index(mem, ws, wing="proj")
    runs = []
    with Watcher(mem, str(ws), "proj", debounce_ms=50, on_run=lambda kind, out: runs.append((kind, out))):
        time.sleep(0.5)  # let the watcher start
        (ws / "json" / "fresh.py").write_text("def zebra_stripes():\n    return 'freshly saved'\n")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("zebra_stripes" in e.text for e in mem.entries("proj")):
            time.sleep(0.1)
    assert any("zebra_stripes" in e.text for e in mem.entries("proj"))
    assert runs and runs[0][0] == "changes" and runs[0][1]["added"] == 1


def test_watch_periodic_rescan_catches_what_events_missed(mem, ws, monkeypatch):
    from memlens.ingest import watch

    index(mem, ws, wing="proj")
    monkeypatch.setattr(watch.Watcher, "_watch", lambda self: None)  # a watcher that silently delivers nothing
    (ws / "json" / "quiet.py").write_text("def silently_added():\n    pass\n")
    with watch.Watcher(mem, str(ws), "proj", rescan_s=0.5):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("silently_added" in e.text for e in mem.entries("proj")):
            time.sleep(0.1)
    assert any("silently_added" in e.text for e in mem.entries("proj"))


def test_deadline_leaves_the_rest_for_the_next_run(mem, ws):
    out = index(mem, ws, wing="proj", deadline_s=1e-9)
    assert out["added"] == 0 and out["removed"] == 0 and out["complete"] is False
    assert storage.runs(mem, "index")[0]["status"] == "partial"
    full = index(mem, ws, wing="proj")
    assert full["added"] > 10 and full["complete"] is True


def _fake_clock(monkeypatch):
    """A clock the indexing run reads (each slow embedding moves it on), and embedding slices of 4 texts."""
    import types

    from memlens.ingest import pipeline, runs

    clock = types.SimpleNamespace(now=1000.0)
    fake_time = types.SimpleNamespace(monotonic=lambda: clock.now, perf_counter=time.perf_counter)
    monkeypatch.setattr(pipeline, "time", fake_time)
    monkeypatch.setattr(runs, "time", fake_time)
    monkeypatch.setattr(pipeline, "EMBED_SLICE", 4)
    return clock


def test_deadline_also_stops_the_embedding_of_what_was_read(tmp_path, ws, settings, monkeypatch):
    """Files read before the deadline but not embedded by then are not written (the run stopped within one slice of
    embedding), and the next run indexes them. Each embedding call here takes 10 s of a clock the run reads."""
    from memlens import Memory
    from memlens.embed import HashEmbedder

    clock = _fake_clock(monkeypatch)

    class Slow(HashEmbedder):
        calls = 0

        def embed(self, texts):
            Slow.calls += 1
            clock.now += 10.0
            return super().embed(texts)

    with Memory.open(tmp_path / "slow.db", settings=settings, embedder=Slow()) as m:
        out = index(m, ws, wing="proj", deadline_s=15.0)
        # the first file to write is written whatever the deadline (its slices took 10 s each); nothing after it
        first = out["chunks"]
        assert (out["added"], out["complete"], Slow.calls) == (1, False, -(-first // 4) + 1)  # + the slice cut short
        assert storage.runs(m, "index")[0]["status"] == "partial" and len(list(m.entries("proj"))) == first
        full = index(m, ws, wing="proj")
        assert full["added"] > 10 and full["unchanged"] == 1 and full["complete"] is True


def test_a_file_slower_to_embed_than_the_deadline_is_still_indexed(tmp_path, settings, monkeypatch):
    """Every run gets further: a file whose embedding alone outlasts the deadline was read and dropped by every
    run, none of which ever wrote it."""

    from memlens import Memory
    from memlens.embed import HashEmbedder
    from memlens.ingest import pipeline

    clock = _fake_clock(monkeypatch)

    class Slow(HashEmbedder):
        def embed(self, texts):
            clock.now += 10.0
            return super().embed(texts)

    big = tmp_path / "ws"
    big.mkdir()
    (big / "big.py").write_text("".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(400)))
    with Memory.open(tmp_path / "slow.db", settings=settings, embedder=Slow()) as m:
        out = index(m, big, wing="proj", deadline_s=5.0)
        assert out["added"] == 1 and out["chunks"] > pipeline.EMBED_SLICE and out["complete"] is True


def test_cli_index_and_status(tmp_path):
    ws = code_workspace(tmp_path / "small", ("json",))  # the real model embeds it: kept small
    store = str(tmp_path / "s.db")
    (ws / "blob.bin").write_bytes(b"\x00\x01")
    r = run_cli("--store", store, "index", str(ws), "--wing", "proj", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == ["added", "updated", "unchanged", "removed", "chunks", "skipped", "seconds", "complete"]
    assert {"path": str(ws / "blob.bin"), "reason": "binary (a NUL byte in the first 8 KB)"} in out["skipped"]
    r = run_cli("--store", store, "index", "status", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["files"] == out["added"] and st["indexes"][0]["wing"] == "proj"
    r = run_cli("--store", store, "index", "status", timeout=120)
    assert r.returncode == 0 and "proj" in r.stdout and "stale 0" in r.stdout
    r = run_cli("--store", store, "index", str(tmp_path / "small"), "--wing", "other", "--json", timeout=600)
    assert r.returncode == 0, r.stderr  # a second index: --wing picks one of the two
    r = run_cli("--store", store, "index", "status", "--wing", "other", "--json", timeout=120)
    assert r.returncode == 0 and [ix["wing"] for ix in json.loads(r.stdout)["indexes"]] == ["other"]
    r = run_cli("--store", store, "index", "status", "--wing", "nope", timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "memlens: error: no code index in wing 'nope' (indexed wings: other, proj)"]


def test_watch_ignores_the_stores_own_files_inside_the_workspace(tmp_path, settings, hash_embedder):
    """A store kept inside the workspace: its own writes (-wal, -shm) must not start index runs forever."""
    from memlens import Memory
    from memlens.ingest.watch import Watcher

    ws = code_workspace(tmp_path / "ws", ("json",))
    with Memory.open(ws / "memlens.db", settings=settings, embedder=hash_embedder) as mem:
        out = index(mem, ws, wing="proj")
        assert any(s["path"].startswith(str(ws / "memlens.db")) for s in out["skipped"])  # binary: skipped
        runs = []
        with Watcher(mem, str(ws), "proj", debounce_ms=50, on_run=lambda kind, out: runs.append(out)):
            time.sleep(0.5)
            (ws / "json" / "new_module.py").write_text("def giraffe():\n    return 1\n")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not runs:
                time.sleep(0.1)
            time.sleep(2.0)  # long enough for a feedback loop to show
        assert 1 <= len(runs) <= 2, runs


def test_a_file_that_turns_binary_loses_its_chunks(mem, ws):
    index(mem, ws, wing="proj")
    target = ws / "json" / "scanner.py"
    target.write_bytes(b"\x00binary now")
    out = index(mem, ws, wing="proj")
    assert out["removed"] == 1 and any(s["path"] == str(target) for s in out["skipped"])
    assert not any(e.meta["path"] == "json/scanner.py" for e in mem.entries("proj"))


@pytest.mark.parametrize("pattern, language", [
    ("/usr/share/doc/git/contrib/*/*.go", "go"),  # shipped with git's documentation
    ("/root/.rustup/toolchains/*/share/doc/rust/html/*/*.js", "javascript"),  # shipped with the Rust documentation
])
def test_other_grammars_on_real_files(mem, tmp_path, pattern, language):
    import glob
    import shutil

    found = sorted(p for p in glob.glob(pattern) if os.path.getsize(p) > 2000)[:3]
    if not found:
        pytest.skip(f"no {language} file matching {pattern} on this machine")
    ws = tmp_path / "ws"
    ws.mkdir()
    for p in found:
        shutil.copy(p, ws / os.path.basename(p))
    index(mem, ws, wing="proj")
    entries = list(mem.entries("proj"))
    assert entries and {e.meta["parser"] for e in entries} == {f"code:tree-sitter:{language}"}
    for e in entries:  # exactly the file's lines, or for a piece of a minified line its columns in that line
        a, b = e.meta["lines"]
        lines = "\n".join((ws / e.meta["path"]).read_text().split("\n")[a - 1 : b])
        assert e.text == (lines[slice(*e.meta["cols"])] if "cols" in e.meta else lines)
