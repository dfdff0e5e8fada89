"""The stdio wire of ``memlens mcp``: a pure JSON-RPC stdout, and ``initialize`` answered at once.

Stdlib only: this runs before the SDK (about a second of imports here) and
long before the model loads.

1. Stream protection. The protocol gets a private duplicate of fd 1; fd 1
   itself (and ``sys.stdout``) then point at stderr, and fd 0 at the null
   device. A stray ``print``, a dependency's banner or a C library writing to
   fd 1 lands on stderr and can never corrupt the JSON-RPC stream.
2. Early ``initialize``. A reader thread takes the client's lines from the real
   stdin. If the first one is a well-formed ``initialize`` request, it is answered
   straight away from ``memlens.mcp.meta`` (the same answer the SDK gives), so a
   client's handshake timeout never waits for imports or the model. The request is
   still passed on to the SDK session, which sets itself up from it; its own
   answer to that id is dropped here (and compared: a difference is logged).
   ``MEMLENS_MCP_EARLY_INIT=0`` turns this off.

3. Bounded lines. A request line may be ``MAX_LINE`` bytes long; a longer one is
   read past in blocks, never held whole, and answered with an error (its id is
   looked for in its first bytes).

The server (``memlens.mcp.server``) attaches a ``deliver`` callback that parses
each line into the SDK's message type and hands it to the event loop, and
writes the SDK's answers with ``Wire.write``: one thread hop per message each
way, as few as the SDK's own stdio transport (which cannot answer early).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

from memlens.mcp.meta import initialize_result

MAX_LINE = 64 << 20  # bytes in one request line (an entry of 10M characters, JSON-escaped, still fits)
_HEAD = 64 << 10  # of a longer line, the bytes kept to find its id
PARSE_ERROR, INVALID_REQUEST = -32700, -32600
SERVER_STOPPING = -32000  # JSON-RPC server error: a request read after the server began to stop, not run
_DELIMS = re.compile(r'["\[\]{}]')
_SCALAR_END = re.compile(r"[\s,\]}]")
_WS = re.compile(r"\s*")


def error_line(rid: Any, code: int, message: str) -> bytes:
    """One JSON-RPC error answer (``rid`` None: the request's id could not be read)."""
    answer = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    return json.dumps(answer, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def request_id(text: str) -> int | str | None:
    """The top-level ``"id"`` of a JSON object, read without parsing the other members (they may nest too
    deeply to parse, or be cut off); None when there is none before the text stops being a JSON object.
    Linear in the text: nested values are skipped by counting brackets outside strings."""
    try:
        i = _WS.match(text, 0).end()  # type: ignore[union-attr]  # \s* always matches
        if text[i : i + 1] != "{":
            return None
        i += 1
        while True:
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if text[i : i + 1] != '"':
                return None
            key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]  # the stdlib's string scanner
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if text[i : i + 1] != ":":
                return None
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            if key == "id":
                value = json.JSONDecoder().raw_decode(text, i)[0] if text[i : i + 1] not in ("[", "{") else None
                return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None
            i = _WS.match(text, _skip_value(text, i)).end()  # type: ignore[union-attr]
            if text[i : i + 1] != ",":
                return None
            i += 1
    except (ValueError, IndexError):
        return None


def _skip_value(text: str, i: int) -> int:
    """Where the JSON value at ``i`` ends (ValueError if it does not before the text does)."""
    if text[i] == '"':
        return int(json.decoder.scanstring(text, i + 1)[1])  # type: ignore[attr-defined]
    if text[i] not in "[{":
        m = _SCALAR_END.search(text, i)
        return m.start() if m else len(text)
    depth = 0
    while True:
        m = _DELIMS.search(text, i)
        if m is None:
            raise ValueError("unterminated")
        ch, i = m.group(), m.end()
        if ch == '"':
            i = json.decoder.scanstring(text, i)[1]  # type: ignore[attr-defined]
        elif ch in "[{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i


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
        self._pending_early = early
        self.closed = False
        self._out_lock = threading.Lock()
        self._in_lock = threading.Lock()
        self._buffered: list[bytes | None] = []  # lines read before the server attached
        self._deliver: Callable[[bytes | None], object] | None = None

    def protect(self) -> None:
        sys.stdout.flush()
        self.wire_in = _dup_private(0)
        self.wire_out = _dup_private(1)
        os.dup2(2, 1)  # stray fd-1 writes (prints, C libraries) go to stderr
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdout = sys.stderr

    def start(self) -> None:
        threading.Thread(target=self._read, name="memlens-wire-in", daemon=True).start()

    def attach(self, deliver: Callable[[bytes | None], None]) -> None:
        """From now on hand every line (``None`` at end of input) to ``deliver``, the buffered ones first."""
        with self._in_lock:
            for line in self._buffered:
                deliver(line)
            self._buffered.clear()
            self._deliver = deliver

    def refuse(self) -> int:
        """The server stops before it served: every request read and not handed to it (and every one read from now
        on) is answered with an error, unrun; returns how many were so far."""
        def refuse_line(line: bytes | None) -> int:
            if line is None:
                return 0
            rid = request_id(line.decode("utf-8", "replace"))
            if rid is None or (self.early_id is not None and rid == self.early_id) or b'"method"' not in line:
                return 0  # a notification, a response, the initialize already answered, or no JSON object
            self._send(error_line(rid, SERVER_STOPPING, "the server is stopping: this request was not run"))
            return 1

        with self._in_lock:
            refused = sum(refuse_line(line) for line in self._buffered if self._deliver is None)
            self._buffered.clear()
            self._deliver = refuse_line
        return refused

    def write(self, line: bytes) -> None:
        """One outgoing message (a JSON line); the SDK's own answer to an early-answered initialize is dropped."""
        if self._pending_early and self.early_id is not None and self._is_early_reply(line):
            self._pending_early = False
            return
        self._send(line)

    # -- internals -----------------------------------------------------------------------------

    def _send(self, line: bytes) -> None:
        with self._out_lock:
            if self.closed:
                return
            try:
                _write_all(self.wire_out, line)
            except OSError as exc:  # the client is gone: drop the rest; its stdin's end stops the session
                self.closed = True
                print(f"memlens mcp: stdout: {exc}", file=sys.stderr, flush=True)

    def _hand(self, line: bytes | None) -> None:
        with self._in_lock:
            if self._deliver is None:
                self._buffered.append(line)
            else:
                self._deliver(line)

    def _read(self) -> None:
        first = True
        try:
            with open(self.wire_in, "rb", closefd=False) as src:
                while line := src.readline(MAX_LINE + 1):
                    if len(line) > MAX_LINE and not line.endswith(b"\n"):
                        self._too_long(line[:_HEAD], src)
                        continue
                    if not line.strip():
                        continue
                    if first:
                        first = False
                        if self.early:
                            self._answer_early(line)
                    self._hand(line)
        except OSError as exc:
            print(f"memlens mcp: stdin: {exc}", file=sys.stderr, flush=True)
        finally:
            self._hand(None)  # end of input: the session ends

    def _too_long(self, head: bytes, src: Any) -> None:
        """Read past the rest of an over-long line (a block at a time) and answer it with an error."""
        rest = src.readline(1 << 20)
        while rest and not rest.endswith(b"\n"):
            rest = src.readline(1 << 20)
        rid = request_id(head.decode("utf-8", "replace"))
        print(f"memlens mcp: invalid message: a line longer than {MAX_LINE} bytes (id {rid!r}) was dropped",
              file=sys.stderr, flush=True)
        self._send(error_line(rid, INVALID_REQUEST, f"invalid request: longer than {MAX_LINE} bytes"))

    def _answer_early(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
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

    def _is_early_reply(self, line: bytes) -> bool:
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return False
        if not isinstance(msg, dict) or msg.get("id") != self.early_id or "method" in msg:
            return False
        if msg.get("result") != self.early_answer:
            self.mismatch = json.dumps(msg.get("result") or msg.get("error"), sort_keys=True)
            print(f"memlens mcp: warning: initialize was answered early with {json.dumps(self.early_answer, sort_keys=True)}"
                  f" but the server answers {self.mismatch}", file=sys.stderr, flush=True)
        return True


def has_id(line: bytes) -> bool:
    """Whether a line is a JSON object with an ``id`` (of whatever kind)."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(msg, dict) and "id" in msg


def invalid_message_answer(line: bytes, exc: Exception) -> bytes | None:
    """The JSON-RPC error for a line that is not a valid message, or None when it cannot be answered.

    The SDK drops such a line silently, and the client would wait for an answer that never comes.
    A line that is not JSON at all (invalid UTF-8, nesting too deep to parse, a syntax error, a
    \\u escape that is half a surrogate pair, as the HTTP transport says too) gets a parse error
    (-32700); a JSON request the SDK refuses (a wrong field) gets an invalid-request error (-32600).
    Either answers the request's id when it can be read (for a parse error, from the top of the
    line without parsing the rest, after a byte order mark if the line starts with one), else
    null. JSON that is no request (a batch, a number, an object without a method) gets an
    invalid-request error with a null id (or its own); a malformed notification or answer is
    only reported on stderr.
    """
    errors = getattr(exc, "errors", None)
    first = errors()[0].get("msg") if callable(errors) and errors() else str(exc)
    detail = " ".join(str(first).split())[:300]
    print(f"memlens mcp: invalid message: {detail}", file=sys.stderr, flush=True)
    try:
        text = line.decode("utf-8")
        msg = json.loads(text)
    except UnicodeDecodeError:
        return error_line(request_id(line.decode("utf-8", "replace")), PARSE_ERROR, "parse error: the line is not UTF-8")
    except (ValueError, RecursionError):
        if text.startswith("\ufeff"):  # some Windows tools write one: the id is read after it
            return error_line(request_id(text[1:]), PARSE_ERROR, "parse error: the line starts with a byte order mark "
                                                                 "(U+FEFF); a JSON-RPC line is UTF-8 without one")
        return error_line(request_id(text), PARSE_ERROR, f"parse error: {detail}")
    if isinstance(msg, list):
        return error_line(None, INVALID_REQUEST, "invalid request: a batch (a JSON list) is not part of MCP; send "
                                                 "one message per line")
    if not isinstance(msg, dict) or ("method" not in msg and not ({"result", "error"} & set(msg))):
        rid = msg.get("id") if isinstance(msg, dict) else None
        rid = rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None
        return error_line(rid, INVALID_REQUEST, "invalid request: a message is a JSON object with a method")
    if "method" not in msg or "id" not in msg:
        return None  # a client's malformed answer or notification: nothing to answer
    rid = msg["id"]
    if not isinstance(rid, (int, str)) or isinstance(rid, bool):
        return error_line(None, INVALID_REQUEST, "invalid request: an id is a string or an integer")
    try:
        json.dumps(msg, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a \ud800 escape alone: JSON's syntax, but no Unicode character
        return error_line(rid, PARSE_ERROR, "parse error: a \\u escape in the line is half of a surrogate pair, "
                                            "not a character")
    return error_line(rid, INVALID_REQUEST, f"invalid request: {detail}")
