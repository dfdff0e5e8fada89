"""A streaming client for OpenAI-compatible chat completions (ollama, llama.cpp, vLLM, LM Studio, OpenAI).

The wire is small enough not to need a provider SDK: one POST to
``BASE_URL/chat/completions`` with ``"stream": true``, answered by server-sent
events (``data: {json}`` lines, ``data: [DONE]`` at the end). httpx2 (the
maintained httpx, imported as ``httpx2``) is the transport: it is already
installed (the MCP SDK depends on it), has separate
connect and read timeouts, streams line by line, and has the same API for
threads (the CLI) and an event loop (the app), so both share this module.
A server that ignores ``"stream": true`` and answers with one JSON
completion (``application/json``) is accepted too: its text arrives at once.

Time bounds: ``connect_timeout`` to connect, ``read_timeout`` of silence while
streaming, and ``timeout`` for the whole answer (checked between chunks; the
async stream also cuts a silent read at the deadline). Memory bounds: a line of
the stream is read up to ``MAX_LINE_BYTES`` (a server that never ends its line
cannot fill memory), a whole JSON reply up to ``MAX_JSON_BYTES``, an error body
up to ``ERROR_BODY_BYTES``, an answer up to ``MAX_ANSWER_CHARS``.

Every failure is an :class:`LlmError` with a one-line message. Neither it nor
the answer ever holds the API key or the password of ``base_url``'s userinfo,
even from a server that echoes them (``memlens.secrets``); messages name the
endpoint without its password. The text received before a failure is kept by
the caller: tokens are yielded as they arrive.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx

from memlens.errors import MemlensError
from memlens.secrets import StreamRedactor, redact, url_secrets, usable, without_password

NOT_CONFIGURED = (
    "no chat model configured: set [llm] base_url and model in the configuration file "
    "(or MEMLENS_LLM__BASE_URL and MEMLENS_LLM__MODEL)"
)
ERROR_BODY_CHARS = 300  # of an HTTP error's body, in the one-line message
MAX_JSON_BYTES = 8 << 20  # a whole (non-streamed) reply
ERROR_BODY_BYTES = 4096  # read of an HTTP error's body
MAX_ANSWER_CHARS = 200_000  # an answer is cut here (a runaway model or server), keeping what came
MAX_LINE_BYTES = 1 << 20  # one line of the event stream (an event carries one small delta)
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


class LlmError(MemlensError):
    """The model could not answer, or stopped midway: not the user's input (exit status 1)."""

    exit_code = 1


def one_line(text: object, limit: int = ERROR_BODY_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 120.0
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    max_tokens: int | None = None

    def __repr__(self) -> str:  # the key and the URL's password stay out of logs and tracebacks
        return f"Endpoint(base_url={self.shown!r}, model={self.model!r})"

    @property
    def shown(self) -> str:
        """``base_url`` as messages name it: without the password of its userinfo."""
        return without_password(self.base_url)

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never appear in a message or an answer: the key, the URL's password in its forms."""
        return usable([self.api_key, *url_secrets(self.base_url)])

    @classmethod
    def from_settings(cls, llm: Any) -> Endpoint:
        """From the ``[llm]`` settings; a MemlensError (exit 2) when base_url or model is missing."""
        if not (llm.base_url and llm.model):
            raise MemlensError(NOT_CONFIGURED)
        return cls(llm.base_url, llm.model, llm.api_key, llm.timeout, llm.connect_timeout, llm.read_timeout,
                   llm.max_tokens)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        return body

    def headers(self) -> dict[str, str]:
        # identity: a compressed body would be inflated before any of the bounds below could apply
        h = {"Accept": "text/event-stream", "Content-Type": "application/json", "Accept-Encoding": "identity"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def httpx_timeout(self) -> httpx.Timeout:
        read = min(self.read_timeout, self.timeout)
        return httpx.Timeout(connect=min(self.connect_timeout, self.timeout), read=read, write=read, pool=read)

    def client_options(self) -> dict[str, Any]:
        # proxies from the environment only for remote hosts: a local server is reached directly
        host = (urlsplit(self.base_url).hostname or "").lower()
        return {"timeout": self.httpx_timeout(), "follow_redirects": False, "trust_env": host not in _LOOPBACK,
                "verify": _tls_context(host not in _LOOPBACK)}


@functools.lru_cache(maxsize=2)
def _tls_context(trust_env: bool) -> Any:
    """httpx's default certificate checks, built once per process: building them costs ~0.1 s a client."""
    return httpx.create_ssl_context(trust_env=trust_env)


class SseParser:
    """Server-sent events of a chat completion: text deltas out, the end of the answer noticed."""

    def __init__(self) -> None:
        self.done = False  # data: [DONE] arrived
        self.finished = False  # a choice carried a finish_reason
        self.chars = 0

    @property
    def complete(self) -> bool:
        return self.done or self.finished

    def feed(self, line: str) -> str:
        """The text a line adds ("" for comments, blank lines, role-only deltas)."""
        line = line.strip()
        if not line.startswith("data:"):
            return ""  # blank separators, ": keep-alive" comments, event:/id:/retry: fields
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return ""
        try:
            obj = json.loads(payload)
        except ValueError:
            raise LlmError(f"the model's stream is not JSON: {one_line(payload, 80)!r}") from None
        return self.delta(obj)

    def delta(self, obj: Any) -> str:
        if not isinstance(obj, dict):
            raise LlmError(f"the model's stream holds {type(obj).__name__}, not an object")
        if obj.get("error"):
            err = obj["error"]
            raise LlmError("the model reported an error: " + one_line(err.get("message", err) if isinstance(err, dict) else err))
        out = []
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            part = choice.get("delta") or choice.get("message") or {}
            content = part.get("content") if isinstance(part, dict) else None
            if isinstance(content, str):
                out.append(content)
            if choice.get("finish_reason"):
                self.finished = True
        text = "".join(out)
        self.chars += len(text)
        if self.chars > MAX_ANSWER_CHARS:
            raise LlmError(f"the answer passed {MAX_ANSWER_CHARS:,} characters; it was cut there")
        return text


def _refuse_a_page(endpoint: Endpoint, response: Any) -> None:
    """A web page where the API was expected (a base URL without its /v1, a proxy's login page): said as such."""
    content_type = str(response.headers.get("content-type", "")).split(";")[0].strip().lower()
    if content_type in ("text/html", "application/xhtml+xml"):
        raise LlmError(f"{endpoint.shown} answered with {content_type}, not an event stream: check llm.base_url "
                       "(an OpenAI-compatible API, usually ending in /v1)")


def _is_json(response: Any) -> bool:
    """A server that ignored ``"stream": true`` and sent the whole completion as one JSON object."""
    content_type = str(response.headers.get("content-type", ""))
    return content_type.split(";")[0].strip().lower() == "application/json"


def _whole(parser: SseParser, body: bytes) -> str:
    if len(body) > MAX_JSON_BYTES:
        raise LlmError(f"the model's reply is over {MAX_JSON_BYTES // (1 << 20)} MiB")
    try:
        obj = json.loads(body)
    except ValueError:
        raise LlmError(f"the model's reply is not JSON: {one_line(body.decode('utf-8', 'replace'), 80)!r}") from None
    text = parser.delta(obj)
    parser.done = True
    return text


class LineReader:
    """The lines of a byte stream (``\n``, ``\r\n`` or ``\r`` ends one), each at most ``cap`` bytes.

    httpx's own line iterator keeps a line until it ends, however long; a server sending one line
    without end would fill memory. Here a line that passes ``cap`` ends the stream with an LlmError."""

    _EOL = re.compile(rb"\r\n|\r|\n")
    _ANY_EOL = re.compile(rb"[\r\n]")

    def __init__(self, cap: int = MAX_LINE_BYTES) -> None:
        self.cap = cap
        self._held: list[bytes] = []  # the line so far, joined only once it ends (no copy per chunk)
        self._size = 0

    def feed(self, chunk: bytes) -> list[str]:
        if self._ANY_EOL.search(chunk) is None:
            self._held.append(chunk)
            self._size += len(chunk)
            parts: list[bytes] = []
        else:
            parts = self._EOL.split(b"".join(self._held) + chunk)
            rest = parts.pop()
            self._held, self._size = [rest], len(rest)
        if self._size > self.cap or any(len(p) > self.cap for p in parts):
            raise LlmError(f"the model's stream sent a line over {self.cap >> 10} KiB; the answer was cut there")
        return [p.decode("utf-8", "replace") for p in parts]

    def end(self) -> list[str]:
        rest, self._held, self._size = b"".join(self._held), [], 0
        return [rest.decode("utf-8", "replace")] if rest else []


def _lines(chunks: Iterable[bytes], endpoint: Endpoint, deadline: float) -> Iterator[str]:
    """The stream's lines; the whole answer's deadline is checked at every chunk, also inside a line."""
    reader = LineReader()
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise _overall(endpoint)
        yield from reader.feed(chunk)
    yield from reader.end()


async def _alines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    reader = LineReader()
    async for chunk in chunks:
        for line in reader.feed(chunk):
            yield line
    for line in reader.end():
        yield line


def _status_error(endpoint: Endpoint, status: int, body: bytes) -> LlmError:
    text = body[:ERROR_BODY_BYTES].decode("utf-8", "replace")
    try:  # OpenAI-style {"error": {"message": ...}}
        err = json.loads(text).get("error")
        text = err.get("message", text) if isinstance(err, dict) else (err or text)
    except (ValueError, AttributeError):
        pass
    hint = " (check llm.api_key)" if status in (401, 403) else " (check llm.model)" if status == 404 else ""
    where = endpoint.shown.rstrip("/") + "/chat/completions"
    return LlmError(f"{where}: HTTP {status}{hint}: {one_line(text) or 'no details'}")


def translate(endpoint: Endpoint, exc: Exception) -> LlmError:
    """One line for a failure, with every secret of the endpoint masked (a server may echo them)."""
    err = _describe(endpoint, exc)
    return LlmError(redact(str(err), endpoint.secrets))


def _describe(endpoint: Endpoint, exc: Exception) -> LlmError:
    if isinstance(exc, LlmError):
        return exc
    if isinstance(exc, httpx.ConnectTimeout):
        return LlmError(f"cannot connect to {endpoint.shown} within {endpoint.connect_timeout:g} s (llm.connect_timeout)")
    if isinstance(exc, httpx.ConnectError):
        return LlmError(f"cannot connect to {endpoint.shown}: {one_line(exc) or type(exc).__name__}")
    if isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout)):
        read = min(endpoint.read_timeout, endpoint.timeout)
        return LlmError(f"the model sent nothing for {read:g} s (llm.read_timeout); the answer is incomplete")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return LlmError(f"the connection to the model broke midway: {one_line(exc) or type(exc).__name__}")
    if isinstance(exc, httpx.HTTPError):
        return LlmError(f"{endpoint.shown}: {type(exc).__name__}: {one_line(exc)}")
    raise exc


def _overall(endpoint: Endpoint) -> LlmError:
    return LlmError(f"no complete answer within {endpoint.timeout:g} s (llm.timeout); the answer is incomplete")


def _unfinished() -> LlmError:
    return LlmError("the model's stream ended before the answer was finished (no [DONE])")


def _capped(chunks: Iterator[bytes], cap: int = MAX_JSON_BYTES) -> Iterator[bytes]:
    """The chunks until just over ``cap`` bytes have come (the rest is never read)."""
    total = 0
    for chunk in chunks:
        total += len(chunk)
        yield chunk
        if total > cap:
            return


def stream_chat(endpoint: Endpoint, messages: list[dict[str, str]]) -> Iterator[str]:
    """Yield the answer's text as it arrives (blocking; for threads and the CLI)."""
    redactor = StreamRedactor(endpoint.secrets)
    try:
        for text in _stream_chat(endpoint, messages):
            if text := redactor.feed(text):
                yield text
    except LlmError:  # what was held back still reaches the caller, before the error
        if rest := redactor.end():
            yield rest
        raise
    if rest := redactor.end():
        yield rest


async def astream_chat(endpoint: Endpoint, messages: list[dict[str, str]]) -> AsyncIterator[str]:
    """Yield the answer's text as it arrives (in an event loop; cancelling the task stops the stream at once)."""
    redactor = StreamRedactor(endpoint.secrets)
    try:
        async for text in _astream_chat(endpoint, messages):
            if text := redactor.feed(text):
                yield text
    except LlmError:
        if rest := redactor.end():
            yield rest
        raise
    if rest := redactor.end():
        yield rest


def _stream_chat(endpoint: Endpoint, messages: list[dict[str, str]]) -> Iterator[str]:
    deadline = time.monotonic() + endpoint.timeout
    parser = SseParser()
    try:
        with httpx.Client(**endpoint.client_options()) as client, client.stream(
            "POST", endpoint.url, json=endpoint.body(messages), headers=endpoint.headers()
        ) as response:
            if response.status_code != 200:
                raise _status_error(endpoint, response.status_code, b"".join(_capped(response.iter_bytes(), ERROR_BODY_BYTES)))
            _refuse_a_page(endpoint, response)
            if _is_json(response):
                body = b"".join(_capped(response.iter_bytes()))
                text = _whole(parser, body)
                if text:
                    yield text
                return
            for line in _lines(response.iter_bytes(), endpoint, deadline):
                text = parser.feed(line)
                if text:
                    yield text
                if parser.done:
                    return
    except (httpx.HTTPError, LlmError) as exc:
        raise translate(endpoint, exc) from None
    if not parser.complete:
        raise _unfinished()


async def _astream_chat(endpoint: Endpoint, messages: list[dict[str, str]]) -> AsyncIterator[str]:
    deadline = time.monotonic() + endpoint.timeout
    parser = SseParser()
    try:
        async with httpx.AsyncClient(**endpoint.client_options()) as client, client.stream(
            "POST", endpoint.url, json=endpoint.body(messages), headers=endpoint.headers()
        ) as response:
            if response.status_code != 200:
                head = b""
                async for chunk in response.aiter_bytes():  # an error body is read only so far
                    head += chunk
                    if len(head) > ERROR_BODY_BYTES:
                        break
                raise _status_error(endpoint, response.status_code, head)
            _refuse_a_page(endpoint, response)
            if _is_json(response):
                chunks = []
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    if sum(map(len, chunks)) > MAX_JSON_BYTES:
                        break
                text = _whole(parser, b"".join(chunks))
                if text:
                    yield text
                return
            lines = _alines(response.aiter_bytes())
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _overall(endpoint)
                try:
                    line = await asyncio.wait_for(lines.__anext__(), remaining)
                except StopAsyncIteration:
                    break
                except asyncio.TimeoutError:
                    raise _overall(endpoint) from None
                text = parser.feed(line)
                if text:
                    yield text
                if parser.done:
                    return
    except (httpx.HTTPError, LlmError) as exc:
        raise translate(endpoint, exc) from None
    if not parser.complete:
        raise _unfinished()
