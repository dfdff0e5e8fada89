"""Human-readable output never carries a terminal control sequence, whatever the text it shows came from
(a stored entry, a task, an ingested heading, a file name, a model's answer); JSON output stays as it was."""

from __future__ import annotations

import json

import pytest

from memlens.visible import for_terminal, strip_controls
from tests.conftest import run_cli
from tests.fake_llm import FakeLLM

# clear the screen, set the window title, rewrite the line, an 8-bit CSI, a bidi override
HOSTILE = "ok\x1b[2J\x1b]0;pwned\x07\rFAKE STATUS: all tests passed\x9b31m\u202eevil"
CONTROL_BYTES = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def assert_clean(text: str) -> None:
    for ch in CONTROL_BYTES:
        assert ch not in text, f"{ch!r} reached the terminal in {text!r}"


def test_for_terminal_keeps_what_is_visible():
    shown = for_terminal(HOSTILE + "\n\tindented\r\nnext")
    assert shown == "ok[2J]0;pwnedFAKE STATUS: all tests passed31mevil\n\tindented\nnext"
    assert for_terminal("plain text, ünïcödé — fine") == "plain text, ünïcödé — fine"
    assert strip_controls("a\x1b[2Jb\tc\nd\x9b") == "a[2Jb\tc\nd"
    assert for_terminal("st\udce9\udc9b.db") == "st\udce9.db"  # a non-UTF-8 file name's bytes, but no C1 control


def test_cli_output_for_people_is_clean_and_json_is_unchanged(mem, capsys, monkeypatch):
    """In process, with the store's hashing embedder: stored text shown by `search`, `export` and an error."""
    from memlens import embed
    from memlens.cli.main import main

    monkeypatch.setattr(embed, "make_embedder", lambda *a, **k: embed.HashEmbedder())
    e = mem.add("Harbour tides " + HOSTILE, wing="w", title="Harbour tides " + HOSTILE)
    path = str(mem.path)
    mem.close()
    assert main(["--store", path, "search", "harbour tides", "--wing", "w"]) == 0
    out = capsys.readouterr()
    assert "Harbour tides ok[2J]0;pwned FAKE STATUS" in out.out  # the title on its line: its \r is a space
    assert_clean(out.out + out.err)
    assert main(["--store", path, "search", "harbour tides", "--wing", "w", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["title"] == e.title  # JSON: exactly as stored
    assert main(["--store", path, "export"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["text"] == e.text
    assert main(["--store", path, "edit", e.id, f"room={HOSTILE}"]) == 2  # the error quotes the value
    err = capsys.readouterr().err
    assert err.startswith("memlens: error: ") and "pwned" in err
    assert_clean(err)


@pytest.mark.model
def test_ask_answer_search_heading_and_index_file_name_reach_the_terminal_clean(real_mem, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(f"# Harbour tides {HOSTILE}\n\nThe tide tables of the north harbour.\n")
    (docs / f"blob{HOSTILE}.bin").write_bytes(b"\x00\x01\x02" * 100)  # skipped as binary: its name is shown
    real_mem.add("Callbacks must not block the executor.", wing="w", type="invariant")
    store = str(real_mem.path)
    real_mem.close()

    ingested = run_cli("--store", store, "ingest", str(docs / "guide.md"), "--wing", "docs", timeout=300)
    assert ingested.returncode == 0, ingested.stderr
    indexed = run_cli("--store", store, "index", str(docs), "--wing", "code", timeout=300)
    assert indexed.returncode == 0, indexed.stderr
    assert "skipped" in indexed.stderr and "pwned" in indexed.stderr
    assert_clean(indexed.stdout + indexed.stderr)

    found = run_cli("--store", store, "search", "harbour tides", "--wing", "docs", timeout=300)
    assert found.returncode == 0, found.stderr
    assert "Harbour tides ok[2J]0;pwned" in found.stdout
    assert_clean(found.stdout + found.stderr)
    as_json = run_cli("--store", store, "search", "harbour tides", "--wing", "docs", "--json", timeout=300)
    assert any("\x1b[2J\x1b]0;pwned\x07" in r["title"] for r in json.loads(as_json.stdout)["results"])  # as stored

    with FakeLLM("stream", ["The answer ", "\x1b[2J", "\x1b]0;", "pwned\x07", "\rFAKE", " done."]) as fake:
        env = {"MEMLENS_LLM__BASE_URL": fake.base_url, "MEMLENS_LLM__MODEL": "fake"}
        asked = run_cli("--store", store, "ask", "do callbacks block", "--active-wing", "w", env=env, timeout=300)
        asked_json = run_cli("--store", store, "ask", "do callbacks block", "--active-wing", "w", "--json", env=env,
                             timeout=300)
    assert asked.returncode == 0, asked.stderr
    assert "The answer [2J]0;pwnedFAKE done." in asked.stdout  # streamed token by token, each split sequence dropped
    assert_clean(asked.stdout + asked.stderr)
    assert json.loads(asked_json.stdout)["answer"] == "The answer \x1b[2J\x1b]0;pwned\x07\rFAKE done."
