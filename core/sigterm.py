"""SIGTERM that unwinds like Ctrl-C, for commands that must clean up when stopped (stdlib only: the MCP server
takes it before it imports the engine)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is (everything that cleans up after Ctrl-C does after it); a command ends with
    status 143 (128 + SIGTERM) for it, as a process stopped by SIGTERM does."""


@contextmanager
def terminate_as_exit() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt on the main thread, as Ctrl-C does (an import's scratch files and staged
    rows are removed, a store is closed); elsewhere than on the main thread, nothing changes."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
