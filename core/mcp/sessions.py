"""How many HTTP sessions one bearer token may hold open: ``[mcp] max_sessions_per_token``.

The SDK bounds the sessions of the whole server (``[mcp] max_sessions``; one more gets 503) and closes a
session only when its client ends it (DELETE) or when it has been idle for ``[mcp] session_idle_seconds``
(no request in flight, no event stream open). A client that opens sessions and never ends them would so fill
the server and lock every other client out for as long. ``TokenSessions`` keeps, for each token, its sessions
in the order they were last used; a token that opens one more than its bound has its least recently used
session closed first (one without an open event stream before one with: a client that holds its stream open is
alive), as if its client had sent DELETE (that client's next request on it gets 404, and an MCP
client then opens a new session). A session with a POST request running is never closed so: when every
session of the token has one, the new one is refused with 503 and a one-line JSON-RPC error.

Without tokens (loopback only) nothing tells one client from another: only ``max_sessions`` applies.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from typing import Any

SESSION_HEADER = b"mcp-session-id"
TOO_MANY = -32603  # the JSON-RPC code of the SDK's own 503 at max_sessions


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    return next((v for k, v in scope.get("headers", []) if k == name), None)


def token_name(scope: dict[str, Any]) -> str | None:
    """The bearer token's name for a request that came with one (``memlens.mcp.auth.Front`` set it)."""
    access = getattr(scope.get("user"), "access_token", None)
    return getattr(access, "client_id", None)


def _sessions(n: int) -> str:
    return "1 session" if n == 1 else f"{n} sessions"


def _opens_session(body: bytes) -> bool:
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


class _Session:
    """One session of a token: its POST requests in flight, its event streams open (GET), and the DELETE that ends it
    as its client would."""

    __slots__ = ("running", "streams", "ending")

    def __init__(self, opening: dict[str, Any], session: bytes) -> None:
        self.running = 0
        self.streams = 0
        # the Host and Origin that opened it passed the SDK's check; the request that makes room may carry others
        headers = [(k, v) for k, v in opening.get("headers", []) if k in (b"host", b"origin")]
        self.ending = {**opening, "method": "DELETE", "query_string": b"", "headers": [*headers, (SESSION_HEADER, session)]}


class TokenSessions:
    """ASGI layer between ``Front`` (which names the token) and the SDK's app (which keeps the sessions at ``path``)."""

    def __init__(self, app: Any, per_token: int, path: str = "/mcp") -> None:
        self.app = app
        self.per_token = per_token
        self.path = path
        self.open: dict[str, OrderedDict[str, _Session]] = {}  # per token name: its sessions, least recently used first
        self._opening: dict[str, int] = {}  # per token name: sessions being opened (their initialize not answered)
        self._told: set[str] = set()  # tokens whose first closed session was said on stderr

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        name = token_name(scope) if scope.get("type") == "http" and scope.get("path") == self.path else None
        if name is None:
            await self.app(scope, receive, send)
            return
        session = _header(scope, SESSION_HEADER)
        if session is not None:
            await self._use(name, session.decode("latin-1"), scope, receive, send)
        elif scope.get("method") == "POST":
            await self._open(name, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _use(self, name: str, session: str, scope: dict[str, Any], receive: Any, send: Any) -> None:
        sessions = self.open.get(name)
        known = sessions.get(session) if sessions is not None else None
        post, stream = scope.get("method") == "POST", scope.get("method") == "GET"
        if sessions is not None and known is not None:
            sessions.move_to_end(session)
            known.running += post
            known.streams += stream
        status = 0

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if known is not None:
                known.running -= post
                known.streams -= stream
                if sessions is not None and (status == 404 or (scope.get("method") == "DELETE" and status == 200)):
                    sessions.pop(session, None)  # ended by its client, or gone already (idle)

    async def _open(self, name: str, scope: dict[str, Any], receive: Any, send: Any) -> None:
        first = await receive()  # Front has read the whole body: it comes as one message
        body = first.get("body", b"") if first.get("type") == "http.request" else b""
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return dict(first)
            return dict(await receive())

        if not _opens_session(body):  # the SDK refuses it (only initialize opens a session): nothing to make room for
            await self.app(scope, replay, send)
            return
        sessions = self.open.setdefault(name, OrderedDict())
        opening = self._opening.get(name, 0)
        excess = len(sessions) + opening + 1 - self.per_token
        # least recently used first, those with an event stream open after all those without (a stable sort)
        idle = sorted([(sid, s) for sid, s in sessions.items() if not s.running],
                      key=lambda kv: kv[1].streams > 0)[:max(0, excess)]
        if len(idle) < excess:
            await _refuse(send, self._full(name, sum(1 for s in sessions.values() if s.running), opening))
            return
        for sid, _ in idle:  # decided before anything awaits: a concurrent opening counts what is left
            del sessions[sid]
        self._opening[name] = opening + 1
        counted = False

        async def watch(message: dict[str, Any]) -> None:
            nonlocal counted
            if message["type"] == "http.response.start" and not counted:
                sid = _header(message, SESSION_HEADER)
                if sid is not None and message["status"] < 400:  # the SDK keeps it: known from now on (before the
                    counted = True                              # client's next request, which may come at once)
                    self._opening[name] -= 1
                    sessions[sid.decode("latin-1")] = _Session(scope, sid)
            await send(message)

        try:
            if idle and name not in self._told:
                self._told.add(name)
                print(f"memlens mcp: the bearer token {name!r} opened more than {_sessions(self.per_token)}: its least "
                      f"recently used ones are closed ([mcp] max_sessions_per_token)", file=sys.stderr, flush=True)
            kept = [(sid, s) for sid, s in idle if not await self._end(s)]
            if kept:  # not expected: the SDK ends a session it knows on its DELETE
                for sid, s in reversed(kept):
                    sessions[sid] = s
                    sessions.move_to_end(sid, last=False)
                await _refuse(send, f"the bearer token {name!r} has {_sessions(len(sessions))} open ([mcp] "
                                    f"max_sessions_per_token = {self.per_token}) and the least recently used one could "
                                    f"not be closed; end one (DELETE)")
                return
            await self.app(scope, replay, watch)
        finally:
            if not counted:
                self._opening[name] -= 1

    def _full(self, name: str, running: int, opening: int) -> str:
        held = [f"{_sessions(n)} {what}" for n, what in ((running, "running a request"), (opening, "being opened")) if n]
        return (f"the bearer token {name!r} has {' and '.join(held)} ([mcp] max_sessions_per_token = "
                f"{self.per_token}); end one (DELETE) or retry when a request is answered")

    async def _end(self, session: _Session) -> bool:
        """End a session as its client would, with a DELETE (the SDK terminates it: its event stream ends, its id
        answers 404 from then on); False when it was not ended."""
        status = 0

        async def nothing() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def answered(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await self.app(session.ending, nothing, answered)
        return status in (200, 404)  # ended now, or already (idle)


async def _refuse(send: Any, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": TOO_MANY, "message": message}}).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
