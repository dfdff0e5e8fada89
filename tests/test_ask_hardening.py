"""The chat client against hostile endpoints on 127.0.0.1: a server echoing the key or the URL's password never gets
them into a message or an answer, and a line without end cannot fill memory."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import textwrap

import pytest

from memlens.assist.llm import Endpoint, LlmError, astream_chat, stream_chat
from memlens.secrets import StreamRedactor, redact, url_secrets, without_password
from tests.fake_llm import FakeLLM

KEY = "sk-canary-5f1c9e2a7b"
PASSWORD = "pw-canary-8d41"


def collect(ep: Endpoint, use_async: bool) -> tuple[str, str | None]:
    messages = [{"role": "user", "content": "hi"}]

    async def run_async() -> tuple[list[str], str | None]:
        got: list[str] = []
        try:
            async for t in astream_chat(ep, messages):
                got.append(t)
        except LlmError as exc:
            return got, str(exc)
        return got, None

    if use_async:
        got, err = asyncio.run(asyncio.wait_for(run_async(), 60))
        return "".join(got), err
    parts: list[str] = []
    try:
        for t in stream_chat(ep, messages):
            parts.append(t)
    except LlmError as exc:
        return "".join(parts), str(exc)
    return "".join(parts), None


def with_userinfo(base_url: str, user: str = "alice", password: str = PASSWORD) -> str:
    return base_url.replace("http://", f"http://{user}:{password}@", 1)


def test_redaction_helpers():
    assert without_password("http://u:p%zz@[::1/x") == "http://u@[::1/x"  # read without a URL parser
    assert without_password("http://127.0.0.1:9/v1") == "http://127.0.0.1:9/v1"
    assert url_secrets("http://bob:p%40ss-word@127.0.0.1/")[:2] == ["p%40ss-word", "p@ss-word"]
    assert redact(f"a {KEY} b {KEY}", [KEY]) == "a [redacted] b [redacted]"
    r = StreamRedactor([KEY])
    pieces = [r.feed(p) for p in ("x sk-can", "ary-5f1c", "9e2a7b y sk-", "no")] + [r.end()]
    assert "".join(pieces) == "x [redacted] y sk-no" and pieces[0] == "x "  # only a possible start is held back


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("echo_in", ["status", "event", "answer"])
@pytest.mark.parametrize("credential", ["key", "userinfo"])
def test_an_endpoint_echoing_the_authorization_header_never_gets_a_secret_out(credential, echo_in, use_async):
    with FakeLLM("echo", echo_in=echo_in) as fake:
        if credential == "key":
            ep = Endpoint(fake.base_url, "fake", KEY, timeout=20, connect_timeout=5, read_timeout=10)
        else:  # the client sends the userinfo as HTTP Basic credentials: base64 of user:password
            ep = Endpoint(with_userinfo(fake.base_url), "fake", None, timeout=20, connect_timeout=5, read_timeout=10)
        text, err = collect(ep, use_async)
        sent = fake.requests[0]["headers"]["Authorization"]
    scheme = "Bearer" if credential == "key" else "Basic"
    assert sent.startswith(scheme + " ")  # the credential went where it belongs
    for secret in (KEY, PASSWORD, sent.split()[1]):
        assert secret not in text and secret not in (err or "")
    if echo_in == "status":
        assert err is not None and "HTTP 401" in err and f"{scheme} [redacted]" in err
        if credential == "userinfo":
            assert f"http://alice@127.0.0.1:{fake.base_url.split(':')[2]}" in err  # named without its password
    elif echo_in == "event":
        assert text == "Before the error. " and err is not None and f"{scheme} [redacted]" in err
    else:
        assert err is None and text == f"Before the error. {scheme} [redacted] was your header."


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_the_urls_password_is_in_no_error(use_async):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ep = Endpoint(f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1", "fake", KEY, timeout=10, connect_timeout=5)
    text, err = collect(ep, use_async)
    assert text == "" and err is not None and err.startswith(f"cannot connect to http://alice@127.0.0.1:{port}/v1")
    assert PASSWORD not in err and PASSWORD not in repr(ep) and KEY not in repr(ep)


CHILD = textwrap.dedent("""
    import json, resource, sys
    from memlens.assist.llm import Endpoint, LlmError, stream_chat
    ep = Endpoint(sys.argv[1], "fake", None, timeout=120, connect_timeout=5, read_timeout=60)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    err = None
    try:
        text = "".join(stream_chat(ep, [{"role": "user", "content": "hi"}]))
    except LlmError as exc:
        err = str(exc)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"grew_kib": after - before, "error": err}))
""")


def test_one_endless_stream_line_keeps_memory_bounded():
    """160 MB of one SSE line and no newline: the client stops at its line cap (it had held the whole line)."""
    with FakeLLM("longline", longline_bytes=160 << 20) as fake:
        out = subprocess.run([sys.executable, "-c", CHILD, fake.base_url], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["error"] == "the model's stream sent a line over 1024 KiB; the answer was cut there"
    assert got["grew_kib"] < 40 * 1024, got  # a few MiB of buffers, not the 160 MiB line
