"""The stdio wire of ``memlens mcp``: a pure JSON-RPC stdout, and ``initialize`` answered at once.

Stdlib only: this runs before the SDK (about a second of imports here) and
long before the model loads.

1. Stream protection. The protocol gets a private duplicate of fd 1; fd 1
   itself (and ``sys.stdout``) then point at stderr, and fd 0 at the null
   device. A stray ``print``, a dependency's banner or a C library writing to
   fd 1 lands on stderr and can never corrupt the JSON-RPC stream.
2. Early ``initialize``. A reader thread takes the client's lines from the real
   stdin. If the first one is a well-formed ``initialize`` request, it is answered
   straight away from ``memlens.mcp_meta`` (the same answer the SDK gives), so a
   client's handshake timeout never waits for imports or the model. The request is
   still passed on to the SDK session, which sets itself up from it; its own
   answer to that id is dropped here (and compared: a difference is logged).
   ``MEMLENS_MCP_EARLY_INIT=0`` turns this off.

Lines reach the SDK through pipes, so the SDK's own ``stdio_server`` reads and
writes them with its usual framing.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
from typing import Any, BinaryIO

from .mcp_meta import initialize_result


def _dup_private(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class Wire:
    """The process's stdin/stdout, taken over for the protocol (call ``protect`` first thing)."""

    def __init__(self, version: str, early: bool = True) -> None:
        self.version = version
        self.early = early
        self.early_id: Any = None
        self.early_answer: dict[str, Any] | None = None
        self.mismatch: str | None = None
        self._out_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def protect(self) -> None:
        sys.stdout.flush()
        self.wire_in = _dup_private(0)
        self.wire_out = _dup_private(1)
        os.dup2(2, 1)  # stray fd-1 writes (prints, C libraries) go to stderr
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdout = sys.stderr
        self.sdk_in_r, self.sdk_in_w = os.pipe()
        self.sdk_out_r, self.sdk_out_w = os.pipe()

    def start(self) -> None:
        for target, name in ((self._pump_in, "memlens-wire-in"), (self._pump_out, "memlens-wire-out")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    # -- what the SDK reads and writes ---------------------------------------------------------

    def sdk_streams(self) -> tuple[BinaryIO, BinaryIO]:
        """Binary files for the SDK's stdio_server: its stdin and its stdout."""
        return os.fdopen(self.sdk_in_r, "rb"), os.fdopen(self.sdk_out_w, "wb")

    def wait_flushed(self, timeout: float = 5.0) -> None:
        """After the SDK closed its stdout: let the last messages reach the client."""
        self._threads[1].join(timeout)

    # -- pumps -------------------------------------------------------------------------------

    def _send(self, line: bytes) -> None:
        with self._out_lock:
            _write_all(self.wire_out, line)

    def _pump_in(self) -> None:
        first = True
        try:
            with open(self.wire_in, "rb", closefd=False) as src:
                for line in src:
                    if first and line.strip():
                        first = False
                        if self.early:
                            self._answer_early(line)
                    _write_all(self.sdk_in_w, line)
        except OSError as exc:
            print(f"memlens mcp: stdin: {exc}", file=sys.stderr, flush=True)
        finally:
            os.close(self.sdk_in_w)  # EOF for the SDK: the session ends

    def _answer_early(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not (isinstance(msg, dict) and msg.get("method") == "initialize" and msg.get("jsonrpc") == "2.0"):
            return
        params, rid = msg.get("params"), msg.get("id")
        if not isinstance(params, dict) or not isinstance(rid, (int, str)) or isinstance(rid, bool):
            return
        info = params.get("clientInfo")
        if not (isinstance(params.get("protocolVersion"), str) and isinstance(params.get("capabilities"), dict)
                and isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str)):
            return  # let the SDK answer (and reject) anything unusual
        self.early_answer = initialize_result(params["protocolVersion"], self.version)
        self.early_id = rid
        reply = {"jsonrpc": "2.0", "id": rid, "result": self.early_answer}
        self._send(json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")

    def _pump_out(self) -> None:
        pending = self.early
        with open(self.sdk_out_r, "rb") as src:
            for line in src:
                if pending and self.early_id is not None and self._is_early_reply(line):
                    pending = False
                    continue
                self._send(line)

    def _is_early_reply(self, line: bytes) -> bool:
        try:
            msg = json.loads(line)
        except ValueError:
            return False
        if not isinstance(msg, dict) or msg.get("id") != self.early_id or "method" in msg:
            return False
        if msg.get("result") != self.early_answer:
            self.mismatch = json.dumps(msg.get("result") or msg.get("error"), sort_keys=True)
            print(f"memlens mcp: warning: initialize was answered early with {json.dumps(self.early_answer, sort_keys=True)}"
                  f" but the server answers {self.mismatch}", file=sys.stderr, flush=True)
        return True
