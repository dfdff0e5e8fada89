"""Who may call the MCP server over HTTP: every request's ``Host`` and ``Origin`` are checked, whatever address it
listens on.

A web page in a browser can make requests to any address, also to a server on
this machine, and with DNS rebinding a name the page controls can point at
127.0.0.1 or at this machine's own address. The page cannot choose the
``Host`` header (the browser sends the name in the URL) nor the ``Origin``
header (the page's own origin). So a request is served only when:

- ``Host`` is one of the names this server is reached by: the loopback names
  (``127.0.0.1``, ``localhost``, ``[::1]``), the address given to ``--host``
  as written and as bound (``127.1`` is ``127.0.0.1``; the wildcards
  ``0.0.0.0`` and ``::`` are no name), and the names in ``[mcp] allowed_hosts``;
  any port (a name given as ``name:port`` allows that port only);
- ``Origin``, when there is one (a browser's request), is ``http://`` one of
  those names, or one of ``[mcp] allowed_origins``.

Anything else gets 421 (Host) or 403 (Origin), through the SDK's own check
(``TransportSecuritySettings``), before a session opens; a Host or Origin that
is not well formed (a port that is not a number, a user name, a path) is
refused before it (``memlens.mcp.auth.malformed``). An address other
machines can reach (any but loopback) is served only with bearer tokens
(``memlens.mcp.tokens``), and warns that plain HTTP carries them in clear.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from memlens.config import HOST_ENTRY

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def _unspecified(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]")).is_unspecified
    except ValueError:
        return False


def is_loopback(address: str) -> bool:
    """Whether a bound address (``sock.getsockname()[0]``) is reachable from this machine only (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(address.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return False


def host_patterns(bind: str, bound: str, allowed_hosts: Iterable[str] = ()) -> list[str]:
    """The ``Host`` values served, in the SDK's notation (``name:*`` for any port)."""
    names = [*LOOPBACK_NAMES]
    for address in (bind, bound):
        if address and not _unspecified(address):
            names.append(_bracketed(address.strip()))
    patterns = [p for name in dict.fromkeys(names) for p in (name, f"{name}:*")]
    for entry in allowed_hosts:  # checked when the settings load (memlens.config.HOST_ENTRY)
        m = HOST_ENTRY.match(entry)
        patterns += [entry] if m and m.group("port") else [entry, f"{entry}:*"]
    return list(dict.fromkeys(patterns))


def origin_patterns(hosts: list[str], allowed_origins: Iterable[str] = ()) -> list[str]:
    """The ``Origin`` values served: ``http://`` and ``https://`` each allowed host value (a page served through
    a TLS proxy for that name sends the second), and the configured origins."""
    return list(dict.fromkeys([*(f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")), *allowed_origins]))


def transport_security(bind: str, bound: str, mcp_settings: Any) -> Any:
    """The SDK's DNS-rebinding protection, on for every bind address, with the names above."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = host_patterns(bind, bound, mcp_settings.allowed_hosts)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origin_patterns(hosts, mcp_settings.allowed_origins))


def refuse_unauthenticated(address: str) -> None:
    """Without bearer tokens only loopback is served: any other address (an IP; a name is decided once bound) is an error."""
    try:
        ipaddress.ip_address(address.strip("[]").split("%")[0])
    except ValueError:
        return
    if not is_loopback(address):
        from memlens.errors import MemlensError

        where = "every interface" if _unspecified(address) else _bracketed(address)
        raise MemlensError(f"refusing to listen on {where} without authentication: other machines could reach it; "
                           f"add a bearer token (`memlens mcp token add NAME`) or listen on 127.0.0.1")


def exposure_warning(bind: str, bound: str) -> str | None:
    """The start-up note for an address other machines can reach (None on loopback: 127.0.0.0/8, ::1): tokens
    travel in clear over plain HTTP."""
    if is_loopback(bound):
        return None
    names = "a loopback name" if _unspecified(bound) else f"{_bracketed(bind)}, a loopback name"
    where = "every interface" if _unspecified(bound) else bind
    return (f"memlens mcp: warning: listening on {where}, reachable from other machines: bearer tokens travel in clear "
            f"over plain HTTP, put a TLS reverse proxy in front; only requests whose Host is {names} or one of "
            f"[mcp] allowed_hosts are served")
