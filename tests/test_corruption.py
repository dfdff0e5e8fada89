"""Damaged stores: real copies of a real store with garbage written over chosen pages.

The damaged stores are copies of the demo store, made with the real model (``model`` marker).

Every damaged case runs the real ``memlens`` command in a subprocess with a
timeout, so a read that loops on a damaged page fails the test instead of
hanging the suite. The in-process cases run in a thread joined with a timeout.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli


def page_of(path: Path, table: str, pagetype: str | None) -> int:
    """A page of ``table`` (the middle one of that type), found with SQLite's dbstat table."""
    from memlens.store import db

    conn = db.connect(path, create=False)
    try:
        rows = conn.execute("SELECT pageno, pagetype FROM dbstat WHERE name = ? ORDER BY pageno", (table,)).fetchall()
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    pages = [p for p, t in rows if pagetype is None or t == pagetype] or [p for p, _ in rows]
    assert pages, f"no pages for {table}"
    return (pages[len(pages) // 2] - 1) * size


def damage(src: Path, dst: Path, offset: int, length: int, seed: int = 7) -> Path:
    shutil.copy(src, dst)
    garbage = bytes(random.Random(seed).randrange(256) for _ in range(length))
    with open(dst, "r+b") as f:
        f.seek(offset)
        f.write(garbage)
    return dst


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_error(proc: Any) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def bounded(fn: Any, timeout: float = 60) -> Any:
    """Run ``fn`` in a thread; fail (rather than hang) if it does not finish in time."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} did not finish in {timeout} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


# (what is damaged, how to find its bytes): offsets into a copy of the demo store
SITES = {
    "entries table page": ("entries", "leaf", 1000, 2000),
    "vec0 chunk table": ("entries_vec_chunks", "leaf", 0, 4096),
    "vec0 vector blob": ("entries_vec_vector_chunks00", "overflow", 0, 4096),
    "FTS5 index": ("entries_fts_idx", "leaf", 0, 4096),
    "header: schema version": (None, None, 60, 4),
    "header: page size": (None, None, 16, 2),
}


def damaged_copy(demo_store: Path, tmp_path: Path, site: str) -> Path:
    table, pagetype, offset, length = SITES[site]
    base = page_of(demo_store, table, pagetype) if table else 0
    return damage(demo_store, tmp_path / "bad.db", base + offset, length)


@pytest.mark.model
@pytest.mark.parametrize("site", list(SITES))
def test_damaged_store_is_one_line_and_never_written(demo_store, tmp_path, site):
    bad = damaged_copy(demo_store, tmp_path, site)
    # a search that reads the damage: one line that says what to do, never a traceback
    searches = [run_cli("--store", str(bad), "search", q, timeout=120) for q in ("callbacks blocking", "python typing")]
    failed = [p for p in searches if p.returncode != 0]
    assert failed, f"no search read the damaged {site}"
    for p in failed:
        assert p.returncode == 2
        line = one_line_error(p)
        assert "is corrupt" in line and f"memlens --store {bad} check" in line and "salvage" in line, line
    before = digest(bad)  # (a search that did not meet the damage logged its retrieval, as on any store)
    # add is refused: checked before the write, so nothing lands in the damaged file
    p = run_cli("--store", str(bad), "add", "a new rule", "--wing", "python", timeout=120)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "is corrupt" in one_line_error(p)
    assert digest(bad) == before


@pytest.mark.model
@pytest.mark.parametrize("site", list(SITES))
def test_check_finds_damage_and_salvage_copies_the_rest(demo_store, tmp_path, site):
    bad = damaged_copy(demo_store, tmp_path, site)
    before = digest(bad)
    p = run_cli("--store", str(bad), "check", "--json", timeout=180)
    assert p.returncode == 1, (p.stdout, p.stderr)
    report = json.loads(p.stdout)
    assert not report["ok"] and report["problems"] >= 1 and report["findings"]

    new = tmp_path / "new.db"
    p = run_cli("--store", str(bad), "salvage", str(new), "--json", timeout=300)
    assert p.returncode in (0, 1), (p.stdout, p.stderr)
    out = json.loads(p.stdout)
    demo_ids = {
        json.loads(ln)["id"]
        for ln in (Path(__file__).parent.parent / "data" / "demo.jsonl").read_text().splitlines()
        if ln.strip()
    }
    assert out["saved"] + out["recovered_from_audit"] + out["lost"] == len(demo_ids), out
    assert out["saved"] + out["recovered_from_audit"] > 0
    # the new store is sound and searchable, the damaged one untouched and nothing left next to it
    p = run_cli("--store", str(new), "check", timeout=180)
    assert p.returncode == 0, p.stdout
    p = run_cli("--store", str(new), "export", timeout=120)
    assert p.returncode == 0
    assert {json.loads(ln)["id"] for ln in p.stdout.splitlines()} <= demo_ids
    assert digest(bad) == before
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith("bad.db")) == ["bad.db"]


@pytest.mark.model
def test_salvage_rebuilds_lost_rows_from_the_audit(demo_store, tmp_path):
    """The entries page holds rows whose last version the audit still has: salvage loses none of them."""
    bad = damaged_copy(demo_store, tmp_path, "entries table page")
    new = tmp_path / "new.db"
    p = run_cli("--store", str(bad), "salvage", str(new), "--json", timeout=300)
    out = json.loads(p.stdout)
    assert out["recovered_from_audit"] > 0 and out["lost"] == 0 and p.returncode == 0, out
    copy = tmp_path / "demo.db"
    shutil.copy(demo_store, copy)
    original = run_cli("--store", str(copy), "export", timeout=120).stdout
    salvaged = run_cli("--store", str(new), "export", timeout=120).stdout
    key = lambda text: sorted(json.loads(ln)["id"] + json.loads(ln)["text"] for ln in text.splitlines())  # noqa: E731
    assert key(salvaged) == key(original)


@pytest.mark.model
def test_check_on_a_sound_store_is_clean_and_leaves_nothing_behind(demo_store, tmp_path):
    store = tmp_path / "demo.db"
    shutil.copy(demo_store, store)
    before = digest(store)
    p = run_cli("--store", str(store), "check", timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok" in p.stdout.splitlines()[-1]
    assert digest(store) == before
    assert [x.name for x in tmp_path.iterdir()] == ["demo.db"]


@pytest.mark.model
def test_salvage_refuses_an_existing_target(demo_store, tmp_path):
    store = tmp_path / "demo.db"
    shutil.copy(demo_store, store)
    taken = tmp_path / "taken.db"
    taken.write_text("mine")
    for target in (taken, store):
        p = run_cli("--store", str(store), "salvage", str(target), timeout=120)
        assert p.returncode == 2 and "already exists" in one_line_error(p)
    assert taken.read_text() == "mine"


@pytest.mark.model
def test_writes_are_refused_once_damage_was_seen(demo_store, tmp_path, settings, real_embedder):
    """In one process: after any statement met the damage, every write to that store is refused."""
    from memlens import Memory
    from memlens.errors import StoreCorruptError

    bad = damaged_copy(demo_store, tmp_path, "vec0 chunk table")
    before = digest(bad)
    with Memory.open(bad, settings=settings, embedder=real_embedder) as mem:
        assert bounded(mem.count) == len(list(bounded(lambda: list(mem.entries()))))  # reads off the damage still work
        with pytest.raises(StoreCorruptError, match="is corrupt"):
            bounded(lambda: mem.search("callbacks blocking", active_wing="lifecore_ros2", use_cache=False))
        with pytest.raises(StoreCorruptError, match="writes are refused"):
            bounded(lambda: mem.set_status("lc-arch-001", "deprecated"))
        with pytest.raises(StoreCorruptError, match="writes are refused"):
            bounded(lambda: mem.import_jsonl(Path(__file__).parent.parent / "data" / "demo.jsonl"))
        with pytest.raises(StoreCorruptError, match="writes are refused"):
            bounded(lambda: mem.tasks.complete("t-1", "ship it"))
    assert digest(bad) == before


HAND_EDITS = [
    ("meta", "'{bad json'", "meta is not valid JSON"),
    ("meta", "'[1, 2]'", "not a JSON object"),
    ("kind", "'bogus'", "kind 'bogus'"),
    ("type", "'rule'", "type 'rule'"),
    ("status", "'gone'", "status 'gone'"),
    ("salience", "'high'", "salience 'high'"),
    ("created_at", "'yesterday'", "'yesterday' is not a timestamp"),
    ("title", "X'00ff'", "title is bytes"),
    # checks across columns: web text made a rule without a person's promotion, an entry overriding itself
    ("kind", "'web'", "a web entry is untrusted text and cannot be an invariant"),
    ("overrides", "id", "it overrides itself"),
]


@pytest.mark.model
@pytest.mark.parametrize("column,value,problem", HAND_EDITS, ids=[f"{c}={v}" for c, v, _ in HAND_EDITS])
def test_hand_edited_row_is_skipped_with_a_note(demo_store, tmp_path, column, value, problem):
    from memlens.store import db

    store = tmp_path / "demo.db"
    shutil.copy(demo_store, store)
    conn = db.connect(store, create=False)
    conn.execute(f"UPDATE entries SET {column} = {value} WHERE id = 'lc-arch-001'")
    conn.close()

    p = run_cli("--store", str(store), "search", "callbacks blocking", "--active-wing", "lifecore_ros2", "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["results"], "the other entries are still found"
    assert "lc-arch-001" not in [r["id"] for r in out["results"]]
    notes = [n for n in out["trace"]["notes"] if "lc-arch-001" in n]
    assert notes and problem in notes[0], out["trace"]["notes"]

    p = run_cli("--store", str(store), "export", timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "lc-arch-001" in p.stderr and problem in p.stderr
    ids = [json.loads(ln)["id"] for ln in p.stdout.splitlines()]
    assert "lc-arch-001" not in ids and len(ids) > 100

    p = run_cli("--store", str(store), "check", timeout=180)
    assert p.returncode == 1 and "lc-arch-001" in p.stdout and problem in p.stdout


@pytest.mark.model
def test_hand_edited_entry_read_directly_is_one_line(demo_store, tmp_path):
    from memlens.store import db

    store = tmp_path / "demo.db"
    shutil.copy(demo_store, store)
    conn = db.connect(store, create=False)
    conn.execute("UPDATE entries SET meta = '{bad json' WHERE id = 'lc-arch-001'")
    conn.execute("UPDATE audit SET detail = '{bad' WHERE seq = (SELECT max(seq) FROM audit)")
    conn.close()
    p = run_cli(
        "--store", str(store), "explain", "callbacks", "--id", "lc-arch-001", "--active-wing", "lifecore_ros2", timeout=120
    )
    assert p.returncode == 2 and "lc-arch-001" in one_line_error(p) and "damaged" in p.stderr
    p = run_cli("--store", str(store), "stats", "--retrievals", timeout=120)
    assert p.returncode == 0, p.stderr


def test_hand_edited_audit_and_retrieval_rows_do_not_break_readers(mem):
    e = mem.add("Callbacks must not block.", wing="w")
    mem.search("callbacks", active_wing="w", use_cache=False)
    mem.search("block", active_wing="w", use_cache=False)
    conn = mem.conn
    conn.execute("UPDATE audit SET after = '{bad' WHERE action = 'add'")
    conn.execute("UPDATE audit SET detail = '[1]' WHERE seq = (SELECT min(seq) FROM audit WHERE action = 'retrieval')")
    history = mem.audit(e.id)
    assert history[0]["after"] is None and history[0]["damaged"] == ["after"]
    assert len(mem.retrievals()) == 1  # the undecodable one is left out


def test_damaged_header_schema_version_is_corruption_not_a_crash(mem, store_path):
    mem.add("Callbacks must not block.", wing="w")
    mem.close()
    with open(store_path, "r+b") as f:
        f.seek(60)
        f.write(b"\xa5\xa5\xa5\xa5")
    from memlens import Memory
    from memlens.errors import StoreCorruptError

    with pytest.raises(StoreCorruptError, match="schema version"):
        bounded(lambda: Memory.open(store_path, settings=mem.settings, embedder=mem._embedder))


@pytest.mark.model
def test_context_falls_back_to_the_workspace_when_the_store_is_damaged(demo_store, tmp_path):
    """An agent keeps working: damage met mid-search is treated like an unreachable store."""
    bad = damaged_copy(demo_store, tmp_path, "vec0 chunk table")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("Callbacks must never block the executor.\n")
    p = run_cli("--store", str(bad), "context", "callbacks blocking", "--active-wing", "lifecore_ros2",
                "--workspace", str(workspace), timeout=120)
    assert p.returncode == 0, p.stderr
    assert "is corrupt" in one_line_error(p) and "falling back" in p.stderr
    assert "degraded" in p.stdout and "README.md" in p.stdout


def test_check_finds_indexes_out_of_step_with_the_entries(mem, store_path, tmp_path):
    """Rows missing from the FTS5 index or the vector table, and filter columns that differ, are findings."""
    from memlens.store.check import check_store
    from memlens.store.salvage import salvage

    entries = [mem.add(f"Rule {i}: callbacks must not block the executor.", wing=f"w{i % 3}") for i in range(30)]
    assert bounded(lambda: check_store(store_path))["ok"]
    conn = mem.conn
    rowid = lambda e: conn.execute("SELECT rowid FROM entries WHERE id = ?", (e.id,)).fetchone()[0]  # noqa: E731
    r1, r2, r3 = rowid(entries[1]), rowid(entries[2]), rowid(entries[3])
    conn.execute(
        "INSERT INTO entries_fts(entries_fts, rowid, title, text)"
        " SELECT 'delete', rowid, title, text FROM entries WHERE rowid = ?",
        (r1,),
    )
    conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (r2,))
    conn.execute("UPDATE entries_vec SET status = 'deprecated' WHERE rowid = ?", (r3,))
    mem.close()

    report = bounded(lambda: check_store(store_path))
    assert not report["ok"]
    lines = [(f["area"], f["rowid"], f["problem"]) for f in report["findings"]]
    assert ("fts", r1, "entry is not in the FTS5 index") in lines
    assert any(a == "fts" and "integrity-check" in p for a, _, p in lines)
    assert ("vectors", r2, "entry is not in the vector table") in lines
    assert any(a == "vectors" and r == r3 and "differ" in p for a, r, p in lines)
    assert any(a == "vectors" and "per wing" in p for a, _, p in lines)

    # salvage rebuilds the indexes through the normal write path: the new store checks clean
    new = tmp_path / "new.db"
    out = bounded(lambda: salvage(store_path, new, settings=mem.settings, embedder=mem._embedder))
    assert out["saved"] == 30 and out["lost"] == 0 and out["embedded"] == 1
    assert bounded(lambda: check_store(new))["ok"]


def test_check_refuses_a_file_that_is_not_a_store(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    p = run_cli("--store", str(text), "check", timeout=60)
    assert p.returncode == 2 and "not a memlens store" in one_line_error(p)


def test_another_programs_database_is_refused_and_left_byte_for_byte(tmp_path):
    """A SQLite file of another program, named by mistake: every command refuses it before changing anything (its
    journal mode was switched to WAL, which that program's readers may not be able to use)."""
    import os
    import sqlite3

    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE foo(x)")
        conn.execute("INSERT INTO foo VALUES (1)")
    conn.close()
    before = path.read_bytes()
    for args in (("stats",), ("export",), ("search", "anything"), ("add", "a rule", "--wing", "w"), ("check",)):
        p = run_cli("--store", str(path), *args, timeout=120)
        assert p.returncode == 2 and "a SQLite database but not a memlens store" in one_line_error(p), args
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["other.db"]


def test_check_of_a_store_another_process_holds_says_so_and_finds_no_damage(mem, store_path):
    """Another process holding the store's lock made every check fail and read as damage (with a hint to salvage):
    it is the one-line "locked" error of the other commands now, and nothing is called a problem."""
    import sqlite3

    mem.add("A rule about callbacks.", wing="w")
    mem.close()
    holder = sqlite3.connect(store_path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("SELECT count(*) FROM sqlite_master").fetchone()
    try:
        p = run_cli("--store", str(store_path), "check", timeout=120)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert p.returncode == 2 and "is locked by another process" in one_line_error(p)
    assert "problem" not in p.stdout + p.stderr and "salvage" not in p.stdout + p.stderr
    p = run_cli("--store", str(store_path), "check", timeout=120)
    assert p.returncode == 0 and ": ok (" in p.stdout


@pytest.mark.parametrize("damage", ["schema version zeroed", "a column renamed to no word of a lock"])
def test_a_store_damaged_so_is_still_checked_and_salvaged(mem, store_path, tmp_path, damage):
    """Neither damage may read as another program's database (the schema version gone, the tables there) nor as a
    lock (an error naming the column ``blocked_at`` holds the word "locked"): check names it, salvage saves all."""
    import sqlite3

    from memlens.store.check import check_store
    from memlens.store.salvage import salvage

    for i in range(5):
        mem.add(f"Rule {i}.", wing="w")
    mem.close()
    if damage.startswith("schema"):
        with open(store_path, "r+b") as f:
            f.seek(60)
            f.write(b"\0" * 4)
        said = "schema version 0"
    else:
        with sqlite3.connect(store_path) as conn:
            conn.execute("ALTER TABLE blockers RENAME COLUMN blocked_at TO since")
        conn.close()
        said = "no such column: blocked_at"
    report = bounded(lambda: check_store(store_path))
    assert not report["ok"] and any(said in f["problem"] for f in report["findings"]), report["findings"]
    out = bounded(lambda: salvage(store_path, tmp_path / "new.db", settings=mem.settings, embedder=mem._embedder))
    assert out["saved"] == 5 and out["lost"] == 0


def test_damaged_magic_is_corruption_and_salvage_repairs_the_header(mem, store_path, tmp_path):
    for i in range(5):
        mem.add(f"Rule {i}.", wing="w")
    mem.close()
    with open(store_path, "r+b") as f:
        f.write(b"\x00" * 16)
    p = run_cli("--store", str(store_path), "stats", timeout=60)
    assert p.returncode == 2 and "is corrupt" in one_line_error(p)
    from memlens.store.salvage import salvage

    out = bounded(lambda: salvage(store_path, tmp_path / "new.db", settings=mem.settings, embedder=mem._embedder))
    assert out["saved"] == 5 and out["lost"] == 0


@pytest.mark.model
def test_truncated_store_is_one_line_and_salvage_keeps_the_readable_part(demo_store, tmp_path):
    bad = tmp_path / "bad.db"
    shutil.copy(demo_store, bad)
    with open(bad, "r+b") as f:
        f.truncate(bad.stat().st_size * 2 // 5)
    before = digest(bad)
    for args in (("stats",), ("search", "callbacks"), ("add", "a rule", "--wing", "python")):
        p = run_cli("--store", str(bad), *args, timeout=120)
        assert p.returncode == 2 and "is corrupt" in one_line_error(p), args
    new = tmp_path / "new.db"
    p = run_cli("--store", str(bad), "salvage", str(new), "--json", timeout=300)
    assert p.returncode == 1, p.stderr  # some entries are lost, and the exit code says so
    out = json.loads(p.stdout)
    assert out["saved"] > 0 and out["lost"] > 0
    assert run_cli("--store", str(new), "check", timeout=180).returncode == 0
    assert digest(bad) == before


def test_hand_edited_store_meta_is_one_line(mem, store_path):
    from memlens import Memory
    from memlens.errors import CorruptRowError
    from memlens.store.check import check_store

    mem.add("Callbacks must not block.", wing="w")
    mem.conn.execute("UPDATE store_meta SET value = 'abc' WHERE key = 'dim'")
    mem.close()
    with Memory.open(store_path, settings=mem.settings, embedder=mem._embedder) as m:
        with pytest.raises(CorruptRowError, match="'abc' as the vector size"):
            m.stats()
    report = bounded(lambda: check_store(store_path))
    assert any(f["area"] == "schema" and "dim = 'abc'" in f["problem"] for f in report["findings"])


def test_hand_edited_turn_meta_does_not_break_the_conversation_profile(mem):
    """The conversation profile reads meta in SQL (json_extract): a hand-edited turn is left out, nothing fails."""
    from memlens.store import corruption

    for i in range(4):
        mem.add(f"we talked about callbacks blocking, turn {i}", wing="w", kind="turn", meta={"session_id": "s1"},
                created_at=f"2026-01-02T03:04:0{i}Z")
    mem.conn.execute("UPDATE entries SET meta = '{bad json' WHERE text LIKE '%turn 1'")
    bundle = bounded(lambda: mem.search("callbacks blocking", active_wing="w", profile="conversation", use_cache=False))
    texts = [r.entry.text for r in bundle.results]
    assert texts and not any(t.endswith("turn 1") for t in texts)
    assert any("is damaged" in n and "meta is not valid JSON" in n for n in bundle.trace.notes)
    assert corruption.seen(mem.path) is None  # a bad value is not a damaged page: writes still work
    mem.add("still writable", wing="w")


@pytest.mark.parametrize("edit", ["UPDATE entries_vec_rowids SET chunk_offset = 99999 WHERE rowid = 3",
                                  "UPDATE entries_vec_vector_chunks00 SET vectors = zeroblob(10)"])
def test_in_process_vector_index_reports_inconsistent_vector_tables(mem, edit):
    """The in-process index reads sqlite-vec's tables itself: damage there is the same one line."""
    from memlens.errors import StoreCorruptError

    for i in range(5):
        mem.add(f"Rule {i}: callbacks must not block.", wing="w")
    mem.conn.execute(edit)
    with pytest.raises(StoreCorruptError, match="is corrupt .*vectors of wing 'w'"):
        bounded(mem.warm_index)
    with pytest.raises(StoreCorruptError, match="writes are refused"):
        bounded(lambda: mem.add("one more", wing="w"))


def test_a_huge_rowid_from_a_damaged_table_does_not_make_check_or_salvage_crawl(mem, store_path, tmp_path):
    """Bounds read from damaged tables can be anything: reading around damage must not walk every key up to them."""
    from memlens.store.check import check_store
    from memlens.store.salvage import salvage

    for i in range(20):
        mem.add(f"Rule {i}: callbacks must not block.", wing="w")
    mem.conn.execute("UPDATE entries_vec_rowids SET rowid = 4611686018427387904 WHERE rowid = 3")
    mem.conn.execute("UPDATE audit SET seq = 4611686018427387904 WHERE seq = 5")
    mem.close()
    report = bounded(lambda: check_store(store_path), timeout=60)
    assert not report["ok"]
    out = bounded(lambda: salvage(store_path, tmp_path / "new.db", settings=mem.settings, embedder=mem._embedder), timeout=60)
    assert out["saved"] == 20 and out["audit_rows"] == 20


def test_salvage_of_an_unrepairable_file_is_one_line_and_leaves_nothing(tmp_path):
    import tempfile

    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 3\x00" + bytes(random.Random(3).randrange(256) for _ in range(20000)))
    before = set(Path(tempfile.gettempdir()).glob("memlens-salvage-*"))
    p = run_cli("--store", str(bad), "salvage", str(tmp_path / "new.db"), timeout=60)
    assert p.returncode == 2 and "nothing can be salvaged" in one_line_error(p)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bad.db"]
    assert set(Path(tempfile.gettempdir()).glob("memlens-salvage-*")) == before


def test_sigterm_during_salvage_leaves_no_half_made_store(mem, store_path, tmp_path, real_embedder):
    import signal
    import subprocess
    import time

    from tests.conftest import MEMLENS

    for i in range(400):  # hashing vectors: the real model must embed them all again, which takes a while
        mem.add(f"entry number {i} about callbacks and executors", wing="w")
    mem.close()
    new = tmp_path / "new.db"
    proc = subprocess.Popen([MEMLENS, "--store", str(store_path), "salvage", str(new)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not new.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert new.exists() and proc.poll() is None, "salvage ended before the new store was made"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 143, err  # 128 + SIGTERM
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("new.db")) == []


def test_check_reports_a_zero_vector_and_salvage_embeds_it_again(mem, store_path, tmp_path):
    from memlens.store.check import check_store
    from memlens.store.salvage import salvage

    entries = [mem.add(f"Rule {i}: callbacks must not block.", wing="w") for i in range(3)]
    conn = mem.conn
    rowid = conn.execute("SELECT rowid FROM entries WHERE id = ?", (entries[1].id,)).fetchone()[0]
    conn.execute("UPDATE entries_vec SET embedding = ? WHERE rowid = ?", (bytes(4 * mem.dim), rowid))
    mem.close()
    report = bounded(lambda: check_store(store_path))
    assert not report["ok"]
    assert [(f["area"], f["rowid"]) for f in report["findings"] if "all zeros" in f["problem"]] == [("vectors", rowid)]
    new = tmp_path / "new.db"
    out = bounded(lambda: salvage(store_path, new, settings=mem.settings, embedder=mem._embedder))
    assert out["saved"] == 3 and out["embedded"] == 1
    assert bounded(lambda: check_store(new))["ok"]


def test_salvage_keeps_an_entry_that_overrides_itself_and_names_what_it_loses(mem, store_path, tmp_path):
    """Hand edits made an entry override itself and web text an invariant (check lists both): salvage dropped each
    whole entry, readable as it was, and reported them lost with no id. It keeps the first without the override
    (overrides_dropped) and the second as a note (demoted_to_note); what it cannot keep is named in lost_ids."""
    from memlens.store.check import check_store
    from memlens.store.salvage import salvage

    entries = [mem.add(f"Rule {i}: callbacks must not block.", wing="w") for i in range(3)]
    conn = mem.conn
    conn.execute("UPDATE entries SET overrides = id WHERE id = ?", (entries[1].id,))
    conn.execute("UPDATE entries SET type = 'invariant', kind = 'web' WHERE id = ?", (entries[2].id,))
    mem.close()
    assert not bounded(lambda: check_store(store_path))["ok"]
    new = tmp_path / "new.db"
    out = bounded(lambda: salvage(store_path, new, settings=mem.settings, embedder=mem._embedder))
    assert out["overrides_dropped"] == [entries[1].id]
    assert out["lost"] == 0 and out["lost_ids"] == [] and out["demoted_to_note"] == [entries[2].id]
    from memlens import Memory

    with Memory.open(new, settings=mem.settings, embedder=mem._embedder) as again:
        kept = again.get(entries[1].id)
        assert kept.overrides is None and kept.text == entries[1].text
        assert again.count() == 3 and again.get(entries[2].id).type.value == "note"
    assert bounded(lambda: check_store(new))["ok"]


def scatter(src: Path, dst: Path, seed: int, n: int = 5000) -> Path:
    """A copy of ``src`` with ``n`` bytes set to random values all over the file, except its schema's pages
    (with those hit, every command stops at the schema, which the cases above already cover)."""
    from memlens.store import db

    conn = db.connect(src, create=False)
    try:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        schema = {p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'sqlite_schema'")}
    finally:
        conn.close()
    data = bytearray(src.read_bytes())
    rnd = random.Random(seed)
    done = 0
    while done < n:
        at = rnd.randrange(100, len(data))
        if at // size + 1 not in schema:
            data[at] = rnd.randrange(256)
            done += 1
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.model
@pytest.mark.parametrize("seed", [1, 12])
def test_bytes_changed_all_over_the_file_are_one_line_and_salvage_copies_the_rest(demo_store, tmp_path, seed):
    """Text that no longer decodes as UTF-8 is the same one-line corrupt-store error as any other damage,
    and salvage copies what reads back (an id seen twice, once in its row and once in the audit, is one entry)."""
    bad = scatter(demo_store, tmp_path / "bad.db", seed)
    before = digest(bad)
    failed = 0
    for args in (["search", "callbacks blocking"], ["stats"], ["export"], ["add", "a new rule", "--wing", "python"]):
        p = run_cli("--store", str(bad), *args, timeout=120)
        assert p.returncode in (0, 2) and "Traceback" not in p.stderr, (args, p.stderr[-3000:])
        if p.returncode == 2:
            failed += 1
            assert "is corrupt" in one_line_error(p), (args, p.stderr)
            assert digest(bad) == before, args  # a command that met the damage wrote nothing
        before = digest(bad)
    assert failed >= 3
    new = tmp_path / "new.db"
    p = run_cli("--store", str(bad), "salvage", str(new), "--json", timeout=600)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["saved"] + out["recovered_from_audit"] > 100, out
    assert run_cli("--store", str(new), "check", timeout=180).returncode == 0
    assert digest(bad) == before


@pytest.mark.model
def test_salvage_reads_vectors_without_sqlite_vec(demo_store, tmp_path, settings, real_embedder):
    """The vec0 table is never queried by salvage (sqlite-vec trusts sizes and offsets read from a damaged file):
    with its definition broken so that sqlite-vec refuses it, every vector is still read back and reused."""
    from memlens.store import db
    from memlens.store.salvage import salvage

    bad = tmp_path / "bad.db"
    shutil.copy(demo_store, bad)
    conn = db.connect(bad, create=False)
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'entries_vec'").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'entries_vec'", (sql.replace("float[384]", "bit[384]"),))
    conn.commit()
    conn.close()
    out = bounded(lambda: salvage(bad, tmp_path / "new.db", settings=settings, embedder=real_embedder), 300)
    assert out["saved"] == 167 and out["vectors_reused"] == 167 and out["embedded"] == 0, out


def test_salvage_embeds_again_a_vector_whose_bytes_changed(mem, store_path, tmp_path):
    from memlens.store.salvage import salvage

    entries = [mem.add(f"Rule {i}: callbacks must not block.", wing="w") for i in range(3)]
    conn = mem.conn
    rowid = conn.execute("SELECT rowid FROM entries WHERE id = ?", (entries[2].id,)).fetchone()[0]
    vec = bytearray(conn.execute("SELECT embedding FROM entries_vec WHERE rowid = ?", (rowid,)).fetchone()[0])
    vec[7] ^= 0x40  # one byte of one component: still finite, no longer of unit length
    conn.execute("UPDATE entries_vec SET embedding = ? WHERE rowid = ?", (bytes(vec), rowid))
    mem.close()
    out = bounded(lambda: salvage(store_path, tmp_path / "new.db", settings=mem.settings, embedder=mem._embedder))
    assert out["saved"] == 3 and out["vectors_reused"] == 2 and out["embedded"] == 1
