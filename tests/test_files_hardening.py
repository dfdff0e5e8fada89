"""Files memlens reads (capped, regular only) and files it creates (owner-only)."""

import os
import stat
from pathlib import Path

import pytest

from memlens.errors import MemlensError
from memlens.files import make_private_dirs, read_file, write_private

from .concurrency import run_threads
from .conftest import bounded


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# -- the model cache -----------------------------------------------------------------------------


def test_verified_stamp_is_owner_only(tmp_path, settings, umask022):
    from memlens.embed import resolve_model, verified_sha256

    cache = tmp_path / "c1" / "c2"
    spec = resolve_model(settings.embedding)
    verified_sha256(spec, cache)
    stamps = list((cache / "verified").iterdir())
    assert len(stamps) == 1
    assert mode(stamps[0]) == 0o600
    for d in (tmp_path / "c1", cache, cache / "verified"):
        assert mode(d) == 0o700, d
    # a stamp that is not a small regular file is ignored (the weights are hashed again), not read
    stamps[0].unlink()
    stamps[0].symlink_to("/dev/zero")
    assert bounded(lambda: verified_sha256(spec, cache)) == spec.expected_sha256


@pytest.mark.model
def test_model_graph_is_owner_only(tmp_path, settings, umask022):
    from memlens.embed import resolve_model, write_graph

    target = tmp_path / "cache" / "onnx" / "abc" / "model.onnx"
    write_graph(resolve_model(settings.embedding), target)
    assert mode(target) == 0o600
    for d in (tmp_path / "cache", tmp_path / "cache" / "onnx", target.parent):
        assert mode(d) == 0o700, d
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.onnx"]  # no temp file left


@pytest.mark.model  # reads the real weights before it writes
def test_an_unusable_cache_dir_is_one_line(tmp_path, settings):
    from memlens.embed import resolve_model, write_graph
    from memlens.errors import ModelError

    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelError, match="cannot write the model cache"):
        write_graph(resolve_model(settings.embedding), tmp_path / "file" / "onnx" / "model.onnx")


# -- files.py ------------------------------------------------------------------------------------


def test_private_dirs_and_files(tmp_path, umask022):
    make_private_dirs(tmp_path / "a" / "b")
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700
    write_private(tmp_path / "a" / "f", b"data")
    assert mode(tmp_path / "a" / "f") == 0o600 and (tmp_path / "a" / "f").read_bytes() == b"data"
    assert sorted(os.listdir(tmp_path / "a")) == ["b", "f"]


@pytest.mark.skipif(os.name != "posix", reason="processes are asked with signal 0")
def test_a_temp_file_left_by_a_killed_writer_is_removed_by_a_later_write(tmp_path):
    """A process killed while writing the model's cache leaves its temp file (~90 MB): a later write removes it once
    it is 10 minutes old and its process is gone. A running writer's (or a recent one's, maybe another host's on
    a shared folder) stays, a day-old one goes whatever its PID, and a name of another file's shape is not touched.
    A later process that got the dead one's PID no longer fails on its file."""
    import subprocess
    import sys
    import time

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(gone.stdout)
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        target = tmp_path / "model.onnx"
        old, ancient = time.time() - 1200, time.time() - 2 * 86400

        def temp(name: str, when: float | None) -> Path:
            p = tmp_path / name
            p.write_bytes(b"part of a model")
            if when is not None:
                os.utime(p, (when, when))
            return p

        orphan = temp(f".model.onnx.{dead_pid}.tmp", old)  # the name the writer used before
        orphan_new = temp(f".model.onnx.{dead_pid}.0badc0de.tmp", old)
        recent = temp(f".model.onnx.{dead_pid}.0123abcd.tmp", None)  # untouched for less than 10 minutes: kept
        busy = temp(f".model.onnx.{running.pid}.ab12cd34.tmp", old)  # its process runs: kept
        stale_busy = temp(f".model.onnx.{running.pid}.cd34ab12.tmp", ancient)  # a day old: gone, whatever the PID
        mine = temp(f".model.onnx.{os.getpid()}.tmp", old)  # as if this PID had been a killed writer's: kept
        other = temp(f".model.onnx.9.{dead_pid}.ab12cd34.tmp", old)  # a temp file of "model.onnx.9": not its
        huge = temp(".model.onnx.99999999999.tmp", old)  # no such PID can be asked: kept, no error
        write_private(target, b"the model")
        assert target.read_bytes() == b"the model"
        assert not orphan.exists() and not orphan_new.exists() and not stale_busy.exists()
        kept = [recent, busy, mine, other, huge]
        assert all(p.exists() for p in kept)

        errors: list[BaseException] = []

        def write(i: int) -> None:
            try:
                write_private(target, [b"the model ", str(i).encode()])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        run_threads(write, 8, timeout=10)
        assert errors == [] and target.read_bytes().startswith(b"the model ")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([p.name for p in kept] + [target.name])
    finally:
        running.kill()
        running.wait(10)


def test_read_file_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, fragment in (("/dev/zero", "character device"), (fifo, "FIFO"), (tmp_path, "directory"),
                           (tmp_path / "none", "no such file")):
        with pytest.raises(MemlensError, match=fragment) as exc:
            bounded(lambda: read_file(path, cap=1024, what="input"))  # noqa: B023 (called at once, in this iteration)
        assert str(path) in str(exc.value)


def test_read_file_caps_the_bytes_actually_read(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2049)
    with pytest.raises(MemlensError, match=f"{big}: larger than the 2 KiB limit"):
        read_file(big, cap=2048, what="input")
    assert read_file(big, cap=4096) == b"x" * 2049
    # /proc files say st_size 0 whatever they hold: the cap counts what is read
    with pytest.raises(MemlensError, match="larger than the 16 bytes limit"):
        read_file("/proc/self/status", cap=16)


# -- every file the CLI reads whole --------------------------------------------------------------


def _limited():
    import resource

    # 1 GiB of address space: the old unbounded read ends in MemoryError instead of taking the machine's memory
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def run_limited(*args, stdin=None):
    import subprocess

    from .conftest import MEMLENS

    return subprocess.run([MEMLENS, *args], stdin=stdin if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, preexec_fn=_limited)


def one_line(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memlens: error: "), proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.fixture
def odd_files(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # nobody writes to it: reading it would block forever
    return {"/dev/zero": "character device", str(fifo): "FIFO", str(tmp_path): "directory"}


def test_task_report_and_state_files_are_regular_and_capped(tmp_path, odd_files):
    store = str(tmp_path / "s.db")
    for path, kind in odd_files.items():
        one_line(run_limited("--store", store, "task", "complete", "t1", "--intent", "x", "--report", path),
                 f"--report {path}", kind)
        one_line(run_limited("--store", store, "tasks", "import-state", path), path, kind)
    with open("/dev/zero", "rb") as zero:
        one_line(run_limited("--store", store, "task", "complete", "t1", "--intent", "x", "--report", "-", stdin=zero),
                 "--report <stdin>", "larger than the 1 MiB limit")
    with open("/dev/zero", "rb") as zero:
        one_line(
            run_limited("--store", store, "tasks", "import-state", "-", stdin=zero), "<stdin>", "larger than the 64 MiB limit"
        )
    big = tmp_path / "big.json"
    big.write_text('{"pad": "' + "x" * (1 << 20) + '"}')
    one_line(run_limited("--store", store, "task", "complete", "t1", "--intent", "x", "--report", str(big)),
             f"--report {big}", "larger than the 1 MiB limit")
    assert not (tmp_path / "s.db").exists()


def test_query_sets_and_qrels_are_regular_and_capped(tmp_path, odd_files, demo_store):
    store = str(demo_store)  # never written: every command below stops at its input
    good_q = tmp_path / "q.jsonl"
    good_q.write_text('{"_id": "q1", "text": "callbacks"}\n')
    good_r = tmp_path / "qrels.tsv"
    good_r.write_text("q1\tlc-arch-001\t1\n")
    for path, kind in odd_files.items():
        one_line(run_limited("--store", store, "search", "--queries", path), f"queries {path}", kind)
        one_line(run_limited("--store", store, "eval", path, str(good_r)), f"queries {path}", kind)
        one_line(run_limited("--store", store, "eval", str(good_q), path), f"qrels {path}", kind)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n")
    one_line(run_limited("--store", store, "search", "--queries", str(deep)), "line 1", "nested too deeply")
    twice = tmp_path / "twice.jsonl"  # both would be scored against the one id's qrels
    twice.write_text('{"_id": "q1", "text": "callbacks"}\n{"_id": 1, "text": "x"}\n{"_id": "1", "text": "timers"}\n')
    one_line(run_limited("--store", store, "eval", str(twice), str(good_r)), "line 3", "already the id of line 2")


TOKENIZER_PROBE = """
import sys
from memlens.config import load_settings
from memlens.embed import OnnxEmbedder, resolve_model
from memlens.errors import ModelError
spec = resolve_model(load_settings().embedding.model_copy(update={"model": sys.argv[1]}))
try:
    OnnxEmbedder(spec, "0" * 64, spec.path / "cache").count_tokens("hello")
except ModelError as exc:
    print(exc)
"""


def test_tokenizer_file_must_be_regular(tmp_path, settings):
    """In a child process: a native read blocked on a FIFO can hold the interpreter's lock, so no thread could time it out."""
    import shutil
    import subprocess
    import sys

    from memlens.embed import resolve_model

    copy = tmp_path / "model"
    shutil.copytree(resolve_model(settings.embedding).path, copy)
    (copy / "tokenizer.json").unlink()
    os.mkfifo(copy / "tokenizer.json")
    proc = subprocess.run([sys.executable, "-c", TOKENIZER_PROBE, str(copy)], capture_output=True, text=True, timeout=60)
    assert "tokenizer" in proc.stdout and "FIFO" in proc.stdout, proc.stdout + proc.stderr


# -- the workspace fallback ----------------------------------------------------------------------


def _context(store: Path, ws, query: str):
    from .conftest import run_cli

    # a junk store: the command falls back to the workspace without loading the model
    return run_cli("--store", str(store), "context", query, "--active-wing", "p", "--workspace", str(ws), "--json", timeout=60)


@pytest.fixture
def junk_store(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database " * 100)
    return junk


def test_fifos_in_the_workspace_do_not_hang_context(tmp_path, junk_store):
    import json

    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    os.mkfifo(ws / "docs" / "architecture.md")  # nobody ever writes: opening it for reading blocks
    os.mkfifo(ws / "README.md")
    os.mkfifo(ws / "aaa-pipe.txt")
    (ws / "notes.txt").write_text("Lifecycle transitions must be fast.\n")
    proc = _context(junk_store, ws, "lifecycle transitions")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["meta"]["path"] for r in out["results"]] == ["notes.txt"]


def test_a_proc_workspace_is_refused(junk_store):
    import json

    proc = _context(junk_store, "/proc/self", "status pid")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["results"] == []
    assert "pseudo-filesystem" in json.dumps(out["trace"]["degraded"]["tried"])
    assert "VmRSS" not in out["context"]


def test_workspace_reads_only_regular_files_within_the_caps(tmp_path):
    from memlens.retrieval import fallback

    assert fallback._read_text(Path("/proc/self/status")) is None  # size 0 on stat, kilobytes when read
    assert fallback._read_text(Path("/dev/zero")) is None
    exact = tmp_path / "exact.txt"
    exact.write_bytes(b"a" * fallback.MAX_FILE_BYTES)
    assert fallback._read_text(exact) == "a" * fallback.MAX_FILE_BYTES
    exact.write_bytes(b"a" * (fallback.MAX_FILE_BYTES + 1))
    assert fallback._read_text(exact) is None
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "exact.txt")
    assert fallback._read_text(link) is None  # never through a link


def test_workspace_search_skips_hidden_deep_and_endless_trees(tmp_path, monkeypatch):
    from memlens.retrieval import fallback

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text("API_TOKEN=lifecycle-secret\n")
    deep = ws.joinpath(*[f"d{i}" for i in range(fallback.MAX_DEPTH + 2)])
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("lifecycle secret at the bottom\n")
    (ws / "top.txt").write_text("lifecycle secret near the top\n")
    b = fallback.fallback_bundle("lifecycle secret", ws, 10, "test")
    assert [r.entry.meta["path"] for r in b.results] == ["top.txt"]
    monkeypatch.setattr(fallback, "MAX_ENTRIES", 1)
    b = fallback.fallback_bundle("lifecycle secret", ws, 10, "test")
    assert any("stopped after 1 entries" in t["result"] for t in b.trace.degraded["tried"])
