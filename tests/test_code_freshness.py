"""Code freshness in every retrieval path: a code chunk whose file is gone, left the workspace, became binary or
changed since it was indexed is never served by ``search`` (API, CLI, MCP ``memory_search``, the app) nor by
``context``; it is dropped at the gate's stage with its reason in the trace.

Mechanics with the hashing embedder on copies of real standard-library packages; the command line and the MCP
server (through the official SDK client) with the real model.
"""

from __future__ import annotations

import json
import os

import pytest

from memlens.ingest import gates, index, recall
from tests.conftest import run_cli
from tests.ingest_material import code_workspace

from .mcp_helpers import result_data, run_client, stdio_params

QUERY = "kind=code def py_scanstring s end strict BACKSLASH STRINGCHUNK match chunks content terminator"
NAMED = "py_scanstring"


def _chunk(mem, name: str = NAMED):
    """The indexed chunk that defines ``name`` in json/decoder.py."""
    return next(e for e in mem.entries("proj") if e.meta["path"] == "json/decoder.py" and f"def {name}(" in e.text)


def _drops(bundle, entry_id: str) -> list[tuple[str, str]]:
    return [(d.stage, d.reason) for d in bundle.trace.dropped if d.id == entry_id]


def _edit(ws) -> None:
    decoder = ws / "json" / "decoder.py"
    decoder.write_text(decoder.read_text().replace(f"def {NAMED}(", f"def {NAMED}_renamed("))


@pytest.fixture
def indexed(mem, tmp_path):
    ws = code_workspace(tmp_path / "ws", ("json",))
    index(mem, ws, wing="proj")
    return mem, ws


def test_search_drops_each_gate_at_its_stage(indexed, tmp_path):
    mem, ws = indexed
    chunk = _chunk(mem)
    b = mem.search(QUERY, active_wing="proj")
    assert chunk.id in [r.entry.id for r in b.results] and not _drops(b, chunk.id)

    _edit(ws)  # nothing was written to the store: the cached search must not serve the old chunk
    b = mem.search(QUERY, active_wing="proj")
    assert not b.trace.cache_hit and b.trace.cache.invalidated_by["reason"] == "code changed"
    assert b.trace.cache.invalidated_by["id"] == chunk.id
    assert chunk.id not in [r.entry.id for r in b.results]
    assert _drops(b, chunk.id) == [("code_stale", "stale")]
    d = next(d for d in b.trace.dropped if d.id == chunk.id)
    assert d.detail.endswith("changed since it was indexed") and d.score is not None and d.wing == "proj"
    others = [r for r in b.results if r.entry.meta.get("path") == "json/decoder.py"]
    assert others  # the file's other chunks still hold their lines: served
    assert mem.search(QUERY, active_wing="proj").trace.cache_hit  # the new answer is cached again

    decoder = ws / "json" / "decoder.py"
    decoder.unlink()
    b = mem.search(QUERY, active_wing="proj", use_cache=False)
    assert _drops(b, chunk.id) == [("code_exists", "missing")]
    assert not [r for r in b.results if r.entry.meta.get("path") == "json/decoder.py"]
    decoder.write_bytes(b"\x00" * 100)
    assert _drops(mem.search(QUERY, active_wing="proj", use_cache=False), chunk.id) == [("code_binary", "binary")]
    decoder.unlink()
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text("x = 1\n")
    decoder.symlink_to(elsewhere)
    b = mem.search(QUERY, active_wing="proj", use_cache=False)
    assert _drops(b, chunk.id) == [("code_workspace", "outside_workspace")]
    assert mem.explain(QUERY, chunk.id, active_wing="proj")["stage"] == "code_workspace"


def test_context_reports_a_stale_chunk_once(indexed, monkeypatch):
    mem, ws = indexed
    monkeypatch.setattr(recall, "MIN_SCORE", -1.0)  # the hashing embedder's similarities are low: gate mechanics only
    chunk = _chunk(mem)
    _edit(ws)
    b = mem.search(QUERY.removeprefix("kind=code "), active_wing="proj", use_cache=False)
    text = recall.render_with_code(mem, b)
    assert _drops(b, chunk.id) == [("code_stale", "stale")]  # by the search; the code section does not repeat it
    assert f"{NAMED}_renamed" not in text and chunk.title.split(" ")[0] not in text


def test_the_file_is_read_again_only_when_its_stat_changes(indexed, monkeypatch):
    mem, ws = indexed
    chunk = _chunk(mem)
    decoder = ws / "json" / "decoder.py"
    past = decoder.stat().st_mtime - 60
    os.utime(decoder, (past, past))  # out of the window where a second edit could keep the same stat
    reads: list[str] = []
    real = gates._read
    monkeypatch.setattr(gates, "_read", lambda *a: reads.append(a[0]) or real(*a))
    gates._verdicts.clear()
    assert gates.check(chunk.meta, chunk.text) is None and len(reads) == 1
    assert gates.check(chunk.meta, chunk.text) is None and len(reads) == 1  # same stat: the verdict kept
    text = decoder.read_text()
    decoder.write_text(text.replace(f"def {NAMED}(", f"def {NAMED}_x("))  # same size class, new mtime
    assert gates.check(chunk.meta, chunk.text)[0] == "code_stale" and len(reads) == 2
    assert gates.check(chunk.meta, chunk.text)[0] == "code_stale" and len(reads) == 3  # just changed: read again
    decoder.write_text(text)
    os.utime(decoder, (past, past))
    assert gates.check(chunk.meta, chunk.text) is None and len(reads) == 4


def test_the_apps_dropped_list_shows_the_gate(indexed):
    from rich.console import Console

    from memlens.tui.widgets.trace_view import call_section

    mem, ws = indexed
    chunk = _chunk(mem)
    _edit(ws)
    b = mem.search(QUERY, active_wing="proj", use_cache=False)
    console = Console(width=200, record=True, color_system=None)
    console.print(call_section(b, True))
    shown = console.export_text()
    assert chunk.id in shown and "code_stale" in shown and "changed since it was indexed" in shown


def test_cli_search_mcp_search_and_context_after_an_edit(tmp_path, settings, real_embedder):
    """Real model: the command line and an MCP client (official SDK, stdio) never get the old chunk."""
    from memlens import Memory

    ws = code_workspace(tmp_path / "ws", ("json",))
    store = tmp_path / "code.db"
    with Memory.open(store, settings=settings, embedder=real_embedder) as mem:
        index(mem, ws, wing="proj")
        chunk = _chunk(mem)
    query = "scan a JSON string literal and its backslash escapes"

    def cli(*args: str) -> dict:
        done = run_cli("--store", str(store), *args, "--active-wing", "proj", "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def ids(out: dict) -> list[str]:
        return [r["id"] for r in out["results"]]

    def drops(trace: dict) -> list[tuple[str, str]]:
        return [(d["stage"], d["reason"]) for d in trace["dropped"] if d["id"] == chunk.id]

    assert chunk.id in ids(cli("search", query))

    async def body(client):
        args = {"query": query, "active_wing": "proj", "full_trace": True}
        before = result_data(await client.call_tool("memory_search", args))
        _edit(ws)  # while the server runs, with its warm index and its result cache
        after = result_data(await client.call_tool("memory_search", args))
        context = result_data(await client.call_tool("memory_context", {"query": query, "active_wing": "proj"}))
        return before, after, context

    before, after, context = run_client(stdio_params(store), body)
    assert chunk.id in [r["id"] for r in before["results"]]
    assert chunk.id not in [r["id"] for r in after["results"]]
    assert drops(after["full_trace"]) == [("code_stale", "stale")]
    assert after["full_trace"]["cache"]["invalidated_by"]["reason"] == "code changed"
    a, b = chunk.meta["lines"]
    assert f"json/decoder.py:{a}-{b}" not in context and f"{NAMED}_renamed" not in context

    out = cli("search", query)
    assert chunk.id not in ids(out) and drops(out["trace"]) == [("code_stale", "stale")]
    out = cli("context", query)
    assert drops(out["trace"]) == [("code_stale", "stale")] and f"json/decoder.py:{a}-{b}" not in out["context"]
