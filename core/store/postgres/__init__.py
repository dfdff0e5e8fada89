"""The PostgreSQL + pgvector backend: the same engine on a database a team shares.

``open_store("postgresql://user:password@host:5432/db")`` returns a ``PgStore``
(``memlens.store.base.Store``). Besides libpq's own settings, the URI may carry
memlens's, which are taken out before connecting:

- ``pool=1``: hold a connection pool (long-lived processes: the app, the MCP server);
- ``hnsw_min_rows=N``: use the HNSW indexes (when built) for scopes of N vectors or more, and give each
  wing of N vectors its own index (default 1000; ``memlens.store.postgres.vectors``);
- ``ef_search=N``: pgvector's ``hnsw.ef_search`` through the index of all vectors and a large wing's own (default 200);
- ``wing_ef_search=N``: the most a small wing's own index is walked with (default 1000; ``vectors.wing_ef``).

Needs ``pip install 'memlens[postgres]'`` (psycopg 3, psycopg-pool, pgvector)
and a server with the pgvector extension.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from memlens.errors import StoreError
from memlens.store.postgres import vectors
from memlens.store.postgres.connect import is_uri

OPTIONS = {"pool": (0, 1), "hnsw_min_rows": (0, 10**9), "ef_search": (1, 1000), "wing_ef_search": (1, 1000)}


def split_options(uri: str) -> tuple[str, dict[str, int]]:
    """The URI without memlens's own query settings, and those settings."""
    try:
        parts = urlsplit(uri)
    except ValueError as exc:  # "Invalid IPv6 URL" for an unclosed '[': one line naming the URI without its password
        from memlens.store.postgres.connect import label

        raise StoreError(f"store {label(uri)}: not a valid PostgreSQL URI ({exc})") from None
    kept, options = [], {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in OPTIONS:
            lo, hi = OPTIONS[key]
            try:
                n = int(value)
            except ValueError:
                n = None
            if n is None or not lo <= n <= hi:
                raise StoreError(f"store URI: {key} must be a whole number from {lo} to {hi}, not {value!r}")
            options[key] = n
        else:
            kept.append((key, value))
    # spaces as %20, not '+' (libpq reads '+' as itself: options=-c%20x=y must stay two words); a URI without a host
    # (postgresql:///db?host=/socket/dir, libpq's usual form for a socket) keeps its '//', which urlunsplit drops
    # for a scheme it does not know
    out = urlunsplit(parts._replace(query=urlencode(kept, safe="/", quote_via=quote)))
    if not parts.netloc and uri[len(parts.scheme):].startswith("://"):
        out = f"{parts.scheme}://{out[len(parts.scheme) + 1:]}"
    return out, options


def with_options(uri: str, **options: int) -> str:
    """``uri`` with memlens's settings added to its query (``with_options(uri, ef_search=64)``)."""
    extra = urlencode({k: int(v) for k, v in options.items()})
    return uri + ("&" if urlsplit(uri).query else "?") + extra if extra else uri


def open_store(uri: str, *, model: Callable[[], Any] | None = None, pooled: bool | None = None, create: bool = True) -> Any:
    """Open (and on first use create) the memlens store in the database ``uri`` names.

    ``model``: returns the embedding model (``.model_id``, ``.dim``) that a new store records.
    ``pooled``: hold a connection pool; default from the URI's ``pool=`` (else one connection per thread).
    ``create=False``: a database without a memlens store is an error instead of getting one.
    """
    from memlens.store.postgres.store import PgStore

    clean, options = split_options(uri)
    return PgStore(
        clean, model=model, pooled=bool(options.get("pool", 0)) if pooled is None else pooled,
        hnsw_min_rows=options.get("hnsw_min_rows", vectors.MIN_ROWS), ef_search=options.get("ef_search", vectors.EF_SEARCH),
        wing_ef_search=options.get("wing_ef_search", vectors.WING_EF_SEARCH),
        create=create,
    )


__all__ = ["is_uri", "open_store", "split_options", "with_options"]
