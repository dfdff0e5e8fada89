"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 (tests and the screenshot command).

``FakeLLM(mode, tokens)`` listens on a free port of 127.0.0.1 in a daemon
thread; ``base_url`` is what ``[llm] base_url`` takes. Modes:

* ``stream``: every token as one server-sent event, then ``data: [DONE]``;
* ``slow``: the first token, then silence until released (a read timeout fires first);
* ``drip``: one token every ``drip_s`` seconds, never done (the overall timeout fires);
* ``die``: ``die_after`` tokens, then the connection is cut mid-body (chunked, no terminating chunk);
* ``hold``: ``hold_after`` tokens, then waits for :meth:`release` before sending the rest and [DONE];
* ``status``: answers HTTP ``status`` with an OpenAI-style error body;
* ``json``: ignores ``"stream": true`` and sends the whole completion as one JSON object;
* ``truncated``: the tokens, then a clean end of body without ``finish_reason`` or ``[DONE]``;
* ``echo``: a server that repeats the request's ``Authorization`` header (a leaky proxy, a hostile
  endpoint): in a 401 body (``echo_in="status"``), in an error event midway (``"event"``) or in
  the answer itself, split over several tokens (``"answer"``);
* ``longline``: ``data: `` and then ``longline_bytes`` bytes without a newline, ever.

``tokens`` is a list of strings or a function of the request body returning
one (to cite ids that were actually sent). Every request is recorded
(``requests``: body and headers). Nothing here connects anywhere: it only
listens, on loopback.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WAIT_S = 30.0  # the longest a held or slow response waits for release (teardown releases it sooner)


def chunk(payload: str) -> bytes:
    data = payload.encode()
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(obj: Any) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n"


def delta(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
            "choices": [{"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}]}


def ids_in_prompt(body: dict[str, Any]) -> list[str]:
    """The entry ids the memory context shows, in order: each entry's line ends with ``(wing/room · ID …)``."""
    user = body["messages"][-1]["content"]
    return re.findall(r"_\([^·)]+ · ([A-Za-z0-9_.:\-]+)", user)


def cited_answer(body: dict[str, Any]) -> list[str]:
    """A fixed answer citing the first two entries the prompt shows, and one id that was never sent."""
    a, b = ids_in_prompt(body)[:2]
    return ["Callbacks ", "block ", "because ", "the executor ", "runs them ", "one at a time ",
            f"[{a}]; ", "long work belongs ", f"in its own callback group [{b}, lc-made-up-999]."]


class FakeLLM:
    def __init__(self, mode: str = "stream", tokens: list[str] | Callable[[dict[str, Any]], list[str]] | None = None, *,
                 status: int = 500, die_after: int = 2, hold_after: int = 3, drip_s: float = 0.2,
                 echo_in: str = "status", longline_bytes: int = 0) -> None:
        self.mode, self.status, self.echo_in, self.longline_bytes = mode, status, echo_in, longline_bytes
        self.tokens = tokens if tokens is not None else ["Hello", " from", " the", " fake", " model."]
        self.die_after, self.hold_after, self.drip_s = die_after, hold_after, drip_s
        self.requests: list[dict[str, Any]] = []
        self.sent = threading.Event()  # set once a held response has sent its first part
        self._release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                try:
                    if fake.mode == "echo":
                        fake._echo(self, str(self.headers.get("Authorization")))
                        return
                    fake._answer(self, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def release(self) -> None:
        self._release.set()

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    # -- one response -----------------------------------------------------------------------------

    def _echo(self, h: BaseHTTPRequestHandler, auth: str) -> None:
        if self.echo_in == "status":
            data = json.dumps({"error": {"message": f"invalid credentials: {auth}", "type": "auth"}}).encode()
            return _send_json(h, 401, data)
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.write(chunk(event(delta("Before the error. "))))
        if self.echo_in == "event":
            h.wfile.write(chunk(event({"error": {"message": f"upstream rejected {auth}"}})))
        else:
            for i in range(0, len(auth), 3):  # the header's text split over tokens
                h.wfile.write(chunk(event(delta(auth[i:i + 3]))))
            h.wfile.write(chunk(event(delta(" was your header.", "stop"))) + chunk(event("[DONE]")))
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _answer(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        tokens = self.tokens(body) if callable(self.tokens) else list(self.tokens)
        if self.mode == "status":
            data = json.dumps({"error": {"message": f"fake failure {self.status}", "type": "fake"}}).encode()
            return _send_json(h, self.status, data)
        if self.mode == "html":  # a base URL that points at a web page, not at the API
            page = b"<!doctype html><html><body><h1>Welcome</h1></body></html>"
            h.send_response(200)
            h.send_header("Content-Type", "text/html; charset=utf-8")
            h.send_header("Content-Length", str(len(page)))
            h.end_headers()
            h.wfile.write(page)
            return None
        if self.mode == "json":
            data = json.dumps({"object": "chat.completion", "model": "fake", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "".join(tokens)}, "finish_reason": "stop"}]}).encode()
            return _send_json(h, 200, data)
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def send(payload: str) -> None:
            h.wfile.write(chunk(payload))
            h.wfile.flush()

        send(": fake keep-alive comment\n\n")
        if self.mode == "longline":
            send("data: ")
            block = "x" * (1 << 20)
            for _ in range(self.longline_bytes >> 20):
                send(block)
            h.wfile.write(b"0\r\n\r\n")
            return
        send(event({**delta(""), "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}))
        if self.mode == "die":
            for t in tokens[: self.die_after]:
                send(event(delta(t)))
            h.wfile.write(b"40\r\ndata: {\"choi")  # half a chunk, then the connection goes
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if self.mode == "slow":
            send(event(delta(tokens[0])))
            self._release.wait(WAIT_S)
            return
        if self.mode == "drip":
            for _ in range(int(WAIT_S / self.drip_s)):
                send(event(delta(tokens[0])))
                if self._release.wait(self.drip_s):
                    return
            return
        if self.mode == "truncated":
            for t in tokens:
                send(event(delta(t)))
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
            return
        first = tokens[: self.hold_after] if self.mode == "hold" else tokens
        for t in first:
            send(event(delta(t)))
        if self.mode == "hold":
            self.sent.set()
            self._release.wait(WAIT_S)
            for t in tokens[self.hold_after:]:
                send(event(delta(t)))
        send(event(delta("", "stop")))
        send(event("[DONE]"))
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()


def _send_json(h: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
