"""``memlens mcp``: the memory engine as a Model Context Protocol server (official ``mcp`` SDK, v2).

    memlens [--store PATH] mcp [--transport stdio|http] [--host 127.0.0.1] [--port N] [--read-only]

stdio (the default) serves one client on stdin/stdout: see ``memlens.mcp.stdio``
for how stdout stays pure JSON-RPC and how ``initialize`` is answered before
anything heavy loads. ``http`` serves streamable HTTP at ``http://HOST:PORT/mcp``
(127.0.0.1 unless told otherwise; ``--port 0`` picks a free port, printed on stderr);
every request's Host and Origin are checked, whatever the address (``memlens.mcp.listen``).

Several server processes, the CLI and the app can share one store: every
write is one SQLite transaction (``memlens.memory``, ``memlens.store.writes``).

This module imports the SDK only inside functions: the stdio wire must be
protected, and ``initialize`` answered, before that import.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

from memlens.mcp import stop as stopping

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
    from memlens.mcp.auth import token_of
    from memlens.mcp.meta import INSTRUCTIONS, SERVER_NAME
    from memlens.mcp.tools import READ_TOOLS, WRITE_TOOLS, register

    class MemlensMCPServer(MCPServer):
        """Tool errors as one line: ``memory_add: argument 'wing' is required``; a read-only bearer token's calls
        reach the read tools only."""

        async def _handle_list_tools(self, ctx: Any, params: Any) -> Any:  # the SDK's handler, given the request
            listed = await super()._handle_list_tools(ctx, params)
            token = token_of(ctx)
            if token is not None and not token[1]:  # a read-only token is offered the read tools only
                listed.tools = [t for t in listed.tools if t.name in READ_TOOLS]
            return listed

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            if read_only and name in WRITE_TOOLS:  # not "Unknown tool": it exists, this server does not write
                raise ToolError(f"{name}: this server is read-only (memlens mcp --read-only); it serves only "
                                f"{', '.join(READ_TOOLS)}")
            token = token_of(context)
            if token is not None and not token[1] and name not in READ_TOOLS:  # a read-only token writes nothing
                raise ToolError(f"{name}: the bearer token {token[0]!r} is read-only; it may call only "
                                f"{', '.join(READ_TOOLS)}")
            try:
                return await super().call_tool(name, arguments, context)
            except UnexpectedToolError:
                raise
            except ToolError as exc:
                if str(exc) == f"Unknown tool: {name}":  # (already names the tool)
                    raise
                raise ToolError(one_line_error(name, exc)) from exc.__cause__

    server = MemlensMCPServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS, log_level="WARNING",
                              middleware=[_params_detail])
    register(server, engine, read_only=read_only)
    return server


async def _params_detail(ctx: Any, call_next: Any) -> Any:
    """A request whose params the SDK refuses (``tools/call`` with ``"arguments": [1]``, ``initialize`` without
    params) is answered "Invalid request parameters" with nothing else: the same code and words, followed by the
    method, the field and what is wrong with it, in one line."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS
    from pydantic import ValidationError

    try:
        return await call_next(ctx)
    except ValidationError as exc:
        raise MCPError(code=INVALID_PARAMS, message=f"Invalid request parameters: {params_problem(ctx.method, exc)}",
                       data="") from None


def params_problem(method: str, exc: Any) -> str:
    """``tools/call: 'arguments': Input should be a valid dictionary``, from a pydantic ValidationError."""
    errs = exc.errors()
    if not errs:
        return method
    err = errs[0]
    loc = ".".join(str(p) for p in err["loc"])
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    text = " ".join(str(err["msg"]).split())[:MAX_ERROR_CHARS]
    return f"{method}: {loc!r}: {text}{more}" if loc else f"{method}: {text}{more}"


def _plain_logging(level: str = "WARNING") -> None:
    import logging

    logging.basicConfig(level=level, stream=sys.stderr, format="memlens mcp: %(levelname)s %(name)s: %(message)s")


MAX_ERROR_CHARS = 500


def one_line_error(tool: str, exc: Exception) -> str:
    """A tool error in one line; argument errors name the argument and the first problem."""
    from pydantic import ValidationError

    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        errs = cause.errors()
        err = errs[0]
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        if err["type"] in ("missing", "extra_forbidden"):
            msg = "is required" if err["type"] == "missing" else f"is not an argument of {tool}"
            return f"{tool}: argument {loc!r} {msg}{more}"
        return f"{tool}: argument {loc!r}: {err['msg']}{more}"
    text = " ".join(str(exc).removeprefix(f"Error executing tool {tool}: ").split())
    if len(text) > MAX_ERROR_CHARS:  # a message quoting a huge argument back: its start says what was wrong
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return f"{tool}: {text}"


def serve(store: str | None, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          read_only: bool = False) -> int:
    if transport == "stdio":
        return _serve_stdio(store, read_only)
    return _serve_http(store, host, port, read_only)


def _shown(store: str | None) -> str:
    """The store as messages name it (``--store``, else the one the settings name: ``MEMLENS_STORE``, the
    configuration file, the user data folder); a ``postgresql://`` URI without its password."""
    from memlens.store.postgres.connect import is_uri, label

    if store is None:
        from memlens.config import load_settings
        from memlens.errors import MemlensError

        try:
            store = str(load_settings().store_path())
        except MemlensError:  # a bad setting: the engine says so in its own words
            return "the default store"
    return label(store) if is_uri(store) else store


def _warn_stray_variables() -> None:
    """A line on stderr for each ``MEMLENS_*`` variable that sets nothing (a setting's name mistyped in the client's
    server entry would otherwise be ignored without a word)."""
    from memlens.config import Settings
    from memlens.config_source import stray_warnings

    for line in stray_warnings(Settings):
        print(f"memlens mcp: {line}", file=sys.stderr, flush=True)


def _serve_stdio(store: str | None, read_only: bool) -> int:
    from memlens import __version__
    from memlens.mcp.stdio import Wire
    from memlens.sigterm import Terminated, terminate_as_exit

    wire = Wire(__version__, early=os.environ.get("MEMLENS_MCP_EARLY_INIT", "1") != "0")
    wire.protect()
    engine: Any = None
    stop: stopping.Stop | None = None
    failed: BaseException | None = None
    try:
        # SIGTERM (like Ctrl-C) unwinds while the server starts and serves; the store's close (which writes the log
        # rows still waiting in its spool) comes after, where a second signal stops the process as it would any
        with terminate_as_exit():
            try:
                wire.start()  # initialize is answered from here on; the heavy imports follow
                import anyio

                from memlens.mcp.engine import Engine

                engine = Engine(store, read_only=read_only)
                server = build(engine, read_only=read_only)
                engine.start()
                mode = "read-only, " if read_only else ""
                print(f"memlens mcp: serving {_shown(store)} over stdio ({mode}pid {os.getpid()})", file=sys.stderr,
                      flush=True)
                _warn_stray_variables()
                stop = stopping.Stop(engine)
            except KeyboardInterrupt:  # a signal while the server starts: what it read is answered, unrun
                refused = wire.refuse()
                print(f"memlens mcp: stopped before serving; {refused} request(s) read were not run", file=sys.stderr,
                      flush=True)
            else:
                try:
                    anyio.run(_serve_wire, server, wire, stop)
                except KeyboardInterrupt as exc:  # a signal outside the loop's own handlers (before or after them)
                    signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
                    if stop.stopping:  # a second signal: at once, as the loop's handler does
                        stop.force(signum, 0, f"at once ({stopping.signal_name(signum)} again)")
                    wire.refuse()
    except BaseException as exc:
        failed = exc
        raise
    finally:
        if engine is not None:
            try:
                stopping.close_engine(engine, 0 if stop is None else stop.exit_code, failed)
            except KeyboardInterrupt:  # Ctrl-C while the store closes: at once, as a second signal stops
                print("memlens mcp: interrupted while closing the store", file=sys.stderr, flush=True)
                os._exit(128 + signal.SIGINT)
    return 0 if stop is None else stop.exit_code


DRAIN_S = 300.0  # after the end of input, how long requests still running may take to be answered


async def _serve_wire(server: Any, wire: Any, stop: stopping.Stop | None = None) -> None:
    """The SDK server on the wire's lines: what the SDK's ``stdio_server`` does, minus its extra thread hops.

    At the end of input the session does not end at once (the SDK would cancel the requests still
    running, some of them already committed, and answer none of them): it ends when every request
    read has been answered, or after ``DRAIN_S``. SIGINT and SIGTERM end it the same way, after
    ``STOP_GRACE_S`` at most (``memlens.mcp.stop``); a request read after the signal is answered with an error,
    unrun.
    """
    import asyncio
    import math
    import signal

    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    from memlens.mcp.stdio import has_id, invalid_message_answer

    loop = asyncio.get_running_loop()
    read_send, read_recv = anyio.create_memory_object_stream[Any](math.inf)
    write_send, write_recv = anyio.create_memory_object_stream[Any](0)
    unanswered: set[Any] = set()  # ids of the requests handed to the SDK and not answered yet (loop thread only)
    ended = False

    def end_if_drained() -> None:
        if ended and not unanswered:
            read_send.close()  # the session ends once every request read was answered

    def receive(item: Any) -> None:  # on the loop
        msg = item.message
        if isinstance(msg, types.JSONRPCRequest):
            if stop is not None and stop.stopping:
                from memlens.mcp.stdio import SERVER_STOPPING, error_line

                wire.write(error_line(msg.id, SERVER_STOPPING, "the server is stopping: this request was not run"))
                return
            unanswered.add(msg.id)
        elif isinstance(msg, types.JSONRPCNotification) and msg.method == "notifications/cancelled":
            unanswered.discard((msg.params or {}).get("requestId"))  # a request the client cancelled gets no answer
        read_send.send_nowait(item)

    def end_of_input() -> None:  # on the loop
        nonlocal ended
        ended = True
        if unanswered:
            loop.call_later(DRAIN_S, read_send.close)
        end_if_drained()

    def on_signal(signum: int) -> None:  # on the loop
        nonlocal ended
        assert stop is not None
        if not stop.begin(signum, len(unanswered)):
            stop.force(signum, len(unanswered), f"at once ({stopping.signal_name(signum)} again)")
        ended = True
        if unanswered:
            loop.call_later(stopping.STOP_GRACE_S, grace_over)
        end_if_drained()

    def grace_over() -> None:  # on the loop
        assert stop is not None
        if unanswered:
            stop.force(stop.signum, len(unanswered), f"after {stopping.STOP_GRACE_S:.0f} s")

    def deliver(line: bytes | None) -> None:  # on the reader thread
        try:
            if line is None:
                loop.call_soon_threadsafe(end_of_input)
                return
            try:
                item: Any = SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
            except Exception as exc:  # the SDK drops such a line without an answer: answer it here
                answer = invalid_message_answer(line, exc)
                if answer is not None:
                    wire.write(answer)
                return
            if isinstance(item.message, types.JSONRPCNotification) and b'"id"' in line and has_id(line):
                # a request whose id is no string or number: the SDK reads it as a notification, unanswered
                from memlens.mcp.stdio import INVALID_REQUEST, error_line

                wire.write(error_line(None, INVALID_REQUEST, "invalid request: an id is a string or an integer"))
                return
            loop.call_soon_threadsafe(receive, item)
        except RuntimeError:
            pass  # the loop has ended: the session is over

    async def write_out() -> None:
        async with write_recv:
            async for message in write_recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                wire.write(data.encode("utf-8") + b"\n")
                if isinstance(message.message, (types.JSONRPCResponse, types.JSONRPCError)):
                    unanswered.discard(message.message.id)
                    end_if_drained()

    signals = (signal.SIGINT, signal.SIGTERM) if stop is not None else ()
    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        wire.attach(deliver)
        low = server._lowlevel_server  # the SDK's own run_stdio_async drives it the same way
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_out)
            try:
                await low.run(read_recv, write_send, low.create_initialization_options())
            finally:
                await write_send.aclose()
    finally:
        for sig in signals:  # the handlers from before the loop (KeyboardInterrupt) again while the store closes
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous[sig])


def _serve_http(store: str | None, host: str, port: int, read_only: bool) -> int:
    import socket

    import uvicorn

    from memlens.config import load_settings
    from memlens.errors import MemlensError
    from memlens.mcp.auth import Front
    from memlens.mcp.engine import Engine
    from memlens.mcp.listen import exposure_warning, refuse_unauthenticated, transport_security
    from memlens.mcp.sessions import TokenSessions
    from memlens.mcp.tokens import load as load_tokens

    mcp_settings = load_settings().mcp  # a bad setting is one line before anything listens
    tokens = load_tokens(mcp_settings.tokens_file, mcp_settings.tokens)
    if not tokens:
        refuse_unauthenticated(host)  # an address other machines reach needs tokens, refused before anything binds
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        bound, actual = sock.getsockname()[:2]
        if not tokens:
            refuse_unauthenticated(bound)  # a name (--host myhost) is decided on the address it bound
    except (OSError, OverflowError) as exc:
        sock.close()
        raise MemlensError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    except MemlensError:
        sock.close()
        raise
    sock.listen(128)
    shown = f"[{host}]" if ":" in host else host
    warning = exposure_warning(host, bound)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    engine = Engine(store, read_only=read_only)
    server = build(engine, read_only=read_only)
    # Host and Origin are checked for every bind address (memlens.mcp.listen), not only for the SDK's loopback three;
    # the SDK answers a session beyond max_sessions with 503 (TokenSessions bounds each token's, memlens.mcp.sessions),
    # Front the token (401) and a body over max_body_bytes (413; the SDK gets the same bound, so its own plain-text 413
    # never answers first)
    app = server.streamable_http_app(host=host, transport_security=transport_security(host, bound, mcp_settings),
                                     max_sessions=mcp_settings.max_sessions,
                                     session_idle_timeout=mcp_settings.session_idle_seconds,
                                     max_request_body_size=mcp_settings.max_body_bytes)
    if tokens:  # one token's sessions are bounded too: a client that never ends its sessions locks no one else out
        app = TokenSessions(app, min(mcp_settings.max_sessions_per_token, mcp_settings.max_sessions))
    app = Front(app, tokens if tokens else None, mcp_settings.max_body_bytes)
    mode = "read-only, " if read_only else ""
    if tokens:
        mode += f"{len(tokens)} bearer token{'s' if len(tokens) != 1 else ''} from {tokens.source}, "
    print(f"memlens mcp: serving http://{shown}:{actual}/mcp ({mode}pid {os.getpid()})", file=sys.stderr, flush=True)
    _warn_stray_variables()
    engine.start()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    stop = stopping.Stop(engine)
    served = stopping.graceful_server(config, app, stop)
    # stopping while a client holds its event stream open ends that stream unanswered: expected then, not an error
    logging.getLogger("uvicorn.error").addFilter(
        lambda r: not (served.should_exit and r.getMessage().startswith("ASGI callable returned without completing")))
    failed: BaseException | None = None
    try:
        served.run(sockets=[sock])
    except BaseException as exc:
        failed = exc
        raise
    finally:
        stopping.close_engine(engine, stop.exit_code, failed)
    return stop.exit_code
