"""Web context: pages fetched under guard, their text cleaned and wrapped as untrusted.

    from memlens.web import web_context, web_context_sync
    ctx = web_context_sync(settings.web, urls=["https://example.org/"])
    ctx.sources   # one status per URL: url, ok, status, error, chars, truncated, title, flagged
    ctx.context   # the text between per-call nonce delimiters, labelled untrusted
    ctx.to_json() # {"sources": [...], "context": "...", "untrusted": true}

``Memory.web_context`` / ``Memory.web_context_sync`` do the same with the
store's settings. Importing this package is cheap (the worker processes that
extract text import it too); the HTTP client loads on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["web_context", "web_context_sync", "WebContext"]


async def web_context(cfg: Any, **kwargs: Any) -> Any:
    from memlens.web.context import gather

    return await gather(cfg, **kwargs)


def web_context_sync(cfg: Any, **kwargs: Any) -> Any:
    from memlens.web.context import gather_sync

    return gather_sync(cfg, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "WebContext":
        from memlens.web.context import WebContext

        return WebContext
    raise AttributeError(name)
