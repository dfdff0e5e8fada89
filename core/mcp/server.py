"""``memlens mcp``: the memory engine as a Model Context Protocol server (official ``mcp`` SDK, v2).

    memlens [--store PATH] mcp [--transport stdio|http] [--host 127.0.0.1] [--port N] [--read-only]

stdio (the default) serves one client on stdin/stdout: see ``memlens.mcp.stdio``
for how stdout stays pure JSON-RPC and how ``initialize`` is answered before
anything heavy loads. ``http`` serves streamable HTTP at ``http://HOST:PORT/mcp``
(127.0.0.1 unless told otherwise; ``--port 0`` picks a free port, printed on stderr).

Several server processes, the CLI and the app can share one store: every
write is one SQLite transaction (``memlens.memory``, ``memlens.store.writes``).

This module imports the SDK only inside functions: the stdio wire must be
protected, and ``initialize`` answered, before that import.
"""

from __future__ import annotations

import os
import sys
from typing import Any

DEFAULT_PORT = 8765


def build(engine: Any, *, read_only: bool = False) -> Any:
    """The MCPServer with memlens' tools (only the read tools when ``read_only``)."""
    import mcp.server.mcpserver.server as sdk_server
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError

    # The SDK would set up logging through rich (a UI toolkit the engine never loads, and boxed
    # multi-line tracebacks in a client's server log): plain one-line records on stderr instead.
    sdk_server.configure_logging = _plain_logging  # type: ignore[attr-defined]  # the SDK does not export its logging hook; replaced on purpose

    from memlens import __version__
    from memlens.mcp.meta import INSTRUCTIONS, SERVER_NAME
    from memlens.mcp.tools import register

    class MemlensMCPServer(MCPServer):
        """Tool errors as one line: ``memory_add: argument 'wing' is required``."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                return await super().call_tool(name, arguments, context)
            except UnexpectedToolError:
                raise
            except ToolError as exc:
                raise ToolError(one_line_error(name, exc)) from exc.__cause__

    server = MemlensMCPServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    register(server, engine, read_only=read_only)
    return server


def _plain_logging(level: str = "WARNING") -> None:
    import logging

    logging.basicConfig(level=level, stream=sys.stderr, format="memlens mcp: %(levelname)s %(name)s: %(message)s")


def one_line_error(tool: str, exc: Exception) -> str:
    """A tool error in one line; argument errors name the argument and the first problem."""
    from pydantic import ValidationError

    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        errs = cause.errors()
        err = errs[0]
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        msg = "is required" if err["type"] == "missing" else err["msg"]
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        return f"{tool}: argument {loc!r} {msg}{more}" if err["type"] == "missing" else f"{tool}: argument {loc!r}: {msg}{more}"
    text = str(exc).removeprefix(f"Error executing tool {tool}: ")
    return f"{tool}: " + " ".join(text.split())


def serve(store: str | None, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          read_only: bool = False) -> int:
    if transport == "stdio":
        return _serve_stdio(store, read_only)
    return _serve_http(store, host, port, read_only)


def _shown(store: str | None) -> str:
    """The store as messages name it: a ``postgresql://`` URI without its password."""
    from memlens.store.postgres.connect import is_uri, label

    return label(store) if is_uri(store) else store or "the default store"


def _serve_stdio(store: str | None, read_only: bool) -> int:
    from memlens import __version__
    from memlens.mcp.stdio import Wire

    wire = Wire(__version__, early=os.environ.get("MEMLENS_MCP_EARLY_INIT", "1") != "0")
    wire.protect()
    wire.start()  # initialize is answered from here on; the heavy imports follow

    import anyio

    from memlens.mcp.tools import Engine

    engine = Engine(store, read_only=read_only)
    server = build(engine, read_only=read_only)
    engine.start()
    mode = "read-only, " if read_only else ""
    print(f"memlens mcp: serving {_shown(store)} over stdio ({mode}pid {os.getpid()})", file=sys.stderr,
          flush=True)
    try:
        anyio.run(_serve_wire, server, wire)
    except KeyboardInterrupt:
        pass
    finally:
        _close(engine)
    return 0


async def _serve_wire(server: Any, wire: Any) -> None:
    """The SDK server on the wire's lines: what the SDK's ``stdio_server`` does, minus its extra thread hops."""
    import asyncio
    import math

    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    loop = asyncio.get_running_loop()
    read_send, read_recv = anyio.create_memory_object_stream[Any](math.inf)
    write_send, write_recv = anyio.create_memory_object_stream[Any](0)

    def deliver(line: bytes | None) -> None:  # on the reader thread
        try:
            if line is None:
                loop.call_soon_threadsafe(read_send.close)  # end of input ends the session
                return
            try:
                item: Any = SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
            except Exception as exc:  # the SDK drops such a line without an answer: answer it here
                answer = invalid_message_answer(line, exc)
                if answer is not None:
                    wire.write(answer)
                return
            loop.call_soon_threadsafe(read_send.send_nowait, item)
        except RuntimeError:
            pass  # the loop has ended: the session is over

    async def write_out() -> None:
        async with write_recv:
            async for message in write_recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                wire.write(data.encode("utf-8") + b"\n")

    wire.attach(deliver)
    low = server._lowlevel_server  # the SDK's own run_stdio_async drives it the same way
    async with anyio.create_task_group() as tg:
        tg.start_soon(write_out)
        try:
            await low.run(read_recv, write_send, low.create_initialization_options())
        finally:
            await write_send.aclose()


def invalid_message_answer(line: bytes, exc: Exception) -> bytes | None:
    """The JSON-RPC error for a request line that is not a valid message (a lone surrogate, deep nesting, ...).

    The SDK drops such a line silently, and the client would wait for an answer that never
    comes. When a plain JSON reading finds the request's id, the error answers it; otherwise
    (MCP has no error without an id) the line is only reported on stderr.
    """
    import json

    errors = getattr(exc, "errors", None)
    first = errors()[0].get("msg") if callable(errors) and errors() else str(exc)
    detail = " ".join(str(first).split())[:300]
    print(f"memlens mcp: invalid message: {detail}", file=sys.stderr, flush=True)
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return None
    rid = msg.get("id") if isinstance(msg, dict) and "method" in msg else None
    if not isinstance(rid, (int, str)) or isinstance(rid, bool):
        return None
    answer = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32600, "message": f"invalid request: {detail}"}}
    return json.dumps(answer, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def _close(engine: Any) -> None:
    if not engine.close():
        sys.stderr.flush()
        os._exit(0)  # the model loader is stuck in native code: don't let interpreter shutdown abort on it


def _serve_http(store: str | None, host: str, port: int, read_only: bool) -> int:
    import socket

    import uvicorn

    from memlens.errors import MemlensError
    from memlens.mcp.tools import Engine

    engine = Engine(store, read_only=read_only)
    server = build(engine, read_only=read_only)
    app = server.streamable_http_app(host=host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise MemlensError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"memlens mcp: warning: listening on {host}, reachable from other machines; there is no authentication",
              file=sys.stderr, flush=True)
    mode = "read-only, " if read_only else ""
    print(f"memlens mcp: serving http://{shown}:{actual}/mcp ({mode}pid {os.getpid()})", file=sys.stderr, flush=True)
    engine.start()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        _close(engine)
    return 0
