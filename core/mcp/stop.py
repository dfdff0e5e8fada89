"""How ``memlens mcp`` stops when asked (SIGINT, SIGTERM): gracefully, over stdio and over HTTP.

``Stop`` is the rule both transports follow; ``graceful_server`` is uvicorn's
server made to follow it (the stdio loop follows it in ``memlens.mcp.server``).
Nothing here imports the SDK or uvicorn at module level: the stdio wire answers
``initialize`` before any heavy import.
"""

from __future__ import annotations

import os
import sys
from typing import Any

STOP_GRACE_S = 10.0  # after SIGINT or SIGTERM, how long requests already running may take to be answered


class Stop:
    """SIGINT or SIGTERM while serving (how a person or a host stops a server): a graceful stop.

    Nothing new is taken on; calls still waiting for the store or the model fail unrun; the requests
    already running finish and are answered, for ``STOP_GRACE_S`` at most. Then the server exits with
    status 0, the status of a server that stopped when asked with nothing left undone (as a host's
    stop expects). A second signal stops at once, and so does the end of the grace with requests still
    running: one line on stderr says how many were left unanswered, and the status is 128 + the signal
    (130 for Ctrl-C, as for any interrupted memlens command; 143 for SIGTERM). A request cut off so
    has either committed its write or written nothing (every write is one transaction): only its answer
    is missing.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.signum = 0  # the first signal; 0 while serving
        self.exit_code = 0

    @property
    def stopping(self) -> bool:
        return self.signum != 0

    def begin(self, signum: int, running: int) -> bool:
        """The first signal: False when this is a second one, which must stop at once (``force``)."""
        if self.stopping:
            return False
        self.signum = signum
        self.engine.stop_waiting()
        if running:
            print(f"memlens mcp: stopping: answering the {running} request{'s' if running != 1 else ''} still "
                  f"running (at most {STOP_GRACE_S:.0f} s; {signal_name(signum)} again stops at once)",
                  file=sys.stderr, flush=True)
        return True

    def force(self, signum: int, running: int, why: str) -> None:
        """Stop now: one line, status 128 + the signal, no interpreter teardown (a tool's worker thread may be
        inside a write; the store rolls back what did not commit)."""
        print(f"memlens mcp: stopped {why}; {running} request{'s' if running != 1 else ''} left unanswered",
              file=sys.stderr, flush=True)
        os._exit(128 + signum)


def signal_name(signum: int) -> str:
    import signal

    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def graceful_server(config: Any, front: Any, stop: Stop) -> Any:
    """uvicorn's server, stopping as ``Stop`` says: at SIGINT or SIGTERM it stops accepting (a POST that comes on a
    connection kept alive gets 503, unrun), lets the POST requests already running (``front.running``) finish and be
    answered, then ends the clients' event streams and exits.

    Left to themselves, uvicorn and the SDK's event streams (sse-starlette) would end every event stream at the first
    signal, the answers of requests still running with them (their writes committed, their clients told nothing);
    a client that sent part of a body would hold the stop for as long as it liked; and uvicorn raises the signal again
    once stopped (a traceback-free but interrupted-looking exit)."""
    import asyncio
    import contextlib
    import signal
    import time

    import uvicorn
    from sse_starlette.sse import AppStatus

    AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]  # event streams end when shutdown() says so

    class GracefulServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:  # a signal handler, on the main thread
            if not stop.begin(sig, front.running):
                stop.force(sig, front.running, f"at once ({signal_name(sig)} again)")
            front.stopping = True  # a request on a connection kept alive gets 503, unrun
            self.should_exit = True

        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            for server in self.servers:  # no new connection (uvicorn's shutdown does it too, later)
                server.close()
            deadline = time.monotonic() + STOP_GRACE_S
            while front.running and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if front.running:  # a request still running, or a client still sending its body
                stop.force(stop.signum, front.running, f"after {STOP_GRACE_S:.0f} s")
            AppStatus.should_exit = True  # the event streams (GET) end: sse-starlette looks every 0.5 s
            self.config.timeout_graceful_shutdown = 5  # for them, and for keep-alive connections to close
            await super().shutdown(sockets)

    return GracefulServer(config)


def close_engine(engine: Any, code: int, failed: BaseException | None = None) -> None:
    """Close the store; when the model loader is still running (in native code), exit with ``code`` at once: the
    interpreter's teardown must not run under it (nor wait for it). ``failed``, the error that ended the serving,
    is not lost on that way out: its traceback is printed and the status is 1 (a SystemExit keeps its own)."""
    if not engine.close():
        if isinstance(failed, SystemExit):
            code = failed.code if isinstance(failed.code, int) else (0 if failed.code is None else 1)
        elif failed is not None and not isinstance(failed, KeyboardInterrupt):
            import traceback

            traceback.print_exception(failed)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
