"""Drive ``memlens mcp`` as real clients do: the official SDK client (stdio, streamable HTTP) and raw JSON lines."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from .conftest import MEMLENS

TIMEOUT = 120  # seconds: a server that does not answer fails the test instead of hanging it


def server_env(**extra: str) -> dict[str, str]:
    """What a server subprocess needs from the test session: its data/cache/config dirs, offline model."""
    keep = ("MEMLENS_", "XDG_", "HF_", "PATH", "HOME", "PYTHON", "LANG", "LC_")
    env = {k: v for k, v in os.environ.items() if k.startswith(keep)}
    env.update(extra)
    return env


def stdio_params(store: Any, *args: str, **env: str) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=MEMLENS, args=["--store", str(store), "mcp", *args], env=server_env(**env))


def result_data(result: Any) -> Any:
    """A tool result's payload: structured content when the tool has an output schema, else its text."""
    if result.is_error:
        raise AssertionError(f"tool error: {result.content[0].text}")
    if result.structured_content is not None:
        return result.structured_content
    return result.content[0].text


def error_text(result: Any) -> str:
    assert result.is_error, result
    assert len(result.content) == 1
    return result.content[0].text


def run_client(server: Any, body: Any, *, name: str = "pytest-agent", version: str = "1.0", mode: str = "legacy",
               timeout: float = TIMEOUT, token: str | None = None, headers: dict[str, str] | None = None) -> Any:
    """Open an SDK ``Client`` to ``server`` (stdio params or URL), run ``await body(client)``, return its value."""
    import anyio

    async def main() -> Any:
        with anyio.fail_after(timeout):
            async with sdk_client(server, name=name, version=version, mode=mode, timeout=timeout, token=token,
                                  headers=headers) as client:
                return await body(client)

    return anyio.run(main)


@asynccontextmanager
async def sdk_client(server: Any, *, name: str = "pytest-agent", version: str = "1.0", mode: str = "legacy",
                     timeout: float = TIMEOUT, token: str | None = None,
                     headers: dict[str, str] | None = None) -> AsyncIterator[Any]:
    """The SDK's ``Client``; with ``token`` (and ``headers``), over the SDK's streamable HTTP transport sending it as a
    bearer token."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.types import Implementation

    info = Implementation(name=name, version=version)
    if token is None and headers is None:
        async with Client(server, mode=mode, client_info=info, read_timeout_seconds=timeout) as client:
            yield client
        return
    sent = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
    async with create_mcp_http_client(headers=sent) as http:
        async with Client(streamable_http_client(server, http_client=http), mode=mode, client_info=info,
                          read_timeout_seconds=timeout) as client:
            yield client


class LineReader:
    """Lines of a pipe, read by a thread, waited for with a timeout."""

    def __init__(self, stream: Any, seen: list[bytes] | None = None) -> None:
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.seen: list[bytes] = [] if seen is None else seen
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in iter(stream.readline, b""):
            self.seen.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout: float = TIMEOUT) -> bytes | None:
        return self.lines.get(timeout=timeout)

    def wait_for(self, needle: bytes, timeout: float = TIMEOUT) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"stream ended before {needle!r}: {b''.join(self.seen)[-2000:]!r}")
            if needle in line:
                return line


class RawClient:
    """A newline-delimited JSON-RPC client on a server subprocess, without the SDK."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env or server_env())
        self.out = LineReader(self.proc.stdout)
        self.err = LineReader(self.proc.stderr)
        self.next_id = 0

    def send(self, obj: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(obj).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        line = self.out.next(timeout)
        assert line is not None, f"server closed stdout; stderr: {b''.join(self.err.seen)[-2000:]!r}"
        return json.loads(line)

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        reply = self.recv()
        assert reply.get("id") == self.next_id, reply
        return reply

    def initialize(self, name: str = "raw-client", version: str = "0.1", protocol: str = "2025-06-18") -> dict[str, Any]:
        reply = self.request("initialize", {"protocolVersion": protocol, "capabilities": {},
                                            "clientInfo": {"name": name, "version": version}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})["result"]

    def close(self, timeout: float = 30) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise


@contextmanager
def http_server(store: Any, *args: str, env: dict[str, str] | None = None,
                stderr: list[bytes] | None = None) -> Iterator[str]:
    """``memlens mcp --transport http --port 0`` on 127.0.0.1; yields its URL (``stderr`` collects what it printed)."""
    where = ["--store", str(store)] if store is not None else []  # None: the store MEMLENS_STORE names
    proc = subprocess.Popen([MEMLENS, *where, "mcp", "--transport", "http", "--port", "0", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=server_env(**(env or {})))
    err = LineReader(proc.stderr, stderr)
    LineReader(proc.stdout)
    try:
        line = err.wait_for(b"serving http://").decode()
        url = line.split("serving ", 1)[1].split(" ", 1)[0]
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        stop_server(proc)


def stop_server(proc: subprocess.Popen, wait: float = 20) -> None:
    """Stop a server the way a user's Ctrl-C or a supervisor would (SIGTERM), killing it if it does not exit in `wait` s."""
    proc.terminate()
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
