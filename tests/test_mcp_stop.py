"""Stopping ``memlens mcp`` with SIGINT or SIGTERM while requests run, over stdio and HTTP.

A graceful stop takes nothing new on, lets the requests already running finish and answers them, then exits 0 with
at most one line on stderr. It lasts a bounded time: a second signal, or the end of the grace with something still
running (a client that sent only part of its body), stops at once with one line and status 128 + the signal.
Nothing prints a traceback. A write is slowed down here so that a signal surely finds it running.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.mcp_helpers import LineReader, RawClient, result_data, sdk_client, server_env

# the server, with every memory_add held in its write for TEST_MEMLENS_SLOW_ADD seconds (said on stderr when it
# starts), the grace of a stop shortened to TEST_MEMLENS_STOP_GRACE seconds, and, with TEST_MEMLENS_HELD_LOAD (a
# file), the model's load held until that file exists (at most 10 minutes); with TEST_MEMLENS_SERVE_FAILS (a file), the
# stdio serving fails with an error once that file exists
SLOW = """
import os, sys, time
import memlens.embed, memlens.memory, memlens.mcp.stop

add_unique = memlens.memory.Memory.add_unique
def slow_add(self, *a, **kw):
    os.write(2, b"test: add started\\n")  # one write: the three threads' lines do not interleave
    time.sleep(float(os.environ["TEST_MEMLENS_SLOW_ADD"]))
    return add_unique(self, *a, **kw)
memlens.memory.Memory.add_unique = slow_add
load = memlens.embed.OnnxEmbedder.load
def held_load(self):
    held = os.environ.get("TEST_MEMLENS_HELD_LOAD")
    if held:
        os.write(2, b"test: load held\\n")
        for _ in range(6000):
            if os.path.exists(held):
                break
            time.sleep(0.1)
        os.write(2, b"test: load released\\n")
    return load(self)
memlens.embed.OnnxEmbedder.load = held_load
import memlens.mcp.engine
memory = memlens.mcp.engine.Engine.memory
def said_memory(self, need_model=False):
    if need_model and not self.model_ready.is_set():
        os.write(2, b"test: a call waits for the model\\n")
    return memory(self, need_model)
memlens.mcp.engine.Engine.memory = said_memory
memlens.mcp.stop.STOP_GRACE_S = float(os.environ.get("TEST_MEMLENS_STOP_GRACE", "10"))
if os.environ.get("TEST_MEMLENS_SERVE_FAILS"):  # the stdio serving fails once that file exists
    import memlens.mcp.server
    async def failing(*a, **kw):
        import anyio
        while not os.path.exists(os.environ["TEST_MEMLENS_SERVE_FAILS"]):
            await anyio.sleep(0.05)
        raise RuntimeError("test: the serving failed")
    memlens.mcp.server._serve_wire = failing
from memlens.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def stdio_server(store, slow_add: float) -> RawClient:
    return RawClient([sys.executable, "-c", SLOW, "--store", str(store), "mcp"],
                     env=server_env(TEST_MEMLENS_SLOW_ADD=str(slow_add)))


def stored(store, marker: str) -> int:
    with sqlite3.connect(store) as db:
        return int(db.execute("SELECT count(*) FROM entries WHERE text LIKE ?", (f"%{marker}%",)).fetchone()[0])


def after(seen: list[bytes], needle: bytes) -> list[str]:
    """The stderr lines printed after the first one containing ``needle``."""
    lines = b"".join(seen).decode().splitlines()
    first = next(i for i, line in enumerate(lines) if needle.decode() in line)
    return lines[first + 1:]


def add(rid: int, text: str) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "memory_add", "arguments": {"text": text, "wing": "stop"}}}


@pytest.mark.model
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stdio_stop_answers_the_requests_running_and_exits_0(tmp_path, signum):
    """It printed a ~25-frame traceback and exited 1, or exited 0 having answered none of the writes it committed."""
    store = tmp_path / "s.db"
    c = stdio_server(store, slow_add=1.5)
    try:
        c.initialize()
        c.err.wait_for(b"model ready")  # else the writes wait for the model, and a stop fails them unrun
        for rid in (10, 11, 12):
            c.send(add(rid, f"Running when the server was told to stop, number {rid}."))
        c.err.wait_for(b"test: add started")
        c.proc.send_signal(signum)
        time.sleep(0.5)
        c.send(add(13, "Sent after the stop began: never run."))
        answers = {}
        while (line := c.out.next(60)) is not None:
            answer = json.loads(line)
            answers[answer["id"]] = answer
        assert c.proc.wait(30) == 0
    finally:
        c.close()
    assert sorted(answers) == [10, 11, 12, 13], answers
    for rid in (10, 11, 12):
        assert answers[rid]["result"]["structuredContent"]["status"] == "created", answers[rid]
    assert answers[13]["error"]["message"] == "the server is stopping: this request was not run"
    assert stored(store, "Running when the server was told to stop") == 3
    assert stored(store, "never run") == 0
    said = after(c.err.seen, b"test: add started")
    assert b"Traceback" not in b"".join(c.err.seen)
    assert [line for line in said if "test: add started" not in line] == [
        f"memlens mcp: stopping: answering the 3 requests still running (at most 10 s; "
        f"{'Ctrl-C' if signum == signal.SIGINT else 'SIGTERM'} again stops at once)"]


@pytest.mark.model
def test_stdio_a_second_signal_stops_at_once(tmp_path):
    store = tmp_path / "s.db"
    c = stdio_server(store, slow_add=60)
    try:
        c.initialize()
        c.err.wait_for(b"model ready")
        c.send(add(10, "A write that takes a minute."))
        c.err.wait_for(b"test: add started")
        c.proc.send_signal(signal.SIGINT)
        c.err.wait_for(b"stopping: answering the 1 request")
        t0 = time.monotonic()
        c.proc.send_signal(signal.SIGINT)
        assert c.proc.wait(10) == 130
        assert time.monotonic() - t0 < 5
    finally:
        c.close()
    assert after(c.err.seen, b"stopping: answering") == [
        "memlens mcp: stopped at once (Ctrl-C again); 1 request left unanswered"]
    assert stored(store, "takes a minute") == 0
    assert b"Traceback" not in b"".join(c.err.seen)


def http_serve(store, slow_add: float = 0, grace: float = 10, held_load: str = "") -> tuple[subprocess.Popen, LineReader,
                                                                                           int]:
    proc = subprocess.Popen([sys.executable, "-c", SLOW, "--store", str(store), "mcp", "--transport", "http", "--port",
                             "0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=server_env(TEST_MEMLENS_SLOW_ADD=str(slow_add), TEST_MEMLENS_STOP_GRACE=str(grace),
                                           TEST_MEMLENS_HELD_LOAD=held_load))
    err = LineReader(proc.stderr)
    line = err.wait_for(b"serving http://").decode()
    err.wait_for(b"test: load held" if held_load else b"model ready")
    return proc, err, int(line.split("serving http://127.0.0.1:", 1)[1].split("/", 1)[0])


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.mark.model
def test_http_stop_answers_the_requests_running(tmp_path):
    """The clients of writes in flight were told 'SSE stream ended without a response': their writes had committed."""
    import anyio

    store = tmp_path / "s.db"
    proc, err, port = http_serve(store, slow_add=1.5)

    async def main() -> list:
        with anyio.fail_after(120):
            return await writes()

    async def writes() -> list:
        async with sdk_client(f"http://127.0.0.1:{port}/mcp") as client:
            # once first: the SDK's client then knows the tool (it would ask for the list again after the answer)
            result_data(await client.call_tool("memory_add", {"text": "The first write.", "wing": "stop"}))
            results: list = []

            async def write(n: int) -> None:
                results.append(await client.call_tool("memory_add", {"text": f"In flight at the stop, {n}.",
                                                                     "wing": "stop"}))

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(write, n)
                await anyio.to_thread.run_sync(lambda: [err.wait_for(b"test: add started") for _ in range(4)])
                proc.send_signal(signal.SIGINT)
            return results

    try:
        results = anyio.run(main)
        assert proc.wait(30) == 0
    finally:
        stop(proc)
    assert [result_data(r)["status"] for r in results] == ["created"] * 3
    assert stored(store, "In flight at the stop") == 3
    assert b"Traceback" not in b"".join(err.seen)
    assert after(err.seen, b"test: add started")[-1:] == [
        "memlens mcp: stopping: answering the 3 requests still running (at most 10 s; Ctrl-C again stops at once)"]


@pytest.mark.model
def test_http_a_request_that_comes_after_the_stop_began_is_not_run(tmp_path):
    """On a connection kept alive, a request sent during the stop was run (and could keep the stop going): it gets
    503, unrun, while the request already running is answered."""
    import http.client
    import threading

    store = tmp_path / "s.db"
    proc, err, port = http_serve(store, slow_add=1.5)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def post(conn: http.client.HTTPConnection, message: dict, session: dict | None = None) -> tuple[int, str, dict]:
        conn.request("POST", "/mcp", json.dumps(message), {**headers, **(session or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), dict(resp.getheaders())

    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "kept-alive", "version": "1"}}}
    _, _, got = post(kept, init)
    session = {"mcp-session-id": got["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    assert post(kept, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)[0] == 202
    running: list = []
    writer = threading.Thread(target=lambda: running.append(post(
        http.client.HTTPConnection("127.0.0.1", port, timeout=30), add(2, "Running at the stop."), session)))
    try:
        writer.start()
        err.wait_for(b"test: add started")
        proc.send_signal(signal.SIGINT)
        err.wait_for(b"stopping: answering the 1 request")
        late = post(kept, add(3, "Sent during the stop."), session)
        writer.join(30)
        assert proc.wait(30) == 0
    finally:
        stop(proc)
    assert late[0] == 503 and json.loads(late[1])["error"] == {
        "code": -32000, "message": "the server is stopping: this request was not run"}
    answer = json.loads(next(line for line in running[0][1].splitlines() if line.startswith("data: {"))[6:])
    assert running[0][0] == 200 and answer["id"] == 2 and answer["result"]["structuredContent"]["status"] == "created"
    assert stored(store, "Running at the stop") == 1 and stored(store, "during the stop") == 0


def stalled_body(port: int) -> socket.socket:
    """A client that sends its headers and part of its body, then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, text/event-stream\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"jsonrpc\":")
    return sock


@pytest.mark.model
def test_http_a_stalled_client_holds_the_stop_for_the_grace_only(tmp_path):
    """It held the server for as long as the client kept its socket open."""
    proc, err, port = http_serve(tmp_path / "s.db", grace=2)
    sock = stalled_body(port)
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
        assert time.monotonic() - t0 < 10
    finally:
        sock.close()
        stop(proc)
    assert b"Traceback" not in b"".join(err.seen)
    assert after(err.seen, b"model ready") == [
        "memlens mcp: stopping: answering the 1 request still running (at most 2 s; Ctrl-C again stops at once)",
        "memlens mcp: stopped after 2 s; 1 request left unanswered"]


@pytest.mark.model
def test_http_a_second_ctrl_c_stops_at_once(tmp_path):
    """A second Ctrl-C printed a traceback (and a stalled client still held the first one)."""
    proc, err, port = http_serve(tmp_path / "s.db", grace=60)
    sock = stalled_body(port)
    try:
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        err.wait_for(b"stopping: answering the 1 request")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
        assert time.monotonic() - t0 < 5
    finally:
        sock.close()
        stop(proc)
    assert b"Traceback" not in b"".join(err.seen)
    assert after(err.seen, b"stopping: answering") == [
        "memlens mcp: stopped at once (Ctrl-C again); 1 request left unanswered"]


def intact(store) -> None:
    """The store is whole and holds no entry."""
    with sqlite3.connect(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == 0


@pytest.mark.model
def test_an_error_that_ends_the_serving_while_the_model_loads_is_not_lost(tmp_path):
    """Not waiting for the model's load on the way out (a hard exit) had swallowed the error that ended the serving:
    no traceback, status 0, as if the server had stopped cleanly."""
    store, held, fail = tmp_path / "s.db", tmp_path / "release-the-load", tmp_path / "fail"
    proc = subprocess.Popen([sys.executable, "-c", SLOW, "--store", str(store), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=server_env(TEST_MEMLENS_SLOW_ADD="0", TEST_MEMLENS_HELD_LOAD=str(held),
                                           TEST_MEMLENS_SERVE_FAILS=str(fail)))
    err = LineReader(proc.stderr)
    try:
        err.wait_for(b"test: load held")
        fail.touch()
        code = proc.wait(40)  # the load is held for 10 minutes
        while err.next(10) is not None:  # to the end of what it printed
            pass
    finally:
        held.touch()
        stop(proc)
    printed = b"".join(err.seen).decode()
    assert code == 1, printed
    assert "Traceback" in printed and "RuntimeError: test: the serving failed" in printed, printed


STOPPING_CALL = "the server is stopping: this call was not run (nothing was written)"


@pytest.mark.model
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stdio_a_stop_while_the_model_loads_does_not_wait_for_the_load(tmp_path, signum):
    """The calls waiting for the model failed at once, but the process then waited for the load to end (60 s at
    most) before it exited."""
    store, held = tmp_path / "s.db", tmp_path / "release-the-load"
    c = RawClient([sys.executable, "-c", SLOW, "--store", str(store), "mcp"],
                  env=server_env(TEST_MEMLENS_SLOW_ADD="0", TEST_MEMLENS_HELD_LOAD=str(held)))
    try:
        c.initialize()
        c.err.wait_for(b"test: load held")
        c.send({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
                "params": {"name": "memory_search", "arguments": {"query": "anything"}}})
        c.send(add(11, "Sent while the model loads."))
        for _ in range(2):
            c.err.wait_for(b"test: a call waits for the model")
        c.proc.send_signal(signum)
        answers = {}
        while (line := c.out.next(60)) is not None:
            answer = json.loads(line)
            answers[answer["id"]] = answer
        code = c.proc.wait(40)  # the load is held for 10 minutes
    finally:
        held.touch()
        c.close()
    assert code == 0
    for rid, tool in ((10, "memory_search"), (11, "memory_add")):
        assert answers[rid]["result"]["isError"] is True, answers[rid]
        assert answers[rid]["result"]["content"][0]["text"] == f"{tool}: {STOPPING_CALL}"
    assert b"Traceback" not in b"".join(c.err.seen)
    assert after(c.err.seen, b"test: a call waits for the model")[-1:] == [
        f"memlens mcp: stopping: answering the 2 requests still running (at most 10 s; "
        f"{'Ctrl-C' if signum == signal.SIGINT else 'SIGTERM'} again stops at once)"]
    assert b"test: load released" not in b"".join(c.err.seen)
    intact(store)


@pytest.mark.model
def test_http_a_stop_while_the_model_loads_does_not_wait_for_the_load(tmp_path):
    """The server stopped serving at SIGTERM, then waited for the model's load to end (60 s at most) before exiting."""
    import http.client
    import threading

    store, held = tmp_path / "s.db", tmp_path / "release-the-load"
    proc, err, port = http_serve(store, held_load=str(held))
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def post(message: dict, session: dict | None = None) -> tuple[int, str, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/mcp", json.dumps(message), {**headers, **(session or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), dict(resp.getheaders())

    waiting: list = []
    try:
        _, _, got = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "early", "version": "1"}}})
        session = {"mcp-session-id": got["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        assert post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)[0] == 202
        caller = threading.Thread(target=lambda: waiting.append(post(add(2, "Sent while the model loads."), session)))
        caller.start()
        err.wait_for(b"test: a call waits for the model")
        proc.send_signal(signal.SIGTERM)
        caller.join(60)
        code = proc.wait(40)  # the load is held for 10 minutes
    finally:
        held.touch()
        stop(proc)
    assert code == 0
    answer = json.loads(next(line for line in waiting[0][1].splitlines() if line.startswith("data: {"))[6:])
    assert waiting[0][0] == 200 and answer["id"] == 2, waiting
    assert answer["result"]["isError"] is True and answer["result"]["content"][0]["text"] == f"memory_add: {STOPPING_CALL}"
    assert b"Traceback" not in b"".join(err.seen)
    assert after(err.seen, b"test: a call waits for the model") == [
        "memlens mcp: stopping: answering the 1 request still running (at most 10 s; SIGTERM again stops at once)"]
    intact(store)


# the server's start held for a minute (said on stderr) at TEST_MEMLENS_HOLD: the engine's making, or the warnings
# it prints once the engine started: a signal surely comes while the server starts
HELD_START = """
import os, sys, time
import memlens.mcp.engine, memlens.mcp.server

def hold(real):
    def held(*a, **kw):
        os.write(2, b"test: start held\\n")
        time.sleep(60)
        return real(*a, **kw)
    return held

if os.environ["TEST_MEMLENS_HOLD"] == "engine":
    memlens.mcp.engine.Engine.__init__ = hold(memlens.mcp.engine.Engine.__init__)
else:
    memlens.mcp.server._warn_stray_variables = hold(memlens.mcp.server._warn_stray_variables)
from memlens.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("held", ["engine", "warnings"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_server_starts_answers_what_it_read_unrun(tmp_path, signum, held):
    """initialize is answered before the engine loads; a signal in that time stops the server gracefully too: each
    request read so far (and any read after) gets the stopping error, nothing is written, the status is 0. Also
    once the engine started, before the serving began (its start-up lines)."""
    store = tmp_path / "s.db"
    c = RawClient([sys.executable, "-c", HELD_START, "--store", str(store), "mcp"],
                  env=server_env(TEST_MEMLENS_HOLD=held))
    try:
        assert c.initialize()["result"]["serverInfo"]["name"]
        for rid in (2, 3):
            c.send(add(rid, f"never stored {rid}"))
        c.send({"jsonrpc": "2.0", "id": "four", "method": "tools/list"})
        c.err.wait_for(b"test: start held")
        c.proc.send_signal(signum)
        answers = {a["id"]: a for a in (c.recv(), c.recv(), c.recv())}
        code = c.close()
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
    assert code == 0
    assert set(answers) == {2, 3, "four"}
    assert {a["error"]["code"] for a in answers.values()} == {-32000}
    assert {a["error"]["message"] for a in answers.values()} == {"the server is stopping: this request was not run"}
    said = [ln for ln in after(c.err.seen, b"test: start held") if "stopped before serving" in ln]
    # (a request the wire read after the signal is not counted there)
    assert len(said) == 1 and re.fullmatch(r"memlens mcp: stopped before serving; [0-3] request\(s\) read were not run",
                                           said[0]), said
    assert not store.exists() or stored(store, "never stored") == 0
