"""Fetching pages: every hop checked by the guard, bodies read under a byte cap, robots.txt obeyed.

One ``Fetcher`` serves one web-context call. Redirects are followed by hand (at
most ``max_redirects``), each new URL checked like the first; the connection
goes to the address the guard checked, with the real host name in the Host
header and for TLS. Proxies from the environment are ignored (they would
bypass the guard) and no connection is reused (a kept-alive TLS connection
would serve a second host under the first one's name).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urljoin
from urllib.robotparser import RobotFileParser

import httpx2 as httpx

from memlens.web.guard import AllowList, Refused, Resolver, Target, check_url, system_resolver

ACCEPTED_TYPES = ("text/html", "text/plain")
REDIRECTS = (301, 302, 303, 307, 308)
ROBOTS_MAX_BYTES = 512 * 1024
_T = TypeVar("_T")


@dataclass
class Page:
    """What one URL gave: the body (up to the cap) or why there is none."""

    url: str
    final_url: str | None = None
    status: int | None = None
    ok: bool = False
    error: str | None = None
    content_type: str | None = None
    charset: str | None = None
    body: bytes = b""
    truncated: bool = False
    timed_out: bool = False  # the body was cut at the page's time limit (what came until then is kept)


@dataclass
class Budget:
    """When one page's fetch must stop (a ``time.monotonic()`` value), and the error if it has no body by then."""

    stop_at: float
    why: str


class FetchFailed(Exception):
    """A fetch ended without a usable body; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def describe_http_error(exc: BaseException, cfg: Any) -> str:
    """One line for a transport error."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"no connection within {cfg.connect_timeout:g} s"
    if isinstance(exc, httpx.ReadTimeout):
        return f"no data for {cfg.read_timeout:g} s"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({str(exc) or type(exc).__name__})"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


class Fetcher:
    """Bounded, guarded HTTP GETs for one call (use ``async with``)."""

    def __init__(self, cfg: Any, *, resolver: Resolver | None = None) -> None:
        self.cfg = cfg
        self.allow = AllowList(cfg.allow_hosts)
        self.resolver = resolver or system_resolver
        self._robots: dict[str, asyncio.Task[tuple[RobotFileParser | None, str]]] = {}
        self.client = httpx.AsyncClient(
            trust_env=False,
            follow_redirects=False,
            timeout=httpx.Timeout(connect=cfg.connect_timeout, read=cfg.read_timeout, write=cfg.read_timeout,
                                  pool=cfg.connect_timeout),
            limits=httpx.Limits(max_connections=max(cfg.max_concurrency * 2, 2), max_keepalive_connections=0),
            headers={"User-Agent": cfg.user_agent, "Accept-Encoding": "identity"},
        )

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._robots.values():
            task.cancel()
        await self.client.aclose()

    async def check(self, url: str) -> Target:
        return await check_url(url, self.allow, self.resolver, timeout=self.cfg.connect_timeout)

    @staticmethod
    async def _until(step: Awaitable[_T], budget: Budget | None) -> _T:
        """``step``, or FetchFailed with the budget's reason when it has not finished by the budget's end."""
        if budget is None:
            return await step
        try:
            return await asyncio.wait_for(step, max(budget.stop_at - time.monotonic(), 0.0))
        except asyncio.TimeoutError:
            raise FetchFailed(budget.why) from None

    async def _hops(self, url: str, *, accept: str, cap: int, robots: bool, types: tuple[str, ...] = (),
                    budget: Budget | None = None) -> Page:
        """GET ``url`` following up to ``max_redirects`` redirects, each checked before it is requested."""
        page = Page(url=url)
        current = url
        for hop in range(self.cfg.max_redirects + 1):
            target = await self._until(self.check(current), budget)
            if robots and not await self._until(self.robots_allow(target), budget):
                raise FetchFailed(f"robots.txt of {target.origin} disallows {current}")
            request = self.client.build_request(
                "GET", target.connect_url(), headers={"Host": target.host_header(), "Accept": accept},
                extensions={"sni_hostname": target.host},
            )
            response = await self._until(self.client.send(request, stream=True), budget)
            try:
                self.client.cookies.clear()  # nothing carries from one host (or page) to the next
                page.status = response.status_code
                page.final_url = target.url
                if response.status_code in REDIRECTS:
                    location = response.headers.get("location")
                    if not location:
                        raise FetchFailed(f"HTTP {response.status_code} without a Location", response.status_code)
                    if hop == self.cfg.max_redirects:
                        raise FetchFailed(f"more than {self.cfg.max_redirects} redirects", response.status_code)
                    current = urljoin(current, location.strip())
                    continue
                ctype = response.headers.get("content-type", "")
                page.content_type = ctype.split(";", 1)[0].strip().lower() or None
                page.charset = response.charset_encoding
                if response.status_code >= 400 or response.status_code < 200:
                    raise FetchFailed(f"HTTP {response.status_code}", response.status_code)
                if types and page.content_type not in types:  # refused before the body is read
                    raise FetchFailed(f"content type {page.content_type or 'missing'} is not {' or '.join(types)}",
                                      response.status_code)
                page.body, page.truncated, page.timed_out = await self._read(response, cap, budget)
                return page
            finally:
                await response.aclose()
        raise FetchFailed(f"more than {self.cfg.max_redirects} redirects", page.status)  # pragma: no cover (loop returns)

    @staticmethod
    async def _read(response: httpx.Response, cap: int, budget: Budget | None) -> tuple[bytes, bool, bool]:
        """At most ``cap`` bytes of the body, whether it was cut (more was sent, or its time ran out), and whether
        by time: a page that trickles keeps what it sent until the budget's end."""
        parts: list[bytes] = []
        size = 0
        chunks = response.aiter_bytes().__aiter__()  # as the bytes arrive (a fixed chunk size would hold a trickle back)
        while True:
            try:
                left = None if budget is None else max(budget.stop_at - time.monotonic(), 0.0)
                chunk = await asyncio.wait_for(chunks.__anext__(), left)
            except StopAsyncIteration:
                return b"".join(parts), False, False
            except asyncio.TimeoutError:
                return b"".join(parts), True, True
            room = cap - size
            if len(chunk) > room:
                parts.append(chunk[:room])
                return b"".join(parts), True, False
            parts.append(chunk)
            size += len(chunk)

    async def fetch_page(self, url: str, budget: Budget | None = None) -> Page:
        """The page at ``url``: ok with its body, or not ok with a one-line error. Never raises for the page's faults.

        ``budget``: the fetch stops at its end; a body still coming then is kept as far as it came (``timed_out``).
        """
        page = Page(url=url)
        try:
            got = await self._hops(url, accept="text/html, text/plain;q=0.9", cap=self.cfg.max_bytes,
                                   robots=self.cfg.respect_robots, types=ACCEPTED_TYPES, budget=budget)
        except Refused as exc:
            page.error = f"refused: {exc}"
            return page
        except FetchFailed as exc:
            page.error, page.status = str(exc), exc.status
            return page
        except httpx.HTTPError as exc:
            page.error = describe_http_error(exc, self.cfg)
            return page
        if b"\x00" in got.body[:8192]:  # whatever its declared type, no page of text holds a NUL byte
            page.error, page.status = "binary content (a NUL byte in the first 8 KB), not a text page", got.status
            return page
        got.ok = True
        return got

    async def robots_allow(self, target: Target) -> bool:
        """Whether the origin's robots.txt lets this user agent fetch ``target`` (read once per origin per call).

        FetchFailed when the rules cannot be read: a server error means nothing may be fetched, and a
        connection that fails is that page's error too.
        """
        task = self._robots.get(target.origin)
        if task is None:
            task = asyncio.ensure_future(self._load_robots(target.origin))
            self._robots[target.origin] = task
        parser, why = await asyncio.shield(task)
        if parser is None:
            raise FetchFailed(why)
        return parser.can_fetch(self.cfg.user_agent, target.url)

    async def _load_robots(self, origin: str) -> tuple[RobotFileParser | None, str]:
        """The origin's rules: a missing file (4xx) allows everything; a server error allows nothing."""
        parser = RobotFileParser()
        try:
            got = await self._hops(origin + "/robots.txt", accept="text/plain", cap=ROBOTS_MAX_BYTES, robots=False)
        except FetchFailed as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                parser.parse([])  # no rules: everything allowed (what the stdlib's own read() does on a 4xx)
                return parser, ""
            return None, f"robots.txt of {origin} could not be read ({exc}), so nothing there is fetched"
        except Refused as exc:
            return None, f"refused: {exc}"
        except httpx.HTTPError as exc:
            return None, describe_http_error(exc, self.cfg)
        parser.parse(got.body.decode("utf-8", "replace").splitlines())
        return parser, ""
