"""The MCP server's engine handle and tool plumbing, in process (no subprocess, hashing embedder)."""

from __future__ import annotations

import threading
import typing

import pytest

from memlens import vocab
from memlens.errors import MemlensError
from memlens.mcp import meta as mcp_meta


def test_tool_vocabularies_match_the_data_model():
    from memlens.mcp import tools as mcp_tools

    assert typing.get_args(mcp_tools.TypeName) == vocab.TYPES
    assert typing.get_args(mcp_tools.KindName) == vocab.KINDS
    assert typing.get_args(mcp_tools.StatusName) == vocab.STATUSES
    assert set(mcp_tools.READ_TOOLS) | set(mcp_tools.WRITE_TOOLS) == set(mcp_meta.DESCRIPTIONS)


def test_a_call_that_needs_the_model_waits_for_it(mem):
    from memlens.mcp.tools import Engine

    engine = Engine(memory=mem)
    order: list[str] = []
    got: dict = {}

    def call():
        got["mem"], got["waited_ms"] = engine.memory(need_model=True)
        order.append("call returned")

    t = threading.Thread(target=call)
    t.start()
    assert engine.memory(need_model=False)[0] is mem  # the store is ready: no wait
    t.join(0.3)
    assert t.is_alive() and not order  # still waiting for the model
    order.append("model ready")
    engine.model_ready.set()
    t.join(10)
    assert order == ["model ready", "call returned"]
    assert got["mem"] is mem and got["waited_ms"] > 0


def test_a_stop_fails_the_calls_still_waiting_for_the_model(mem):
    """A server told to stop does not hold the stop until the model loads, only to write after it: a call still
    waiting fails at once, unrun; a call that no longer waits is not affected."""
    from memlens.mcp.tools import Engine

    engine = Engine(memory=mem)
    got: dict = {}

    def call():
        try:
            engine.memory(need_model=True)
        except MemlensError as exc:
            got["error"] = str(exc)

    t = threading.Thread(target=call)
    t.start()
    t.join(0.3)
    assert t.is_alive()  # waiting for the model
    engine.stop_waiting()
    t.join(5)
    assert not t.is_alive() and got["error"] == "the server is stopping: this call was not run (nothing was written)"
    assert engine.memory(need_model=False)[0] is mem  # the store is ready: no wait, nothing refused


def test_task_complete_errors_name_what_the_tool_takes(mem):
    """Without an intent, task_complete's error offered requires_context=false, an argument the tool refuses; a blank
    task id was shown stripped, as ''."""
    import anyio
    from mcp import Client

    from memlens.mcp.server import build
    from memlens.mcp.tools import Engine
    from tests.conftest import bounded

    engine = Engine(memory=mem)
    engine.model_ready.set()

    async def body():
        async with Client(build(engine)) as client:
            return [(await client.call_tool("task_complete", args)).content[0].text
                    for args in ({"task_id": "t1", "intent": ""}, {"task_id": "t1", "intent": "  "},
                                 {"task_id": " ", "intent": "ship it"})]

    no_intent, blank_intent, blank_id = bounded(lambda: anyio.run(body), 60)
    assert no_intent == blank_intent == "task_complete: an intent is required: what the task set out to do, in one sentence"
    assert blank_id == "task_complete: field 'task_id': ' ' is not a valid task id (1-128 letters, digits, _ . : -)"
    assert mem.tasks.window().tasks == []


def test_an_engine_that_failed_to_start_answers_every_call_with_one_line(tmp_path):
    from memlens.mcp.tools import Engine

    folder = tmp_path / "a-folder"
    folder.mkdir()
    engine = Engine(str(folder))
    engine.start(warm=False)
    with pytest.raises(MemlensError) as err:
        engine.memory()
    assert "directory" in str(err.value) and "\n" not in str(err.value)
    assert engine.close()


def test_argument_errors_become_one_line():
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import BaseModel, Field, ValidationError

    from memlens.mcp.server import one_line_error

    class Args(BaseModel):
        text: str
        k: int = Field(1, ge=1)

    try:
        Args.model_validate({"k": 0})
    except ValidationError as exc:
        err = ToolError("Error executing tool memory_add: multi\nline")
        err.__cause__ = exc
        assert one_line_error("memory_add", err) == "memory_add: argument 'text' is required (and 1 more)"
    plain = ToolError("Error executing tool memory_get: no entry with id 'x'\n  in s.db")
    assert one_line_error("memory_get", plain) == "memory_get: no entry with id 'x' in s.db"


def test_bad_server_options_are_one_line_errors(tmp_path):
    import socket

    from .conftest import run_cli

    out = run_cli("--store", str(tmp_path / "s.db"), "mcp", "--transport", "http", "--port", "70000", timeout=60)
    assert out.returncode == 2 and out.stderr.strip() == "memlens: error: --port must be 0..65535, got 70000"
    out = run_cli("mcp", "token", "list", "--file", str(tmp_path / "none"), timeout=60)
    assert out.returncode == 0 and out.stdout == "" and f"no token file at {tmp_path / 'none'}" in out.stderr
    out = run_cli("--store", str(tmp_path / "s.db"), "mcp", "--port", "5000", timeout=60)  # stdio: not silently ignored
    assert out.returncode == 2 and out.stderr.strip() == ("memlens: error: --host and --port are for --transport http; "
                                                          "over stdio the client starts the server")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = run_cli("--store", str(tmp_path / "s.db"), "mcp", "--transport", "http", "--port", str(port), timeout=60)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert out.stderr.startswith(f"memlens: error: cannot listen on 127.0.0.1:{port}")
    assert not (tmp_path / "s.db").exists()  # refused before the store was touched


@pytest.mark.model
def test_without_the_model_the_store_tools_still_work(demo_store, tmp_path, monkeypatch):
    import shutil

    from memlens.mcp.tools import Engine

    path = tmp_path / "demo.db"
    shutil.copy(demo_store, path)
    monkeypatch.setenv("MEMLENS_EMBEDDING__MODEL", str(tmp_path / "no-model"))
    engine = Engine(str(path))
    engine.start()
    try:
        mem, _ = engine.memory()
        assert mem.get("lc-arch-001").type.value == "invariant"
        with pytest.raises(MemlensError, match="model") as err:
            engine.memory(need_model=True)
        assert "\n" not in str(err.value)
    finally:
        assert engine.close()


def test_a_read_only_engine_creates_no_store(tmp_path):
    from memlens.mcp.tools import Engine

    path = tmp_path / "sub" / "none.db"
    engine = Engine(str(path), read_only=True)
    engine.start(warm=False)
    try:
        with pytest.raises(MemlensError, match="no store at") as err:
            engine.memory()
        assert "\n" not in str(err.value)
    finally:
        assert engine.close()
    assert not (tmp_path / "sub").exists()


def test_the_engine_warms_the_vector_and_the_text_index_on_its_loader_thread(mem, monkeypatch):
    """A server is long-lived: its loader thread reads the vectors and the text index's postings, so that
    even the first questions are ranked in process (the requests never wait for it)."""
    from memlens.mcp.tools import Engine

    monkeypatch.setattr(mem.embedder, "load", lambda: None, raising=False)  # the hashing embedder has nothing to load

    for i in range(5):
        mem.add(f"decision {i}: the scheduler runs nodes on a single-threaded executor", wing="proj")
    engine = Engine(memory=mem)
    engine.start(warm=True)
    assert engine._thread is not None
    engine._thread.join(60)
    snap = mem.store.speed.postings._snap
    assert mem.vector_index is not None and snap is not None and snap.complete and "executor" in snap.postings
    before = mem.store.speed.postings.served
    assert [r.entry.text for r in mem.search("executor scheduler", use_cache=False).results]
    assert mem.store.speed.postings.served == before + 1


def test_closing_while_the_model_loads_closes_the_store_and_does_not_wait(mem, monkeypatch, capsys):
    """A stop while the model loaded waited for the load (60 s at most). Now the store closes at once (the load
    never uses it) and the loader, once its load ends, touches the closed store no more."""
    import threading

    from memlens.mcp.tools import Engine

    loading, release = threading.Event(), threading.Event()

    def held_load() -> None:
        loading.set()
        release.wait(60)

    checked: list[bool] = []
    monkeypatch.setattr(mem.embedder, "load", held_load, raising=False)
    monkeypatch.setattr(type(mem), "check_model", lambda self: checked.append(True))
    engine = Engine(memory=mem)
    engine.start(warm=True)
    assert loading.wait(60)
    try:
        assert engine.close(timeout=60) is False  # the loader is still loading: the caller exits without teardown
        assert mem.store._closed
    finally:
        release.set()
    assert engine._thread is not None
    engine._thread.join(60)
    assert not engine._thread.is_alive() and checked == []
    assert engine._model_error is None and "error" not in capsys.readouterr().err


def test_a_stop_during_the_vector_warm_up_waits_for_one_wing_at_most(mem, monkeypatch):
    """The loader reads the vector index wing by wing; a stop during that read waited for every wing (seconds on a
    large store). Now it waits for the wing being read, and the rest is left unread."""
    import threading
    import time

    from memlens.mcp.tools import Engine
    from memlens.store.speed import vindex

    monkeypatch.setattr(mem.embedder, "load", lambda: None, raising=False)
    for i in range(6):
        mem.add(f"note {i}", wing=f"wing{i}")
    reading, read = threading.Event(), []
    real_read = vindex._read_wing

    def slow_read(host, wing):  # each wing's read takes 0.4 s here
        reading.set()
        time.sleep(0.4)
        read.append(wing)
        return real_read(host, wing)

    monkeypatch.setattr(vindex, "_read_wing", slow_read)
    engine = Engine(memory=mem)
    engine.start(warm=True)
    assert reading.wait(60)
    assert engine.close(timeout=60) is True
    assert 1 <= len(read) < 6 and mem.store._closed  # the close waited for the wing being read, not for all six
