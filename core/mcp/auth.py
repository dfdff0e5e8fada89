"""Who is calling the HTTP MCP server, and how much it may send: an ASGI layer in front of the SDK's app.

A request body over ``[mcp] max_body_bytes`` gets 413 with a JSON-RPC error
body before the SDK sees it (the SDK's own bound answers in plain text), and a
POST body that is JSON but no JSON-RPC message (a list, a number, an object
with neither a method nor a result) gets 400 with a one-line error, as does a
body with a ``\\u`` escape that is half of a surrogate pair (a parse error). The Host
header is compared in lower case and without a trailing dot.

With tokens configured (``memlens.mcp.tokens``), every HTTP request must carry
``Authorization: Bearer TOKEN``; a missing or unknown token gets 401 with a
JSON-RPC error body and reaches nothing else. An accepted request carries the
token's entry as the SDK's ``AuthenticatedUser`` (``client_id`` = the token's
name, scopes ``read`` and, unless the token is read-only, ``write``): the SDK
then binds each session to the token that opened it (another token presenting
its id gets 404), and the tools read the name and the scopes from the request
(``token_of``). The token itself is never logged, printed or kept in the
request's state.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memlens.mcp.tokens import Token, TokenSet

UNAUTHORIZED = -32001  # JSON-RPC server error: the request carries no valid credentials
INVALID_REQUEST = -32600  # JSON-RPC invalid request: the body is over the bound, or is no JSON-RPC message
SERVER_STOPPING = -32000  # JSON-RPC server error: a request that came after the server began to stop, not run
PARSE_ERROR = -32700  # JSON-RPC parse error: the body is JSON's syntax but not text (half a surrogate pair)
_MESSAGE = ('a JSON-RPC 2.0 message is one JSON object with "jsonrpc": "2.0" and a "method" (a request or a '
            'notification), or an "id" with a "result" or an "error" (a response)')


def normal_host(value: bytes) -> bytes:
    """A Host header as the allowed names are written: lower case, without the trailing dot of a fully qualified
    name (``Memory.LAN.:8080`` is ``memory.lan:8080``); DNS names are the same in any case, and a client or proxy
    may send either."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):  # an IPv6 address
        return text.encode("latin-1")
    name, colon, port = text.rpartition(":")
    if not colon or not port.isdigit():
        name, colon, port = text, "", ""
    return (name.rstrip(".") + colon + port).encode("latin-1")


# a name, or an IP literal in brackets (an IPv6 zone after %25 may hold - _ ~), then a port, possibly empty (RFC 3986)
_HOST_FORM = re.compile(rb"(?:\[[0-9a-z:.%_~-]+\]|[^\s:/@\[\]]+)(?::[0-9]{0,5})?")
# a scheme and a host as above; a trailing / (no path after it) is sent by some clients
_ORIGIN_FORM = re.compile(rb"[a-z][a-z0-9+.-]*://(?:\[[0-9a-z:.%_~-]+\]|[^\s:/@\[\]]+)(?::[0-9]{0,5})?/?", re.IGNORECASE)


def malformed(headers: list[tuple[bytes, bytes]]) -> tuple[int, str] | None:
    """(status, why) for a ``Host`` that is not a name or address with an optional port, or an ``Origin`` that is
    not a scheme, a host and an optional port (a user name, a path, a port that is not a number): the SDK's check
    of the allowed names matches ``name:*`` by its start, so ``localhost:x`` or ``http://localhost:1@other`` would
    pass it. None when both are well formed (or there is no Origin)."""
    for key, value in headers:
        if key == b"host" and not _HOST_FORM.fullmatch(value):
            return 421, "the Host header is not a host name or address with an optional port number"
        if key == b"origin" and not _ORIGIN_FORM.fullmatch(value.strip()):
            return 403, "the Origin header is not a scheme, a host and an optional port number"
    return None


def not_a_message(body: bytes) -> str | None:
    """Why a POST body that parses as JSON is no JSON-RPC message, in one line (the SDK answers with every
    validation error of its union of message types, over several lines); None when it is one, or is not JSON at
    all (the SDK's own parse error is one line)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, list):
        return f"Invalid Request: a batch (a JSON list) is not part of MCP; {_MESSAGE}"
    if not isinstance(value, dict):
        return f"Invalid Request: the body is a JSON {type(value).__name__}; {_MESSAGE}"
    response = "id" in value and ("result" in value or "error" in value)
    if value.get("jsonrpc") != "2.0" or not (isinstance(value.get("method"), str) or response):
        return f"Invalid Request: {_MESSAGE}"
    rid = value.get("id")
    if "method" in value and "id" in value and (not isinstance(rid, (int, str)) or isinstance(rid, bool)):
        return "Invalid Request: a request's id is a string or an integer"  # (the SDK answered nothing, with 202)
    if "params" in value and not isinstance(value["params"], dict):
        return f"Invalid Request: params is a JSON object, not a JSON {type(value['params']).__name__}"
    return None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def half_surrogate(body: bytes) -> bool:
    """Whether a JSON body holds a ``\\u`` escape that is half of a surrogate pair (``"\\ud800"`` alone): JSON's
    syntax, but no character. The SDK's parser refuses it as "unexpected end of hex escape", which points at the
    wrong thing."""
    if not _SURROGATE_ESCAPE.search(body):
        return False
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


async def _refuse(send: Any, status: int, code: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """An HTTP error with a JSON-RPC error body, as the SDK answers its own refusals (503 at the session bound)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


class Front:
    """ASGI middleware in front of the SDK's app: the bearer token (when ``tokens`` is given), then the body's size,
    then whether a POST body is a JSON-RPC message at all."""

    def __init__(self, app: Any, tokens: TokenSet | None, max_body: int) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body = max_body
        self.running = 0  # POST requests being read, run or answered: what a graceful stop waits for
        self.stopping = False  # set when the server begins to stop: a request that comes after is not run

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        if scope.get("method") != "POST":  # a GET event stream is open until the server ends it: not waited for
            await self._serve(scope, receive, send)
            return
        if self.stopping:  # on a connection kept alive: the listener no longer accepts new ones
            await _refuse(send, 503, SERVER_STOPPING, "the server is stopping: this request was not run",
                          ((b"connection", b"close"),))
            return
        self.running += 1
        try:
            await self._serve(scope, receive, send)
        finally:
            self.running -= 1

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope = {**scope, "headers": [(k, normal_host(v) if k == b"host" else v) for k, v in scope.get("headers", [])]}
        bad = malformed(scope["headers"])
        if bad is not None:
            await _refuse(send, bad[0], INVALID_REQUEST, bad[1])
            return
        if self.tokens is not None:
            header = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
            scheme, _, presented = header.decode("latin-1").partition(" ")
            presented = presented.strip() if scheme.lower() == "bearer" else ""
            token = self.tokens.verify(presented) if presented else None
            if token is None:
                await _refuse(send, 401, UNAUTHORIZED, "the bearer token is not valid" if presented else
                              "this server needs a bearer token: send the header 'Authorization: Bearer TOKEN'",
                              ((b"www-authenticate", b'Bearer realm="memlens"'),))
                return
            scope = {**scope, **_authenticated(token)}
        declared = next((v for k, v in scope.get("headers", []) if k == b"content-length"), b"0")
        body = await self._body(receive) if not declared.isdigit() or int(declared) <= self.max_body else None
        if body is None:
            await _refuse(send, 413, INVALID_REQUEST, f"the request body is over {self.max_body} bytes ([mcp] max_body_bytes)")
            return
        problem = not_a_message(body) if scope.get("method") == "POST" and body else None
        if problem:
            await _refuse(send, 400, INVALID_REQUEST, problem)
            return
        if scope.get("method") == "POST" and half_surrogate(body):  # as the stdio server says it
            await _refuse(send, 400, PARSE_ERROR, "Parse error: a \\u escape in the body is half of a surrogate pair, "
                                                  "not a character")
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return dict(await receive())

        await self.app(scope, replay, send)

    async def _body(self, receive: Any) -> bytes | None:
        """The whole request body, or None as soon as it is over ``max_body``."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)


def _authenticated(token: Token) -> dict[str, Any]:
    """The request's identity as the SDK reads it: it binds each session to the token (``client_id``) that opened it."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from starlette.authentication import AuthCredentials

    scopes = ["read"] if token.read_only else ["read", "write"]
    access = AccessToken(token=f"sha256:{token.digest.hex()}", client_id=token.name, scopes=scopes)
    return {"user": AuthenticatedUser(access), "auth": AuthCredentials(scopes)}


def token_of(ctx: Any) -> tuple[str, bool] | None:
    """(the token's name, whether it may write) for a request (a tool's ``Context`` or the SDK's request context)
    that came with a bearer token; None without one."""
    try:
        request = ctx.request_context.request if hasattr(ctx, "request_context") else ctx.request
    except (AttributeError, ValueError):  # no context, or not inside a request
        return None
    user = getattr(request, "scope", {}).get("user") if request is not None else None
    access = getattr(user, "access_token", None)
    if access is None:
        return None
    return access.client_id, "write" in access.scopes
