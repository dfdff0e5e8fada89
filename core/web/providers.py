"""Search providers: Brave, SerpAPI and Tavily, each a small adapter from a query to result URLs.

The API key and base URL come from ``[web.providers.NAME]`` (or the variables
``MEMLENS_WEB__PROVIDERS__NAME__API_KEY`` / ``__BASE_URL``). The provider is the
user's own configured service, so its base URL is not subject to the private-
address guard; the result URLs are, like any URL a page supplies. Answers are
read under a size cap and time limit, and a failure is one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx

from memlens.errors import MemlensError
from memlens.secrets import redact, url_secrets, usable

MAX_ANSWER_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Hit:
    url: str
    title: str
    snippet: str


class ProviderError(Exception):
    """The provider did not answer with results; the message is one line."""


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: dict[str, Any]
    headers: dict[str, str]
    body: dict[str, Any] | None


def _brave(query: str, key: str, n: int) -> Call:
    return Call("GET", "/res/v1/web/search", {"q": query, "count": n},
                {"X-Subscription-Token": key, "Accept": "application/json"}, None)


def _brave_hits(data: dict[str, Any]) -> list[Hit]:
    rows = ((data.get("web") or {}).get("results")) or []
    return [Hit(str(r.get("url", "")), str(r.get("title", "")), str(r.get("description", "")))
            for r in rows if isinstance(r, dict)]


def _serpapi(query: str, key: str, n: int) -> Call:
    return Call("GET", "/search.json", {"engine": "google", "q": query, "num": n, "api_key": key},
                {"Accept": "application/json"}, None)


def _serpapi_hits(data: dict[str, Any]) -> list[Hit]:
    rows = data.get("organic_results") or []
    return [Hit(str(r.get("link", "")), str(r.get("title", "")), str(r.get("snippet", ""))) for r in rows if isinstance(r, dict)]


def _tavily(query: str, key: str, n: int) -> Call:
    return Call("POST", "/search", {}, {"Authorization": f"Bearer {key}", "Accept": "application/json"},
                {"query": query, "max_results": n, "search_depth": "basic"})


def _tavily_hits(data: dict[str, Any]) -> list[Hit]:
    rows = data.get("results") or []
    return [Hit(str(r.get("url", "")), str(r.get("title", "")), str(r.get("content", ""))) for r in rows if isinstance(r, dict)]


PROVIDERS: dict[str, tuple[str, Callable[[str, str, int], Call], Callable[[dict[str, Any]], list[Hit]]]] = {
    "brave": ("https://api.search.brave.com", _brave, _brave_hits),
    "serpapi": ("https://serpapi.com", _serpapi, _serpapi_hits),
    "tavily": ("https://api.tavily.com", _tavily, _tavily_hits),
}


def provider_settings(cfg: Any) -> tuple[str, str, str]:
    """(name, base URL, key) of the configured provider; MemlensError naming the setting when one is missing."""
    name = cfg.provider
    if not name:
        raise MemlensError(
            "--search needs a search provider: set [web] provider = \"brave\", \"serpapi\" or \"tavily\""
            " and its key in [web.providers.NAME] api_key (or MEMLENS_WEB__PROVIDER and MEMLENS_WEB__PROVIDERS__NAME__API_KEY)"
        )
    conf = getattr(cfg.providers, name)
    if not conf.api_key:
        raise MemlensError(
            f"search provider {name} has no API key: set [web.providers.{name}] api_key"
            f" (or MEMLENS_WEB__PROVIDERS__{name.upper()}__API_KEY)"
        )
    return name, (conf.base_url or PROVIDERS[name][0]).rstrip("/"), conf.api_key


async def search(cfg: Any, query: str, n: int) -> list[Hit]:
    """Up to ``n`` result URLs (http/https, first occurrence of each) for ``query``; ProviderError on failure."""
    name, base, key = provider_settings(cfg)
    _, make, parse = PROVIDERS[name]
    call = make(query, key, n)
    timeout = httpx.Timeout(connect=cfg.connect_timeout, read=cfg.read_timeout, write=cfg.read_timeout, pool=cfg.connect_timeout)
    try:
        async with httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=timeout,
                                     headers={"User-Agent": cfg.user_agent}) as client:
            request = client.build_request(call.method, base + call.path, params=call.params or None,
                                           headers=call.headers, json=call.body)
            response = await client.send(request, stream=True)
            try:
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise ProviderError(f"{name}: the answer is larger than {MAX_ANSWER_BYTES} bytes")
            finally:
                await response.aclose()
    except httpx.HTTPError as exc:
        from memlens.web.fetch import describe_http_error

        # a transport error may quote the request (serpapi's key is in its query): the key never leaves
        raise ProviderError(f"{name}: {redact(describe_http_error(exc, cfg), usable([key, *url_secrets(base)]))}") from None
    if response.status_code != 200:
        hint = " (check the API key)" if response.status_code in (401, 403) else ""
        raise ProviderError(f"{name}: HTTP {response.status_code}{hint}")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ProviderError(f"{name}: the answer is not JSON") from None
    if not isinstance(data, dict):
        raise ProviderError(f"{name}: the answer is not a JSON object")
    hits: list[Hit] = []
    seen: set[str] = set()
    for hit in parse(data):
        url = hit.url.strip()
        if url.lower().startswith(("http://", "https://")) and url not in seen:
            seen.add(url)
            hits.append(Hit(url, hit.title, hit.snippet))
        if len(hits) >= n:
            break
    return hits
