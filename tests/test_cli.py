"""The `memlens` command in fresh processes: contracts and one-line errors."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from .conftest import DEMO, MEMLENS, run_cli, snapshot_store


def one_line_error(proc, fragment):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("memlens: error: ")
    assert "Traceback" not in proc.stderr
    assert fragment in lines[0], lines[0]


@pytest.fixture
def demo_db(demo_store, tmp_path):
    path = tmp_path / "x.db"
    shutil.copy(demo_store, path)
    return path


@pytest.mark.model  # the command loads it
def test_import_then_search_json_with_the_real_model(tmp_path):
    db = tmp_path / "x.db"
    imp = run_cli("--store", str(db), "import", str(DEMO))
    assert imp.returncode == 0, imp.stderr
    assert "imported 167 entries" in imp.stderr
    out = run_cli("--store", str(db), "search", "wing=lifecore_ros2 callbacks blocking", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["results"][0]["id"] == "lc-arch-001"
    assert d["trace"]["wings_searched"] == ["lifecore_ros2"]
    assert d["trace"]["latency_ms"]["embed"] > 0
    assert d["trace"]["model"].startswith("all-MiniLM-L6-v2@53aa51172d14")


def test_store_option_after_subcommand_and_env(demo_db):
    a = run_cli("search", "--store", str(demo_db), "executor", "--json")
    b = run_cli("search", "executor", "--json", env={"MEMLENS_STORE": str(demo_db)})
    assert a.returncode == b.returncode == 0
    assert [r["id"] for r in json.loads(a.stdout)["results"]] == [r["id"] for r in json.loads(b.stdout)["results"]]


@pytest.mark.model  # the command loads it
def test_add_and_human_output(tmp_path):
    db = str(tmp_path / "x.db")
    add = run_cli("--store", db, "add", "Callbacks must not block.", "--wing", "p", "--type", "invariant", "--json")
    assert add.returncode == 0, add.stderr
    rec = json.loads(add.stdout)
    assert rec["type"] == "invariant" and rec["wing"] == "p"
    out = run_cli("--store", db, "search", "blocking callbacks", "--active-wing", "p")
    assert rec["id"] in out.stdout and "invariant" in out.stdout and "active_wing" in out.stdout


def test_batch_queries(demo_db, tmp_path):
    qf = tmp_path / "q.jsonl"
    qf.write_text(
        json.dumps({"id": "a", "query": "callbacks blocking", "active_wing": "lifecore_ros2", "k": 3}) + "\n"
        + json.dumps({"id": "b", "query": "pytest", "wings": ["python"], "k": 2}) + "\n"
    )
    out = run_cli("--store", str(demo_db), "search", "--queries", str(qf))
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in lines] == ["a", "b"]
    # k counts the ranked results; the active wing's invariants come on top of them (mandatory)
    assert len([r for r in lines[0]["results"] if "mandatory" not in r["flags"]]) == 3
    assert {"results", "trace"} <= set(lines[1])
    assert all(r["wing"] == "python" for r in lines[1]["results"])


@pytest.mark.model  # the command loads it
def test_batch_queries_from_stdin(demo_db):
    lines = json.dumps({"id": "a", "query": "pytest", "wings": ["python"], "k": 2}) + "\n"
    out = run_cli("--store", str(demo_db), "search", "--queries", "-", input=lines)
    assert out.returncode == 0, out.stderr
    got = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in got] == ["a"] and all(r["wing"] == "python" for r in got[0]["results"])
    bad = run_cli("--store", str(demo_db), "search", "--queries", "-", input=lines + '{"quer": 1}\n')
    one_line_error(bad, "stdin: line 2: query: required")
    assert bad.stdout == ""  # every line is checked before any search runs


def test_export_import_pipe_round_trip(demo_db, tmp_path):
    exp = run_cli("--store", str(demo_db), "export", "--with-vectors")
    assert exp.returncode == 0
    new = str(tmp_path / "copy.db")
    imp = run_cli("--store", new, "import", "-", input=exp.stdout)
    assert imp.returncode == 0, imp.stderr
    assert "(0 embedded, 167 vectors reused)" in imp.stderr
    assert run_cli("--store", new, "export", "--with-vectors").stdout == exp.stdout


def test_stats(demo_db):
    out = run_cli("--store", str(demo_db), "stats", "--json")
    st = json.loads(out.stdout)
    assert st["entries"] == 167 and st["per_wing"]["lifecore_ros2"] == 77
    assert set(st["per_status"]) == {"active", "under_review", "deprecated"}
    assert st["model"].startswith("all-MiniLM-L6-v2@") and st["size_bytes"] > 0
    assert st["read_only"] is False


@pytest.mark.model  # the demo search embeds its query
def test_demo_on_a_store_that_holds_entries_says_it_loads_nothing(demo_db):
    before = snapshot_store(demo_db)
    out = run_cli("--store", str(demo_db), "demo")
    assert out.returncode == 0, out.stderr
    assert f"store {demo_db} already holds 167 entries" in out.stderr and "nothing was loaded" in out.stderr
    assert "loading the demo memory" not in out.stderr and "lc-arch" in out.stdout  # the search ran on what it holds
    assert snapshot_store(demo_db)[0] == before[0]  # its entries as they were


def test_an_edit_that_changes_nothing_says_so_and_writes_nothing(demo_db):
    before = snapshot_store(demo_db)
    out = run_cli("--store", str(demo_db), "deprecate", "lc-arch-001")
    assert out.returncode == 0 and out.stdout == "deprecate: lc-arch-001\n", out.stderr
    written = snapshot_store(demo_db)
    again = run_cli("--store", str(demo_db), "deprecate", "lc-arch-001")
    assert again.stdout == "deprecate: lc-arch-001 (nothing changed: it already had these values)\n", again.stderr
    assert snapshot_store(demo_db) == written != before  # no audit row, no new updated_at


def test_delete_names_the_entries_that_overrode_it_and_the_store_stays_sound(demo_db):
    dry = run_cli("--store", str(demo_db), "delete", "ros2-conv-005", "--dry-run")
    assert dry.returncode == 0 and "  lc-conv-010 overrides it and would override nothing\n" in dry.stdout, dry.stderr
    out = run_cli("--store", str(demo_db), "delete", "ros2-conv-005")
    assert out.stdout == "delete: ros2-conv-005\n  lc-conv-010 overrode it and now overrides nothing\n", out.stderr
    assert run_cli("--store", str(demo_db), "check").returncode == 0


def test_delete_json_says_the_entry_was_deleted_and_which_overrides_it_released(demo_db):
    """`delete --json` printed the entry exactly as `deprecate --json` prints a live one: nothing told a program it was
    gone. Its keys stay; `deleted` and `released` are added, and only to a deletion's output."""
    exported = run_cli("--store", str(demo_db), "export").stdout.splitlines()
    was = next(r for r in map(json.loads, exported) if r["id"] == "ros2-conv-005")
    out = run_cli("--store", str(demo_db), "delete", "ros2-conv-005", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert list(got)[:len(was)] == list(was) and got == {**was, "deleted": True, "released": ["lc-conv-010"]}
    kept = json.loads(run_cli("--store", str(demo_db), "deprecate", "lc-conv-010", "--json").stdout)
    assert kept["id"] == "lc-conv-010" and "deleted" not in kept and "released" not in kept


def test_restore_refuses_an_entry_that_is_not_deprecated(demo_db):
    waiting = run_cli("--store", str(demo_db), "export")
    entry = next(json.loads(line) for line in waiting.stdout.splitlines() if '"under_review"' in line)
    before = snapshot_store(demo_db)
    out = run_cli("--store", str(demo_db), "restore", entry["id"])
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert f"restore: {entry['id']} is under_review, not deprecated (memlens review accept {entry['id']}" in out.stderr
    assert snapshot_store(demo_db) == before


def test_access_json_holds_the_lists_asked_for(demo_db):
    got = {flags: json.loads(run_cli("--store", str(demo_db), "access", *flags, "--json").stdout)
           for flags in (("--never",), ("--always",), ("--never", "--always"))}
    assert set(got[("--never",)]) == {"never", "entries"} and set(got[("--always",)]) == {"always", "entries"}
    assert got[("--never", "--always")] == {**got[("--never",)], **got[("--always",)]}
    both = run_cli("--store", str(demo_db), "access", "lc-arch-001", "--never")
    assert both.returncode == 2 and "access takes an entry ID or --never / --always, not both" in both.stderr


def test_empty_golden_list_says_so(demo_db):
    out = run_cli("--store", str(demo_db), "golden", "list")
    assert out.returncode == 0 and out.stdout == "" and "no golden queries yet" in out.stderr, out.stderr
    as_json = run_cli("--store", str(demo_db), "golden", "list", "--json")
    assert json.loads(as_json.stdout) == [] and as_json.stderr == ""


# -- bad input: one line, exit 2, store unchanged ----------------------------------------


def test_malformed_jsonl(demo_db, tmp_path):
    before = snapshot_store(demo_db)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"wing": "w", "text": "ok"}\n{"wing": "w", "text": \n')
    one_line_error(run_cli("--store", str(demo_db), "import", str(bad)), "line 2: invalid JSON")
    assert snapshot_store(demo_db) == before


def test_an_unknown_option_points_at_the_subcommands_help(demo_db):
    one_line_error(run_cli("--store", str(demo_db), "task", "complete", "t1", "--summary", "x"),
                   "unrecognized arguments: --summary x (see memlens task complete --help)")
    one_line_error(run_cli("--store", str(demo_db), "golden", "list", "extra"),
                   "unrecognized arguments: extra (see memlens golden list --help)")


def test_unknown_scope_key(demo_db):
    before = snapshot_store(demo_db)
    one_line_error(run_cli("--store", str(demo_db), "search", "wings=ros2 callbacks"), "unknown key 'wings'")
    assert snapshot_store(demo_db) == before


def test_not_a_sqlite_file(tmp_path):
    junk = tmp_path / "notes.db"
    junk.write_bytes(b"this is a text file, not a database\n" * 200)
    before = junk.read_bytes()
    for args in (["stats"], ["search", "x"], ["add", "x", "--wing", "w"]):
        one_line_error(run_cli("--store", str(junk), *args), "is not a memlens store")
    assert junk.read_bytes() == before
    assert not (tmp_path / "notes.db-wal").exists()


def test_store_is_a_directory(tmp_path):
    one_line_error(run_cli("--store", str(tmp_path), "stats"), "is a directory")


LOCKER = """
import sys, time
from memlens.store import db
conn = db.connect(__import__('pathlib').Path(sys.argv[1]))
conn.execute('BEGIN IMMEDIATE')
conn.execute("UPDATE store_meta SET value = value WHERE key = 'model'")
print('locked', flush=True)
time.sleep(30)
"""


def test_store_locked_by_another_writer(demo_db):
    before = snapshot_store(demo_db)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(demo_db)], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        env = {"MEMLENS_STORAGE__BUSY_TIMEOUT_MS": "300"}
        t = time.monotonic()
        proc = run_cli("--store", str(demo_db), "add", "new fact", "--wing", "w", env=env)
        one_line_error(proc, "is locked by another writer")
        assert time.monotonic() - t < 20
        # readers are not blocked by a writer (WAL)
        assert run_cli("--store", str(demo_db), "stats", env=env).returncode == 0
    finally:
        locker.kill()
        locker.wait()
    assert snapshot_store(demo_db) == before


def _without_root_powers(*args):
    """Run the CLI without root's power to ignore file permissions.

    As root, the capabilities that bypass permission checks are dropped from
    the bounding set (util-linux ``setpriv``); as anyone else, nothing to do.
    """
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot make a location read-only")
        caps = "-dac_override,-dac_read_search,-fowner"
        prefix = [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]
    return subprocess.run([*prefix, MEMLENS, *args], capture_output=True, text=True, timeout=120)


def test_read_only_location(tmp_path, demo_store):
    ro = tmp_path / "ro"
    ro.mkdir()
    existing = ro / "demo.db"
    shutil.copy(demo_store, existing)
    os.chmod(ro, 0o555)
    before = snapshot_store(existing)
    try:
        one_line_error(_without_root_powers("--store", str(ro / "new.db"), "add", "x", "--wing", "w"), "cannot create store")
        one_line_error(
            _without_root_powers("--store", str(ro / "sub" / "new.db"), "add", "x", "--wing", "w"), "cannot create store"
        )
        one_line_error(_without_root_powers("--store", str(ro / "new.db"), "stats"), "no store at")  # a reader creates nothing
        # an existing store in a read-only place (a shared snapshot, a read-only mount) is read as it is
        query = ("search", "wing=lifecore_ros2 callbacks blocking", "--json")
        got = _without_root_powers("--store", str(existing), *query)
        assert got.returncode == 0, got.stderr
        writable = tmp_path / "rw.db"  # a copy: a search logs a retrieval, and demo_store is shared by the session
        shutil.copy(demo_store, writable)
        want = run_cli("--store", str(writable), *query)
        assert [r["id"] for r in json.loads(got.stdout)["results"]] == [r["id"] for r in json.loads(want.stdout)["results"]]
        stats = _without_root_powers("--store", str(existing), "stats", "--json")
        assert stats.returncode == 0, stats.stderr
        assert json.loads(stats.stdout)["entries"] == 167 and json.loads(stats.stdout)["read_only"] is True
        assert "read-only" in _without_root_powers("--store", str(existing), "stats").stdout.splitlines()[0]
        # ... and writing to it fails cleanly
        one_line_error(_without_root_powers("--store", str(existing), "add", "x", "--wing", "w"), "is read-only")
        assert sorted(p.name for p in ro.iterdir()) == ["demo.db"]  # no -wal / -shm left beside it
        # a store the user cannot even reach
        os.chmod(ro, 0o000)
        one_line_error(_without_root_powers("--store", str(existing), "stats"), "cannot access store")
    finally:
        os.chmod(ro, 0o755)
    assert snapshot_store(existing) == before
    assert not (ro / "new.db").exists()


def test_read_only_location_with_unsaved_wal(tmp_path, demo_store):
    """A store whose last writer left committed changes in -wal cannot be read where -shm cannot be made:
    reading only the main file would silently miss them, so it is refused."""
    from memlens.store import db

    work, ro = tmp_path / "work", tmp_path / "ro"
    work.mkdir()
    ro.mkdir()
    shutil.copy(demo_store, work / "demo.db")
    conn = db.connect(work / "demo.db")
    try:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("INSERT OR REPLACE INTO store_meta(key, value) VALUES ('probe', 'unsaved')")
        for name in ("demo.db", "demo.db-wal"):  # what a crash (or a copy taken while open) leaves behind
            shutil.copy(work / name, ro / name)
    finally:
        conn.close()
    assert (ro / "demo.db-wal").stat().st_size > 0
    os.chmod(ro, 0o555)
    try:
        one_line_error(_without_root_powers("--store", str(ro / "demo.db"), "stats"), "last changes are still in demo.db-wal")
    finally:
        os.chmod(ro, 0o755)
    assert sorted(p.name for p in ro.iterdir()) == ["demo.db", "demo.db-wal"]


def test_missing_model(demo_db, tmp_path):
    before = snapshot_store(demo_db)
    env = {"MEMLENS_EMBEDDING__MODEL": str(tmp_path / "no-model")}
    one_line_error(run_cli("--store", str(demo_db), "add", "x", "--wing", "w", env=env), "embedding model not found")
    one_line_error(run_cli("--store", str(demo_db), "search", "callbacks", env=env), "embedding model not found")
    assert snapshot_store(demo_db) == before


def test_corrupted_model(demo_db, tmp_path, settings):
    from memlens.config import BUNDLED_SHA256
    from memlens.embed import resolve_model

    copy = tmp_path / "model"
    shutil.copytree(resolve_model(settings.embedding).path, copy)
    with open(copy / "model.safetensors", "r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xde\xad\xbe\xef")
    before = snapshot_store(demo_db)
    env = {"MEMLENS_EMBEDDING__MODEL": str(copy), "MEMLENS_EMBEDDING__SHA256": BUNDLED_SHA256}
    one_line_error(run_cli("--store", str(demo_db), "add", "x", "--wing", "w", env=env), "corrupted")
    assert snapshot_store(demo_db) == before


def test_bad_configuration_is_one_line(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[search]\nk = 'many'\n")
    one_line_error(run_cli("--store", str(tmp_path / "x.db"), "stats", env={"MEMLENS_CONFIG": str(cfg)}), "configuration")
    cfg.write_text("this is = not [toml\n")
    one_line_error(run_cli("--store", str(tmp_path / "x.db"), "stats", env={"MEMLENS_CONFIG": str(cfg)}), "configuration")


def test_search_without_query(tmp_path):
    one_line_error(run_cli("--store", str(tmp_path / "x.db"), "search"), "needs a QUERY")


def test_export_unknown_wing(demo_db):
    one_line_error(run_cli("--store", str(demo_db), "export", "--wing", "nope"), "unknown wing 'nope'")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["export"], ["stats"], ["search", "callbacks", "--json"]], ids=" ".join)
def test_output_that_cannot_be_written_is_one_line(demo_db, args):
    with open("/dev/full", "w") as full:  # every write fails with "no space left on device"
        proc = subprocess.run([MEMLENS, "--store", str(demo_db), *args], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["memlens: error: cannot write the output: No space left on device"]


def test_a_reader_that_leaves_early_cuts_the_output_silently_and_the_status_says_so(demo_db):
    """`memlens export | head -1`: no traceback, and not 0 (the command did not finish: a `check` piped into `head`
    must not pass as clean); 141 is what a program stopped by SIGPIPE returns."""
    proc = subprocess.Popen([MEMLENS, "--store", str(demo_db), "export", "--with-vectors"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # ~450 kB: far more than a pipe holds
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader leaves after one line
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert json.loads(first)["id"] and err == b""


@pytest.mark.parametrize("args, says", [
    (["search", "callbacks", "--queries", "q.jsonl"], "give a QUERY or --queries FILE.jsonl, not both"),
    (["search", "callbacks", "--json", "--format", "text"], "--json and --format text ask for two outputs"),
    (["replay", "--last", "1", "--json", "--format", "text"], "--json and --format text ask for two outputs"),
    (["replay", "--last", "1", "--json", "--format", "openinference"],
     "--json and --format openinference ask for two outputs"),
    (["review", "accept", "--clean", "--supersedes", "lc-arch-001"], "--clean accepts the items as they are"),
    (["review", "accept", "--clean", "lc-arch-001"], "accept takes entry IDs or --clean"),
    (["index", ".", "--wing", "w", "--deadline", "0"], "--deadline must be more than 0 and at most 86400 seconds, got 0"),
], ids=lambda x: x[1] if isinstance(x, list) else "")
def test_arguments_that_contradict_each_other_are_one_line_errors_not_silently_dropped(demo_db, args, says):
    before = snapshot_store(demo_db)
    one_line_error(run_cli("--store", str(demo_db), *args), says)
    assert snapshot_store(demo_db) == before


def test_an_id_that_starts_with_a_dash_is_told_where_to_go(mem, capsys, monkeypatch):
    """An id such as '-dash' is valid (import takes it), but argparse reads it as an option and then said only
    that ID or FIELD=VALUE was missing: the error now says the id goes after --."""
    from memlens import embed
    from memlens.cli.main import main

    monkeypatch.setattr(embed, "make_embedder", lambda *a, **k: embed.HashEmbedder())
    mem.add("id test", wing="w", id="-dash")
    path = str(mem.path)
    mem.close()
    for args, missing in ((["delete", "-dash"], "ID"), (["edit", "-dash", "title=x"], "FIELD=VALUE")):
        with pytest.raises(SystemExit) as exc:  # argparse's errors exit
            main(["--store", path, *args])
        assert exc.value.code == 2 and capsys.readouterr().err == (
            f"memlens: error: the following arguments are required: {missing}; '-dash' was read as an option: an ID "
            f"that starts with '-' goes after --, as in memlens {args[0]} -- -dash (see memlens {args[0]} --help)\n")
    with pytest.raises(SystemExit):
        main(["--store", path, "delete"])
    assert "read as an option" not in capsys.readouterr().err
    assert main(["--store", path, "edit", "--", "-dash", "title=x"]) == 0  # as the error says
    capsys.readouterr()
    assert main(["--store", path, "export"]) == 0 and json.loads(capsys.readouterr().out)["title"] == "x"


def test_a_path_under_an_unknown_users_home_is_one_line(tmp_path):
    """``~name/...`` for a user this machine does not know: pathlib raises a RuntimeError (a traceback); each way a path
    comes in says which part it cannot expand, in one line."""
    ghost = "~memlens-no-such-user-7f3a"
    cases = [(["--store", f"{ghost}/x.db", "stats"], {}), (["stats"], {"MEMLENS_STORE": f"{ghost}/x.db"}),
             (["--store", str(tmp_path / "a.db"), "stats"], {"MEMLENS_CACHE_DIR": f"{ghost}/cache"}),
             (["copy", f"{ghost}/a.db", str(tmp_path / "b.db")], {})]
    for args, env in cases:
        out = run_cli(*args, env=env)
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("memlens: error: "), out.stderr
        assert f"cannot expand {ghost}: no such user" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "b.db").exists()


def test_json_nested_deeper_than_the_parser_goes_is_one_line(tmp_path):
    """JSON nested thousands deep in an edit's meta, in a MEMLENS_* variable or in replay's --set ended in a
    RecursionError traceback (the import of such a line already said "nested too deeply"); the store is unchanged."""
    store = tmp_path / "deep.db"
    added = run_cli("--store", str(store), "add", "Callbacks must not block.", "--wing", "w", "--json")
    assert added.returncode == 0, added.stderr
    entry_id = json.loads(added.stdout)["id"]
    deep = '{"a":' + "[" * 3000 + "]" * 3000 + "}"
    before = snapshot_store(store)
    for args, env in [(["edit", entry_id, f"meta={deep}"], {}), (["edit", entry_id, f"meta={deep}", "--dry-run"], {}),
                      (["search", "callbacks"], {"MEMLENS_RETRIEVAL__WEIGHTS": deep}),
                      (["replay", "--last", "1", "--set", f"retrieval.weights={deep}"], {})]:
        out = run_cli("--store", str(store), *args, env=env)
        assert out.returncode == 2 and "nested too deeply" in out.stderr, (args[0], out.stderr[-300:])
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert snapshot_store(store) == before
