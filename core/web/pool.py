"""Extraction worker processes, kept between calls of one process and killed when one runs too long.

A worker is ``python -m memlens.web.worker`` (see there for its protocol). It
is started with ``subprocess`` and spoken to from a thread, so it does not
belong to any event loop: a later call, from another loop or thread, reuses it
and does not pay for starting Python, lxml and trafilatura again. A worker that
passes its time limit, or whose call is cancelled, is killed (its thread's read
then ends at once); at most ``MAX_IDLE`` idle workers are kept, and they end
with this process (they also end by themselves when their input closes).
"""

from __future__ import annotations

import atexit
import json
import subprocess
import sys
import threading
from typing import Any

MAX_IDLE = 2


class Worker:
    def __init__(self, command: tuple[str, ...]) -> None:
        self.command = command
        self.proc = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, close_fds=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, head: dict[str, Any], body: bytes) -> dict[str, Any]:
        """One request and its answer (blocking; called on a worker thread)."""
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps(head).encode("utf-8") + b"\n" + body)
            stdin.flush()
            line = stdout.readline()
        except (OSError, ValueError):  # killed meanwhile: the pipe is closed
            line = b""
        if not line:
            raise RuntimeError("text extraction failed: the worker process ended")
        answer = json.loads(line)
        return answer if isinstance(answer, dict) else {"error": "unexpected answer"}

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


class Pool:
    """Idle workers per command, shared by every call in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, ...], list[Worker]] = {}
        self._all: set[Worker] = set()

    def take(self, command: tuple[str, ...]) -> Worker:
        with self._lock:
            idle = self._idle.get(command, [])
            while idle:
                w = idle.pop()
                if w.alive():
                    return w
                self._all.discard(w)
            w = Worker(command)
            self._all.add(w)
            return w

    def give_back(self, w: Worker) -> None:
        with self._lock:
            idle = self._idle.setdefault(w.command, [])
            if w.alive() and len(idle) < MAX_IDLE:
                idle.append(w)
                return
            self._all.discard(w)
        w.kill()

    def discard(self, w: Worker) -> None:
        with self._lock:
            self._all.discard(w)
            idle = self._idle.get(w.command, [])
            if w in idle:
                idle.remove(w)
        w.kill()

    def prestart(self, command: tuple[str, ...]) -> None:
        """Start a worker now when none is idle, so its start-up overlaps the fetches."""
        with self._lock:
            if self._idle.get(command):
                return
        w = Worker(command)
        with self._lock:
            self._all.add(w)
            self._idle.setdefault(command, []).append(w)

    def shutdown(self) -> None:
        with self._lock:
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for w in workers:
            w.kill()


POOL = Pool()
atexit.register(POOL.shutdown)
DEFAULT_COMMAND = (sys.executable, "-m", "memlens.web.worker")
