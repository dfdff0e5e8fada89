"""Document ingestion on real material (installed packages' READMEs, the system's HTML and PDF manuals).

Mechanics use the deterministic hashing embedder; retrieval quality with the real
model is in test_ingest_model.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from memlens.ingest import ingest, storage
from tests.conftest import run_cli, snapshot_store
from tests.ingest_material import html_pages, pdf_file, readmes


def _by_source(mem):
    out: dict[str, list] = {}
    for e in mem.entries():
        out.setdefault(e.meta.get("source"), []).append(e)
    return out


def test_markdown_split_at_headings_keeps_the_heading_path(mem, tmp_path):
    docs = tmp_path / "docs"
    readmes(docs)
    out = ingest(mem, [docs], wing="docs")
    assert out["added"] == len(list(docs.iterdir())) and out["chunks"] > 0 and out["skipped"] == []
    entries = list(mem.entries("docs"))
    assert {e.kind.value for e in entries} == {"document"}
    with_heads = [e for e in entries if e.meta.get("heading_path")]
    assert len(with_heads) > len(entries) // 2
    for e in with_heads[:50]:
        # the chunk's title is the file then its heading path, and the heading is a line of the source section
        assert e.title.startswith(os.path.basename(e.meta["source"]))
        src = open(e.meta["source"], encoding="utf-8").read().split("\n")
        a, b = e.meta["lines"]
        assert any(e.meta["heading_path"][-1] in line for line in src[: a - 1])
        assert 1 <= a <= b <= len(src)
        assert e.meta["source_sha256"] == storage.get_source(mem, "docs", e.meta["source"]).sha256


SYSTEMD_DOCS = Path("/usr/share/doc/systemd")


@pytest.mark.skipif(not SYSTEMD_DOCS.is_dir(), reason="systemd's documentation is not installed")
def test_front_matter_of_markdown_files_is_not_text_to_search(mem, tmp_path):
    """systemd's Markdown documents open with a front matter block (title, category, layout, licence)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    with_fm = [p for p in sorted(SYSTEMD_DOCS.glob("*.md")) if p.read_text(encoding="utf-8").startswith("---\n")][:5]
    assert with_fm, "no Markdown file with front matter found"
    for p in with_fm:
        shutil.copy(p, docs / p.name)
    (docs / "only-front-matter.md").write_text("---\ntitle: Nothing else\n---\n")
    out = ingest(mem, [docs], wing="docs")
    assert out["added"] == len(with_fm)
    assert out["skipped"] == [{"path": str(docs / "only-front-matter.md"), "reason": "no text to index"}]
    for e in mem.entries("docs"):
        assert "layout: default" not in e.text and not e.text.startswith("---"), (e.title, e.text[:80])
        a, _ = e.meta["lines"]
        src = open(e.meta["source"], encoding="utf-8").read().split("\n")
        assert src[a - 1].strip() and src[a - 1].strip() != "---"  # its first line is still where the text starts


def test_chunks_fit_the_models_window(mem, tmp_path, real_embedder):
    """Counted by the real tokenizer: every chunk's title line + text fits 256 word pieces with [CLS] and [SEP]."""
    from memlens.ingest.chunking import TokenCounter
    from memlens.ingest.readers import read_document

    docs = tmp_path / "docs"
    readmes(docs, limit=10)
    count = TokenCounter(real_embedder.count_tokens, real_embedder.spec.max_tokens)
    sizes = []
    for path in sorted(docs.iterdir()):
        chunks, _ = read_document(path, path.read_bytes(), "markdown", count)
        for c in chunks:
            n = real_embedder.count_tokens(f"{c.title}\n{c.text}") + 2
            assert n <= 256, (path.name, c.title, n)
            sizes.append(n)
    assert sum(sizes) / len(sizes) > 80  # packed, not one paragraph per chunk


def test_html_main_text_without_boilerplate(mem, tmp_path):
    pages = html_pages(tmp_path / "html")
    out = ingest(mem, [p for p in pages], wing="manual")
    assert out["added"] == len(pages) and out["skipped"] == []
    entries = list(mem.entries("manual"))
    # the manual's navigation header ("Next: …, Previous: …, Up: …") is boilerplate: gone from the stored text
    nav = sum(1 for e in entries if "Previous:" in e.text and "Up:" in e.text)
    raw_nav = sum(1 for p in pages if "Previous:" in p.read_text(errors="replace"))
    assert raw_nav > 0 and nav == 0
    assert all(e.meta["document"].get("title") for e in entries)  # trafilatura's metadata
    assert all("<" not in e.text[:200] or "</" not in e.text for e in entries)  # text, not markup


def test_html_headings_after_a_code_block_inside_a_list_item_stay_headings():
    """Node's n-api.html has a list item holding a multi-line <code> block, which trafilatura turns into a fence
    opened at the end of a line of text: every section of the page must still be cut at its own headings, and every
    heading path must name headings of the page (not comment lines of later code)."""
    import re

    from memlens.ingest.chunking import TokenCounter
    from memlens.ingest.readers import read_document

    page = Path("/usr/share/doc/nodejs/api/n-api.html")
    html = page.read_text(encoding="utf-8")
    chunks, _ = read_document(page, page.read_bytes(), "html", TokenCounter(lambda s: len(s.split()), 256))
    plain = {"&#x3C;": "<", "&lt;": "<", "&gt;": ">", "&#x26;": "&", "&amp;": "&"}
    real = set()
    for h in re.findall(r"<h[1-6][^>]*>(.*?)</h[1-6]>", html, re.S):
        text = re.sub(r"<[^>]+>", "", h)
        for k, v in plain.items():
            text = text.replace(k, v)
        real.add(text.strip().rstrip("#").strip())
    heads = {h.replace("`", "").replace("\\", "") for c in chunks for h in c.position.get("heading_path", [])}
    assert len(heads) > 200 and heads <= real, sorted(heads - real)[:5]  # was 2 heading names, 134 chunks


def test_pdf_page_by_page(mem, tmp_path):
    pdf = pdf_file(tmp_path / "pdf")
    out = ingest(mem, [pdf], wing="spec")
    entries = list(mem.entries("spec"))
    assert out["added"] == 1 and len(entries) == out["chunks"] > 5
    pages = sorted({e.meta["page"] for e in entries})
    assert pages[0] == 1 and len(pages) > 5 and all(isinstance(p, int) for p in pages)
    assert any("mime" in e.text.lower() for e in entries)


def test_rerun_is_a_no_op_and_touches_nothing(mem, tmp_path, store_path):
    docs = tmp_path / "docs"
    readmes(docs, limit=10)
    first = ingest(mem, [docs], wing="docs")
    before = snapshot_store(store_path)
    again = ingest(mem, [docs], wing="docs")
    assert again == {**again, "added": 0, "updated": 0, "removed": 0, "chunks": 0, "unchanged": first["added"]}
    assert snapshot_store(store_path) == before  # no entry, vector, audit row or generation changed


def test_touched_but_unchanged_file_is_not_rechunked(mem, tmp_path):
    docs = tmp_path / "docs"
    readmes(docs, limit=8)
    ingest(mem, [docs], wing="docs")
    ids = sorted(e.id for e in mem.entries())
    target = sorted(docs.iterdir())[0]
    os.utime(target, ns=(time.time_ns(), time.time_ns() + 10**9))
    out = ingest(mem, [docs], wing="docs")
    assert out["updated"] == 0 and out["unchanged"] == 8 and sorted(e.id for e in mem.entries()) == ids
    assert storage.get_source(mem, "docs", str(target)).mtime_ns == target.stat().st_mtime_ns  # no hash next time


def test_an_edit_updates_exactly_one_source(mem, tmp_path):
    docs = tmp_path / "docs"
    readmes(docs, limit=8)
    ingest(mem, [docs], wing="docs")
    before = _by_source(mem)
    target = str(sorted(docs.iterdir())[2])
    text = open(target, encoding="utf-8").read()
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(text + "\n\n## Appendix added later\n\nA brand new closing paragraph about zebra migration.\n")
    gens = mem.generations(["docs"])
    out = ingest(mem, [docs], wing="docs")
    assert (out["added"], out["updated"], out["unchanged"], out["removed"]) == (0, 1, 7, 0)
    after = _by_source(mem)
    for src, entries in before.items():
        if src != target:
            assert sorted(e.id for e in after[src]) == sorted(e.id for e in entries)
    assert any("zebra migration" in e.text for e in after[target])
    assert not set(e.id for e in before[target]) & set(e.id for e in after[target])  # all old chunks replaced
    assert mem.generations(["docs"])["docs"] == gens["docs"] + 1  # one transaction, one bump
    rows = [a for a in mem.audit(limit=5) if a["action"] == "ingest"]
    assert rows[0]["detail"]["source"] == target and rows[0]["detail"]["removed"] == len(before[target])


def test_a_deleted_file_loses_its_chunks_on_folder_reingest(mem, tmp_path):
    docs = tmp_path / "docs"
    readmes(docs, limit=8)
    ingest(mem, [docs], wing="docs")
    victim = sorted(docs.iterdir())[1]
    n = len(_by_source(mem)[str(victim)])
    total = mem.count()
    victim.unlink()
    out = ingest(mem, [docs], wing="docs")
    assert out["removed"] == 1 and out["unchanged"] == 7
    assert str(victim) not in _by_source(mem) and mem.count() == total - n
    assert storage.get_source(mem, "docs", str(victim)) is None
    left = mem.conn.execute("SELECT count(*) FROM source_entries WHERE entry_id NOT IN (SELECT id FROM entries)").fetchone()
    assert left[0] == 0


def test_unchanged_chunks_of_an_edited_file_reuse_their_vectors(mem, tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    readmes(docs, limit=3)
    ingest(mem, [docs], wing="docs")
    target = sorted(docs.iterdir())[0]
    with open(target, "a", encoding="utf-8") as fh:
        fh.write("\n\n# Closing words\n\nOne more section at the end.\n")
    embedded: list[int] = []
    real = mem.embedder.embed
    monkeypatch.setattr(mem.embedder, "embed", lambda texts: embedded.append(len(texts)) or real(texts))
    ingest(mem, [docs], wing="docs")
    assert sum(embedded) == 1  # only the new section's chunk met the model


def test_files_read_before_a_large_one_are_written_even_if_the_large_one_fails(mem, tmp_path, monkeypatch):
    """A large file goes into a batch of its own: an interrupt (or an error) while it is embedded keeps the smaller
    files read before it, written in their own batch."""
    from memlens.ingest import pipeline

    monkeypatch.setattr(pipeline, "BATCH_CHUNKS", 8)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Small\n\nA small file changed just before the large one was added.\n")
    (docs / "b.md").write_text("".join(f"# Part {i}\n\n{'Words of a long manual. ' * 40}\n\n" for i in range(30)))
    real = mem.embedder.embed

    def embed(texts):
        if len(texts) > 2:  # the large file's batch
            raise KeyboardInterrupt
        return real(texts)

    monkeypatch.setattr(mem.embedder, "embed", embed)
    with pytest.raises(KeyboardInterrupt):
        ingest(mem, [docs], wing="docs")
    assert [e.title for e in mem.entries("docs")] == ["a.md > Small"]


def test_an_interrupt_stops_the_writer_at_once(mem, tmp_path, monkeypatch):
    """Ctrl-C while batches wait for the writer: it stops after the slice it is embedding, the waiting batches are
    dropped, and nothing is written (it took the 30 s of a join timeout, embedding on, when the queue was full)."""
    import threading

    from memlens.ingest import pipeline

    monkeypatch.setattr(pipeline, "BATCH_FILES", 1)
    monkeypatch.setattr(pipeline, "EMBED_SLICE", 2)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("".join(f"# Part {i}\n\nSection {i} of a manual about lighthouses.\n\n" for i in range(10)))
    for name in "bcde":
        (docs / f"{name}.md").write_text(f"# {name}\n\nA small file named {name}.\n")
    calls: list[int] = []
    embedding = threading.Event()
    real = mem.embedder.embed

    def slow(texts):
        calls.append(len(texts))
        embedding.set()
        time.sleep(0.3)  # the interrupt arrives while the first slice is embedded
        return real(texts)

    def progress(event):
        if event.get("stage") == "read" and event["files"] == 3:  # b and c wait in the queue
            assert embedding.wait(30)  # and a.md's first slice is being embedded
            raise KeyboardInterrupt

    monkeypatch.setattr(mem.embedder, "embed", slow)
    with pytest.raises(KeyboardInterrupt):
        ingest(mem, [docs], wing="docs", progress=progress)
    assert not any(t.name == "memlens-ingest-writer" and t.is_alive() for t in threading.enumerate())
    assert calls == [2] and list(mem.entries("docs")) == []


def test_unsupported_and_binary_files_are_skipped_with_reasons(mem, tmp_path):
    docs = tmp_path / "docs"
    readmes(docs, limit=8)
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (docs / "notes.txt").write_bytes(b"caf\xe9 latin-1 text")
    (docs / "big.db").write_bytes(b"\0" * (600 * 1024))  # its type is the reason, whatever its size
    out = ingest(mem, [docs], wing="docs")
    reasons = {os.path.basename(s["path"]): s["reason"] for s in out["skipped"]}
    assert reasons["logo.png"].startswith("unsupported file type")
    assert reasons["big.db"] == "unsupported file type '.db'"
    assert reasons["notes.txt"].startswith("not UTF-8 text")


def test_cli_json_summary_is_exactly_the_contract(tmp_path):
    docs = tmp_path / "docs"
    readmes(docs, limit=3)
    store = str(tmp_path / "s.db")
    r = run_cli("--store", store, "ingest", str(docs), "--wing", "docs", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == ["added", "updated", "unchanged", "removed", "chunks", "skipped", "seconds", "complete"]
    assert out["added"] == 3 and out["chunks"] > 0 and isinstance(out["seconds"], float) and out["complete"] is True
    assert "\r" not in r.stderr  # no progress bar when stderr is not a terminal


def test_ingest_of_nothing_but_skipped_files_exits_1(tmp_path):
    (tmp_path / "blob.dat").write_bytes(open("/bin/ls", "rb").read(4000))  # a real binary
    store = str(tmp_path / "s.db")
    r = run_cli("--store", store, "ingest", str(tmp_path / "blob.dat"), "--wing", "docs", timeout=120)
    assert r.returncode == 1 and "memlens: nothing ingested: every file was skipped" in r.stderr, r.stderr
    assert "skipped" in r.stderr and "blob.dat" in r.stderr
    readmes(tmp_path / "docs", limit=1)
    ok = run_cli("--store", store, "ingest", str(tmp_path / "blob.dat"), str(tmp_path / "docs"), "--wing", "docs",
                 timeout=120)
    assert ok.returncode == 0, ok.stderr  # one file ingested: the skipped one is reported, not a failure


@pytest.mark.parametrize("argv, needle", [
    (["ingest", "/nonexistent/readme.md", "--wing", "docs"], "no such file or folder"),
    (["ingest", ".", "--wing", "bad wing"], "not a valid name"),
    (["index", "/etc/hostname", "--wing", "w"], "not a folder"),
    (["index", "."], "needs --wing"),
])
def test_bad_input_is_one_line_and_creates_no_store(tmp_path, argv, needle):
    store = tmp_path / "s.db"
    r = run_cli("--store", str(store), *argv, timeout=60)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not store.exists()


KILLED = r"""
import sys
from memlens import Memory
from memlens.embed import HashEmbedder
from memlens.ingest import ingest
from memlens.ingest import pipeline
pipeline.BATCH_FILES = 5
mem = Memory.open(sys.argv[1], embedder=HashEmbedder())
def progress(ev):
    if ev["stage"] == "written":
        print("written", flush=True)
        import time; time.sleep(0.3)
ingest(mem, [sys.argv[2]], wing="docs", progress=progress)
print("finished", flush=True)
"""


def test_sigkill_mid_ingest_leaves_a_sound_store_and_the_next_run_completes(tmp_path, settings, hash_embedder):
    import signal
    import subprocess
    import sys

    from memlens import Memory

    docs = tmp_path / "docs"
    names = readmes(docs)
    for i, name in enumerate(list(names)):  # more files: several batches to kill between
        shutil.copy(docs / name, docs / f"copy{i}-{name}")
    store = tmp_path / "s.db"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(store), str(docs)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "written"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    from memlens.store import db

    conn = db.connect(store, create=False)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with Memory.open(store, settings=settings, embedder=hash_embedder) as mem:
        done = mem.conn.execute("SELECT count(*) FROM sources").fetchone()[0]
        assert 0 < done < len(list(docs.iterdir()))  # killed part way
        _assert_consistent(mem)
        out = ingest(mem, [docs], wing="docs")
        assert out["added"] == len(list(docs.iterdir())) - done and out["unchanged"] == done
        _assert_consistent(mem)


def _assert_consistent(mem):
    """Every source's entries are exactly its catalog chunks, all of its current hash (never half old, half new)."""
    for s in storage.all_sources(mem):
        entries = [e for e in mem.entries(s.wing) if e.meta.get("source") == s.path]
        assert len(entries) == s.chunks == len(storage.chunk_ids(mem, s.id))
        assert {e.meta["source_sha256"] for e in entries} == {s.sha256}
    n = mem.conn.execute("SELECT count(*) FROM entries_vec").fetchone()[0]
    assert n == mem.count()


def test_a_failed_write_leaves_the_old_chunks_whole(mem, tmp_path, store_path, monkeypatch):
    """The replacement of a changed file's chunks is one transaction: a failure inside it changes nothing."""
    from memlens.errors import StoreError

    docs = tmp_path / "docs"
    readmes(docs, limit=3)
    ingest(mem, [docs], wing="docs")
    target = sorted(docs.iterdir())[0]
    target.write_text(target.read_text() + "\n\n# Late section\n\nNew words.\n")
    before = snapshot_store(store_path)
    from memlens.store.writer import SqliteWriter

    real = SqliteWriter.audit

    def failing(*args, **kw):
        real(*args, **kw)
        raise StoreError("disk full while writing (simulated)")

    monkeypatch.setattr(SqliteWriter, "audit", failing)
    with pytest.raises(StoreError):
        ingest(mem, [docs], wing="docs")
    monkeypatch.undo()
    assert snapshot_store(store_path) == before
    _assert_consistent(mem)
    assert ingest(mem, [docs], wing="docs")["updated"] == 1
    _assert_consistent(mem)


def test_a_path_given_twice_or_inside_a_given_folder_is_read_once(mem, tmp_path):
    docs = tmp_path / "docs"
    readmes(docs, limit=3)
    one = sorted(docs.iterdir())[0]
    out = ingest(mem, [one, docs, docs, one], wing="docs")
    assert (out["added"], out["updated"]) == (3, 0)


def test_runs_do_not_pile_up_connections(mem, tmp_path):
    """Each run's writer thread closes its own connection: a watcher running for days keeps a fixed number."""
    docs = tmp_path / "docs"
    readmes(docs, limit=3)
    ingest(mem, [docs], wing="docs")
    n = len(mem.store._conns)
    for i in range(3):
        (docs / f"note{i}.md").write_text(f"# Note {i}\n\nA short note number {i}.\n")
        ingest(mem, [docs], wing="docs")
    assert len(mem.store._conns) == n


def test_progress_bar_only_on_a_terminal(tmp_path):
    """On a terminal, stderr shows a progress bar; piped (the other CLI tests), it shows none."""
    import pty
    import subprocess

    from tests.conftest import MEMLENS

    docs = tmp_path / "docs"
    readmes(docs, limit=3)
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([MEMLENS, "--store", str(tmp_path / "s.db"), "ingest", str(docs), "--wing", "docs"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, timeout=300)
        os.close(slave)
        slave = -1
        seen = b""
        while True:
            try:
                block = os.read(master, 65536)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not block:
                break
            seen += block
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 0, seen[-500:]
    text = seen.decode("utf-8", "replace")
    assert "ingest: [" in text and "/3 files" in text
    assert proc.stdout.decode().startswith("ingest: 3 added")


def test_ingest_and_index_do_not_take_each_others_folders_in_one_wing(mem, tmp_path):
    """One catalog per wing: index would have taken an ingested folder's files as its own, unchanged (and listed
    the folder as a code workspace never indexed), and ingest an indexed workspace's."""
    from memlens.errors import ValidationError
    from memlens.ingest import index

    docs, ws = tmp_path / "a" / "docs", tmp_path / "ws"
    readmes(docs, limit=2)
    ws.mkdir()
    (ws / "tool.py").write_text("def tool():\n    return 1\n")
    ingest(mem, [docs], wing="W")
    index(mem, ws, wing="W")
    before = mem.count()
    with pytest.raises(ValidationError, match=r"^index: .*docs is already ingested as documents \(memlens ingest\) in "
                                              r"wing 'W'; index it into another --wing$"):
        index(mem, docs, wing="W")
    with pytest.raises(ValidationError, match=r"is already indexed as code \(memlens index\) in wing 'W'"):
        ingest(mem, [ws], wing="W")
    with pytest.raises(ValidationError, match="already ingested as documents"):
        index(mem, tmp_path / "a", wing="W")  # a folder around it
    assert mem.count() == before and [r["mode"] for r in storage.runs(mem)] == ["index", "ingest"]
    assert index(mem, docs, wing="docs-as-code")["added"] == 2  # another wing: its own catalog
    ingest(mem, [docs], wing="W")  # the same command again is fine


def test_a_fifo_named_on_the_command_line_is_skipped_as_not_a_regular_file(mem, tmp_path):
    fifo = tmp_path / "notes.md"
    os.mkfifo(fifo)
    out = ingest(mem, [fifo], wing="docs")  # never opened: reading a FIFO would wait for a writer
    assert out["skipped"] == [{"path": str(fifo), "reason": "not a regular file"}] and mem.count() == 0


def test_a_new_room_moves_unchanged_files_chunks_into_it(mem, tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    readmes(docs, limit=2)
    ingest(mem, [docs], wing="docs")
    embedded: list[int] = []
    real = mem.embedder.embed
    monkeypatch.setattr(mem.embedder, "embed", lambda texts: embedded.append(len(texts)) or real(texts))
    moved = ingest(mem, [docs], wing="docs", room="r1")  # --room was ignored for files that had not changed
    assert moved["updated"] == 2 and moved["unchanged"] == 0 and sum(embedded) == 0  # their vectors are kept
    assert {e.room for e in mem.entries("docs")} == {"r1"}
    again = ingest(mem, [docs], wing="docs", room="r1")
    assert again["unchanged"] == 2 and again["updated"] == 0
