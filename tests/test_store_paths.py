"""Store paths: a regular file or nothing; readers create nothing; what memlens creates is owner-only."""

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from memlens import Memory
from memlens.errors import StoreError
from memlens.store import db

from .conftest import bounded, run_cli, snapshot_store


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask022():
    old = os.umask(0o022)  # the usual default: what memlens creates must not depend on it
    try:
        yield
    finally:
        os.umask(old)


def _odd_paths(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    sock_path = tmp_path / "sock.db"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.close()
    links = {}
    for name, target in (("to-null.db", "/dev/null"), ("to-folder.db", folder), ("to-fifo.db", fifo)):
        (tmp_path / name).symlink_to(target)
        links[name] = tmp_path / name
    return {
        "device": (Path("/dev/null"), "character device"),
        "fifo": (fifo, "FIFO"),
        "directory": (folder, "is a directory"),
        "socket": (sock_path, "socket"),
        "link to a device": (links["to-null.db"], "character device"),
        "link to a directory": (links["to-folder.db"], "is a directory"),
        "link to a fifo": (links["to-fifo.db"], "FIFO"),
    }


def test_only_a_regular_file_can_be_a_store(tmp_path):
    """Refused before SQLite sees them: no hang on a FIFO, no -journal beside /dev/null, the real reason named."""
    paths = _odd_paths(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for what, (path, fragment) in paths.items():
        for create in (True, False):
            with pytest.raises(StoreError, match=fragment) as exc:
                bounded(lambda: db.connect(path, create=create))  # noqa: B023 (called at once, in this iteration)
            assert str(path) in str(exc.value), what
    assert not os.path.lexists("/dev/null-journal") and not os.path.lexists("/dev/null-wal")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created beside any of them
    assert sorted(os.listdir(tmp_path / "folder.db")) == []


def test_cli_refuses_odd_store_paths_with_one_line(tmp_path):
    paths = _odd_paths(tmp_path)
    for what in ("device", "fifo", "link to a directory"):
        path, fragment = paths[what]
        for args in (["stats"], ["add", "x", "--wing", "w"], ["search", "x"]):
            proc = run_cli("--store", str(path), *args, timeout=60)  # a FIFO opened by SQLite would block forever
            assert proc.returncode == 2, (what, args, proc.stderr)
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("memlens: error: ") and fragment in lines[0], proc.stderr
            assert str(path) in lines[0]
    assert not os.path.lexists("/dev/null-journal")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(("-journal", "-wal", "-shm"))] == []


READ_COMMANDS = [
    ["stats"],
    ["stats", "--retrievals"],
    ["search", "callbacks"],
    ["explain", "callbacks", "--id", "x"],
    ["export"],
    ["tasks"],
    ["task", "unblock", "t1"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a))
def test_read_commands_do_not_create_a_store(tmp_path, args):
    path = tmp_path / "sub" / "none.db"
    proc = run_cli("--store", str(path), *args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"no store at {path}" in lines[0], proc.stderr
    assert not (tmp_path / "sub").exists()


@pytest.mark.parametrize("args", [["stats"], ["export"], ["search", "callbacks"]], ids=lambda a: " ".join(a))
def test_read_commands_leave_an_empty_file_empty(tmp_path, args):
    """A 0-byte file is not a store: SQLite would make it one, writing the schema into it."""
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    proc = run_cli("--store", str(path), *args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"memlens: error: store path {path} is an empty file, not a store "
                                                "(memlens add, import or demo make one there)"]
    assert path.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_an_empty_store_path_is_one_line(tmp_path):
    proc = run_cli("--store", "", "stats", timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["memlens: error: the store path is empty: give a file path or a "
                                                "postgresql:// URI"]


def test_eval_and_context_and_profiles_on_a_missing_store(tmp_path):
    path = tmp_path / "none.db"
    q, qrels = tmp_path / "q.jsonl", tmp_path / "qrels.tsv"
    q.write_text('{"_id": "q1", "text": "callbacks"}\n')
    qrels.write_text("q1\tx\t1\n")
    proc = run_cli("--store", str(path), "eval", str(q), str(qrels), timeout=60)
    assert proc.returncode == 2 and f"no store at {path}" in proc.stderr
    # context keeps an agent working without its store: a warning naming the path, the workspace as source
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# Lifecycle\n\nLifecycle transitions must be fast.\n")
    ctx = run_cli(
        "--store", str(path), "context", "lifecycle transitions", "--active-wing", "p", "--workspace", str(ws), timeout=60
    )
    assert ctx.returncode == 0, ctx.stderr
    assert f"no store at {path}" in ctx.stderr and "transitions must be fast" in ctx.stdout
    # profiles come from the configuration: listed without a store
    prof = run_cli("--store", str(path), "profiles", timeout=60)
    assert prof.returncode == 0 and "academic" in prof.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.jsonl", "qrels.tsv", "ws"]


def test_memory_open_creates_unless_told_not_to(tmp_path, settings, hash_embedder):
    path = tmp_path / "new.db"
    with pytest.raises(StoreError, match=f"no store at {path}"):
        Memory.open(path, settings=settings, embedder=hash_embedder, create=False)
    assert not path.exists()
    with Memory.open(path, settings=settings, embedder=hash_embedder) as m:  # the API's contract: created
        m.add("x", wing="w")
    with Memory.open(path, settings=settings, embedder=hash_embedder, create=False) as m:
        assert m.count() == 1


def test_a_writer_still_creates_the_store(tmp_path):
    path = tmp_path / "a" / "new.db"
    proc = run_cli("--store", str(path), "task", "block", "t1", "--reason", "waiting", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert path.is_file()
    bad = tmp_path / "bad.json"
    bad.write_text('{"nothing": []}')
    other = tmp_path / "b" / "new.db"
    proc = run_cli("--store", str(other), "tasks", "import-state", str(bad), timeout=60)
    assert proc.returncode == 2 and "not a state file" in proc.stderr
    assert not (tmp_path / "b").exists()  # the file is checked before a store is created for it


def test_created_store_and_folders_are_owner_only(tmp_path, settings, hash_embedder, umask022):
    path = tmp_path / "a" / "b" / "c" / "store.db"
    with Memory.open(path, settings=settings, embedder=hash_embedder) as m:
        m.add("x", wing="w")
        assert m.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        for d in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
            assert mode(d) == 0o700, d
        assert mode(path) == 0o600
        for side in ("-wal", "-shm"):
            assert mode(Path(f"{path}{side}")) == 0o600, side


def test_store_created_through_a_dangling_symlink_is_owner_only(tmp_path, settings, hash_embedder, umask022):
    link = tmp_path / "link.db"
    target = tmp_path / "elsewhere" / "real.db"
    link.symlink_to(target)
    with Memory.open(link, settings=settings, embedder=hash_embedder) as m:
        m.add("x", wing="w")
    assert link.is_symlink() and target.is_file()
    assert mode(target) == 0o600
    assert mode(target.parent) == 0o700
    for side in ("-wal", "-shm"):
        side_path = Path(f"{link}{side}")
        if side_path.exists():
            assert mode(side_path) == 0o600


def test_existing_folders_keep_their_mode(tmp_path, settings, hash_embedder, umask022):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with Memory.open(shared / "s.db", settings=settings, embedder=hash_embedder):
        pass
    assert mode(shared) == 0o755 and mode(shared / "s.db") == 0o600


class _CommitFails:
    """A connection whose COMMIT fails after SQLite already rolled back (an I/O error does that)."""

    def __init__(self, conn):
        self.conn = conn
        self.in_transaction = False

    def execute(self, sql, *args):
        if sql == "COMMIT":
            self.conn.execute("ROLLBACK")
            raise db.driver().OperationalError("disk I/O error")
        if sql == "ROLLBACK" and not self.conn.in_transaction:
            raise db.driver().OperationalError("cannot rollback - no transaction is active")
        return self.conn.execute(sql, *args)


def test_a_failed_commit_reports_its_own_error(tmp_path):
    conn = db.connect(tmp_path / "t.db")
    try:
        with pytest.raises(StoreError, match="disk I/O error"):
            with db.transaction(_CommitFails(conn), tmp_path / "t.db") as c:
                c.execute("CREATE TABLE t(x)")
        assert not conn.in_transaction
    finally:
        conn.close()


def test_snapshot_helper_does_not_create(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        snapshot_store(tmp_path / "none.db")
    assert not (tmp_path / "none.db").exists()


def _bad_jsonl(tmp_path: Path) -> Path:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a1", "wing": "w", "text": "fine"}\n{"id": "a2", "wing": "w"}\n')  # line 2: no text
    return bad


REFUSED_WRITES = [
    lambda tmp: ["add", "some text", "--wing", "bad wing!"],
    lambda tmp: ["task", "complete", "t1", "--intent", "i", "--at", "not a time"],
    lambda tmp: ["task", "block", "t1", "--reason", "r", "--at", "not a time"],
    lambda tmp: ["import", str(_bad_jsonl(tmp))],
]


@pytest.mark.parametrize("make_args", REFUSED_WRITES, ids=["add", "task complete --at", "task block --at", "import"])
def test_a_refused_write_leaves_no_new_store_behind(tmp_path, real_embedder, make_args):
    path = tmp_path / "sub" / "new.db"
    args = make_args(tmp_path)
    proc = run_cli("--store", str(path), *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "sub").exists(), sorted(p.name for p in (tmp_path / "sub").iterdir())
    # an existing store is never removed, even an empty one
    run_cli("--store", str(path), "task", "block", "t0", "--reason", "r", timeout=120)
    run_cli("--store", str(path), "task", "unblock", "t0", timeout=120)
    assert path.is_file()
    proc = run_cli("--store", str(path), *args, timeout=120)
    assert proc.returncode == 2 and path.is_file()


def test_an_interrupted_import_into_a_new_store_leaves_nothing(tmp_path, real_embedder):
    import signal
    import subprocess

    from .conftest import MEMLENS

    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)  # nobody writes: the import waits on it until told to stop
    path = tmp_path / "sub" / "new.db"
    proc = subprocess.Popen([MEMLENS, "--store", str(path), "import", str(fifo)], stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if path.exists():
                break
            threading.Event().wait(0.1)
        assert path.exists()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert not (tmp_path / "sub").exists()


def test_a_new_store_another_process_has_open_is_not_removed(tmp_path, settings, hash_embedder):
    from memlens.store.newstore import discard_if_unused

    path = tmp_path / "shared.db"
    with Memory.open(path, settings=settings, embedder=hash_embedder) as other:  # open, nothing written yet
        discard_if_unused(path)
        assert path.is_file()
        other.add("written after the other command failed", wing="w")
    discard_if_unused(path)  # not empty any more
    assert path.is_file()
    with Memory.open(path, settings=settings, embedder=hash_embedder, create=False) as m:
        assert m.count() == 1


def test_a_refused_write_to_an_odd_file_name_leaves_nothing(tmp_path, real_embedder):
    path = tmp_path / "a?b#c%20.db"  # characters a SQLite URI would read as a query, fragment or escape
    proc = run_cli("--store", str(path), "add", "some text", "--wing", "bad wing!", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_libpq_connection_string_is_refused_without_showing_it(tmp_path):
    """``dbname=team user=ops password=...`` (libpq's key=value form) was taken for a file name: a SQLite store named
    after the password, shown again by stats. Refused in one line that does not repeat it; nothing is created."""
    conninfo = "dbname=team user=ops password=Zsecret9"
    cases = [(["--store", conninfo, "add", "x", "--wing", "w"], {}), (["stats"], {"MEMLENS_STORE": conninfo}),
             (["copy", conninfo, str(tmp_path / "b.db")], {})]
    for args, env in cases:
        out = run_cli(*args, env=env, cwd=tmp_path)
        assert out.returncode == 2 and "PostgreSQL connection string" in out.stderr, (args, out.stderr)
        assert "Zsecret9" not in out.stderr + out.stdout and len(out.stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == []
