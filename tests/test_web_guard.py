"""The fetch guard decides before any connection: checked with literal addresses and fake resolvers, no socket opened."""

from __future__ import annotations

import asyncio

import pytest

from memlens.config import WebConfig
from memlens.web.context import gather_sync
from memlens.web.guard import AllowList, Refused, Target, address_kind, check_url, split_url
from tests.conftest import bounded
from tests.web_servers import install_no_network

FORBIDDEN = [
    ("http://10.0.0.1/", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),  # the cloud metadata service
    ("http://[fd00:ec2::254]/latest/meta-data/", "private"),
    ("http://127.0.0.1:8080/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://[::ffff:10.0.0.1]/", "private address inside an IPv6 address"),
    ("http://[64:ff9b::a9fe:a9fe]/", "link-local address inside an IPv6 address"),
    ("http://[2002:7f00:1::]/", "loopback address inside an IPv6 address"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://224.0.0.1/", "multicast"),
    ("http://100.64.0.1/", "not a public address"),
    ("http://192.168.1.1/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://240.0.0.1/", "reserved"),
    ("http://[fe80::1]/", "link-local"),
]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    return install_no_network(monkeypatch)


def check(url, allow=(), resolver=None, timeout=5.0):
    async def run():
        kwargs = {"resolver": resolver} if resolver else {}
        return await check_url(url, AllowList(allow), timeout=timeout, **kwargs)

    return asyncio.run(run())


@pytest.mark.parametrize("url,why", FORBIDDEN)
def test_private_and_special_addresses_are_refused(url, why):
    with pytest.raises(Refused, match=why):
        check(url)


def test_the_whole_pipeline_refuses_them_without_opening_a_socket(no_network):
    conf = WebConfig(connect_timeout=5, deadline_seconds=30)
    urls = [u for u, _ in FORBIDDEN if "127.0.0.1" not in u and "::1" not in u][:10]
    ctx = bounded(lambda: gather_sync(conf, urls=urls), 60)
    assert len(ctx.sources) == len(urls)
    for src in ctx.sources:
        assert not src["ok"] and src["error"].startswith("refused: ") and src["status"] is None
    assert no_network.connects == [] and no_network.lookups == []
    assert ctx.context == ""


@pytest.mark.parametrize("url,why", [
    ("ftp://example.org/x", "only http and https"),
    ("file:///etc/passwd", "only http and https"),
    ("javascript:alert(1)", "only http and https"),
    ("gopher://127.0.0.1:70/", "only http and https"),
    ("example.org/page", "without a scheme"),
    ("http://user:pw@127.0.0.1/", "user name or password"),
    ("http:///nohost", "no host"),
    ("http://127.0.0.1/a b", "spaces or control characters"),
    ("http://127.0.0.1:99999/", "not a valid URL"),
    ("", "empty URL"),
])
def test_bad_urls(url, why):
    with pytest.raises(Refused, match=why):
        split_url(url)


def test_names_are_resolved_and_every_address_checked():
    async def metadata(host, port):
        return ["169.254.169.254"]

    with pytest.raises(Refused, match=r"meta\.example resolves to 169\.254\.169\.254, a link-local address"):
        check("http://meta.example/", resolver=metadata)

    async def mixed(host, port):
        return ["10.0.0.7", "93.184.216.34"]

    target = check("https://mixed.example/a?b=1", resolver=mixed)  # only checked, never fetched
    assert target.ip == "93.184.216.34"  # the connection would go to the public address only
    assert target.connect_url() == "https://93.184.216.34:443/a?b=1"
    assert target.host_header() == "mixed.example" and target.origin == "https://mixed.example"


def test_allow_hosts_by_name_address_or_network():
    async def private(host, port):
        return ["10.1.2.3"]

    assert check("http://intranet.example/", allow=["Intranet.Example"], resolver=private).ip == "10.1.2.3"
    assert check("http://intranet.example/", allow=["10.0.0.0/8"], resolver=private).ip == "10.1.2.3"
    assert check("http://10.1.2.3/", allow=["10.1.2.3"]).ip == "10.1.2.3"
    with pytest.raises(Refused):
        check("http://10.1.2.4/", allow=["10.1.2.3", "other.example"])
    with pytest.raises(Refused):  # an allowed IPv4 address does not allow its IPv6 mapped form
        check("http://[::ffff:10.1.2.3]/", allow=["10.1.2.3"])


def test_resolver_failures_are_refusals():
    async def slow(host, port):
        await asyncio.sleep(30)
        return ["93.184.216.34"]

    async def broken(host, port):
        raise OSError(-2, "Name or service not known")

    async def empty(host, port):
        return []

    with pytest.raises(Refused, match="took longer than 0.2 s"):
        check("http://slow.example/", resolver=slow, timeout=0.2)
    with pytest.raises(Refused, match="cannot resolve broken.example"):
        check("http://broken.example/", resolver=broken)
    with pytest.raises(Refused, match="has no address"):
        check("http://empty.example/", resolver=empty)


def test_localhost_by_name_is_loopback():
    with pytest.raises(Refused, match="localhost resolves to .*loopback"):
        check("http://localhost:1/")


def test_public_addresses_pass():
    import ipaddress

    for ip in ("93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"):
        assert address_kind(ipaddress.ip_address(ip)) is None
    t = check("http://[2606:4700:4700::1111]:8080/x")
    assert t.connect_url() == "http://[2606:4700:4700::1111]:8080/x"
    assert t.host_header() == "[2606:4700:4700::1111]:8080"
    assert isinstance(t, Target)
