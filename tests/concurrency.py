"""Helpers for tests that run threads at once or fork while a thread holds a lock."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


def run_threads(target: Callable[[int], None], n: int, timeout: float = 120.0) -> None:
    """``target(i)`` for each i below ``n``, each on a thread of its own, all started before any is waited for;
    fails if one is still running ``timeout`` seconds into its wait."""
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread is still running"


def fork_while_held(hold: Callable[[], AbstractContextManager[Any]], child: Callable[[], bool]) -> int:
    """Fork while another thread of this process holds ``hold()``; the child runs ``child()`` (True: exit code 0,
    anything else or an exception: 1) and leaves without the test run's teardown. Returns the child's exit code,
    the thread's hold released."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with hold():
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if child() else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        thread.join(10)
    return os.waitstatus_to_exitcode(status)
