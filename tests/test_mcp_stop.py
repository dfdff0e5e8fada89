"""Stopping ``memlens mcp`` with SIGINT or SIGTERM while requests run.

A graceful stop takes nothing new on, lets the requests already running finish and answers them, then exits 0 with
at most one line on stderr. It lasts a bounded time: a second signal, or the end of the grace with something still
running, stops at once with one line and status 128 + the signal.
Nothing prints a traceback. A write is slowed down here so that a signal surely finds it running.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import time

import pytest

from tests.mcp_helpers import RawClient, server_env

# the server, with every memory_add held in its write for MEMLENS_TEST_SLOW_ADD seconds (said on stderr when it
# starts), and the grace of a stop shortened to MEMLENS_TEST_STOP_GRACE seconds
SLOW = """
import os, sys, time
import memlens.memory, memlens.mcp.server

add_unique = memlens.memory.Memory.add_unique
def slow_add(self, *a, **kw):
    os.write(2, b"test: add started\\n")  # one write: the three threads' lines do not interleave
    time.sleep(float(os.environ["MEMLENS_TEST_SLOW_ADD"]))
    return add_unique(self, *a, **kw)
memlens.memory.Memory.add_unique = slow_add
memlens.mcp.server.STOP_GRACE_S = float(os.environ.get("MEMLENS_TEST_STOP_GRACE", "10"))
from memlens.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def stdio_server(store, slow_add: float) -> RawClient:
    return RawClient([sys.executable, "-c", SLOW, "--store", str(store), "mcp"],
                     env=server_env(MEMLENS_TEST_SLOW_ADD=str(slow_add)))


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
