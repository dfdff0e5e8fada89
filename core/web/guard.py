"""Where a fetch may go: http/https only, and never to a private address unless allowed.

Every URL (the one asked for and each redirect hop) is checked here before
anything is sent. The host is resolved once, each address is checked, and the
fetch then connects to one of the checked addresses (never resolving again), so
a name that answers a public address first and a private one later (DNS
rebinding) cannot slip through. Refused: loopback, private, link-local (which
holds the cloud metadata service at 169.254.169.254), carrier-grade NAT,
reserved, multicast and unspecified addresses, and IPv6 forms that embed such
an IPv4 address, unless the host or the address is listed in
``[web] allow_hosts`` (a host name, an address or a network such as
``10.0.0.0/8``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

SCHEMES = ("http", "https")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_6TO4 = ipaddress.ip_network("2002::/16")


class Refused(Exception):
    """The URL may not be fetched; the message says why, in one line."""


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (``ip``) and what to ask for (``url``, its ``host`` and ``port``)."""

    url: str
    scheme: str
    host: str
    port: int
    ip: str

    @property
    def origin(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}" + ("" if self.port == default else f":{self.port}")

    def connect_url(self) -> str:
        """The URL with the host replaced by the checked address (the Host header and TLS name keep the real host)."""
        parts = urlsplit(self.url)
        ip = f"[{self.ip}]" if ":" in self.ip else self.ip
        netloc = f"{ip}:{self.port}"
        rest = parts.path or "/"
        if parts.query:
            rest += "?" + parts.query
        return f"{self.scheme}://{netloc}{rest}"

    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


class AllowList:
    """``[web] allow_hosts``: host names (exact, case-insensitive), addresses and networks."""

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.names: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for raw in entries:
            item = raw.strip().lower().strip("[]")
            if not item:
                continue
            try:
                self.networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                self.names.add(item.rstrip("."))

    def allows_host(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.names

    def allows_ip(self, ip: IPAddress) -> bool:
        return any(ip.version == n.version and ip in n for n in self.networks)


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip in _6TO4:
            return ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
        if ip.teredo is not None:
            return ip.teredo[1]
    return None


def address_kind(ip: IPAddress) -> str | None:
    """What kind of non-public address ``ip`` is ("a loopback address", ...), or None for a public one."""
    inner = _embedded_v4(ip)
    if inner is not None:
        what = address_kind(inner)
        return f"{what} inside an IPv6 address" if what else None
    for test, what in (
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_unspecified", "an unspecified address"),
        ("is_reserved", "a reserved address"),
        ("is_private", "a private address"),
    ):
        if getattr(ip, test):
            return what
    return None if ip.is_global else "not a public address"


async def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver (numbers only, in its order)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    seen: list[str] = []
    for *_, sockaddr in infos:
        addr = str(sockaddr[0]).split("%", 1)[0]
        if addr not in seen:
            seen.append(addr)
    return seen


def split_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, or Refused."""
    if not isinstance(url, str) or not url.strip():
        raise Refused("empty URL")
    if any(c.isspace() or ord(c) < 32 for c in url.strip()):
        raise Refused("the URL contains spaces or control characters")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise Refused(f"only http and https URLs are fetched, not {scheme + ':' if scheme else 'a URL without a scheme'}")
    if parts.username is not None or parts.password is not None:
        raise Refused("URLs with a user name or password are not fetched")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise Refused("the URL has no host")
    return scheme, host, port or (443 if scheme == "https" else 80)


async def check_url(url: str, allow: AllowList, resolver: Resolver = system_resolver, timeout: float = 5.0) -> Target:
    """The checked target of ``url``: Refused (before any connection) when it may not be fetched."""
    scheme, host, port = split_url(url)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addrs = [str(literal)]
    else:
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise Refused(f"{host!r} is not a valid host name") from None
        try:
            addrs = await asyncio.wait_for(resolver(host, port), timeout)
        except asyncio.TimeoutError:
            raise Refused(f"resolving {host} took longer than {timeout:g} s") from None
        except OSError as exc:
            raise Refused(f"cannot resolve {host} ({exc.strerror or exc})") from None
        if not addrs:
            raise Refused(f"{host} has no address")
    host_allowed = allow.allows_host(host)
    problems: list[str] = []
    for addr in addrs:
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            problems.append(f"{addr!r} is not an address")
            continue
        what = address_kind(ip)
        if what is None or host_allowed or allow.allows_ip(ip):
            return Target(url=url.strip(), scheme=scheme, host=host, port=port, ip=str(ip))
        problems.append(f"{ip} is {what}" if literal is not None else f"{host} resolves to {ip}, {what}")
    raise Refused(f"{problems[0]}; not fetched (list the host in [web] allow_hosts to allow it)")
