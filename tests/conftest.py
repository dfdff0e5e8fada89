"""Shared fixtures. Every user path (data, config, cache) points into a temp dir;
the real model is resolved and exported once per session."""

from __future__ import annotations

import ast
import functools
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="memlens-tests-"))
for var, sub in (("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache")):
    os.environ[var] = str(_SESSION_DIR / sub)
os.environ["MEMLENS_CACHE_DIR"] = str(_SESSION_DIR / "cache" / "memlens")
os.environ["MEMLENS_CONFIG"] = str(_SESSION_DIR / "config" / "none.toml")
(_SESSION_DIR / "config").mkdir()
(_SESSION_DIR / "config" / "none.toml").write_text("# defaults only: a file MEMLENS_CONFIG names must exist\n")
os.environ.pop("MEMLENS_STORE", None)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(_SESSION_DIR / "hypothesis")  # not .hypothesis/ in the worktree

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "data" / "demo.jsonl"
MEMLENS = str(Path(sys.executable).parent / "memlens")


# The real model is loaded by `real_embedder`; every fixture built on it (real_mem, demo_store, demo_mem, the
# app's tui_demo_store and make_app) pulls it in, so a test that uses any of them gets the `model` marker here
# and the fast loop (`make fast`: -m "not model and not slow") leaves it out without anyone remembering to mark
# it. Tests that load the model in their own way (the `memlens` command in a child) carry the marker themselves.
MODEL_FIXTURES = frozenset({"real_embedder"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if MODEL_FIXTURES & used:
            item.add_marker(pytest.mark.model)
        fn = getattr(item, "function", None)
        if fn is not None and _starts_processes(fn, used):
            item.add_marker(pytest.mark.slow)


# A test that starts a process (the `memlens` command, a Python child, an MCP server) gets the `slow` marker:
# each child pays the interpreter's start-up and memlens' imports. Found from the source: a function starts
# processes when it uses subprocess, sys.executable, the `memlens` path or the SDK's stdio client, or calls
# (or uses as a fixture) a function of the test modules that does.
_SPAWN_NAMES = frozenset({"subprocess", "MEMLENS", "stdio_client", "Popen", "pty", "pexpect"})


def _spawning_names(tree: ast.AST) -> set[str]:
    """Names of the functions and classes in ``tree`` that start processes, directly or through each other."""
    refs: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            refs.setdefault(node.name, set()).update(_referenced(node))
    spawning = {name for name, r in refs.items() if r & _SPAWN_NAMES or "sys.executable" in r}
    while True:
        more = {name for name, r in refs.items() if name not in spawning and r & spawning}
        if not more:
            return spawning
        spawning |= more


def _referenced(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
            if isinstance(n.value, ast.Name):
                out.add(f"{n.value.id}.{n.attr}")
        elif isinstance(n, ast.arg):
            out.add(n.arg)  # a fixture asked for by name
    return out


@functools.cache
def _module_spawners(path: str) -> frozenset[str]:
    try:
        return frozenset(_spawning_names(ast.parse(Path(path).read_text(encoding="utf-8"))))
    except (OSError, SyntaxError):
        return frozenset()


@functools.cache
def _shared_spawners() -> frozenset[str]:
    """Helpers the test modules share (tests/conftest.py, tests/tui/conftest.py, tests/mcp_helpers.py)."""
    here = Path(__file__).parent
    names: set[str] = set()
    for helper in (here / "conftest.py", here / "tui" / "conftest.py", here / "mcp_helpers.py"):
        names |= _module_spawners(str(helper))
    return frozenset(names)


def _starts_processes(fn: Any, fixtures: set[str]) -> bool:
    path = inspect.getsourcefile(fn)
    if path is None:
        return False
    spawners = _module_spawners(path) | _shared_spawners()
    own = _referenced(ast.parse(textwrap.dedent(inspect.getsource(fn))))
    return bool(spawners & (own | fixtures)) or bool(own & _SPAWN_NAMES) or "sys.executable" in own


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def settings():
    from memlens.config import load_settings

    return load_settings()


@pytest.fixture(scope="session")
def real_embedder(settings):
    """The real all-MiniLM-L6-v2 on ONNX Runtime, loaded once for the whole run."""
    from memlens.embed import make_embedder

    emb = make_embedder(settings.embedding, settings.cache_dir)
    emb.load()
    return emb


@pytest.fixture
def hash_embedder():
    from memlens.embed import HashEmbedder

    return HashEmbedder()


@pytest.fixture
def store_path(tmp_path) -> Path:
    return tmp_path / "store" / "memlens.db"


@pytest.fixture
def mem(store_path, settings, hash_embedder):
    """A real SQLite + sqlite-vec store with the deterministic hashing embedder (mechanics only)."""
    from memlens import Memory

    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as m:
        yield m


@pytest.fixture
def real_mem(store_path, settings, real_embedder):
    from memlens import Memory

    with Memory.open(store_path, settings=settings, embedder=real_embedder) as m:
        yield m


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory, settings, real_embedder) -> Iterator[Path]:
    """The demo memory imported once with the real model; tests copy it before writing."""
    from memlens import Memory

    path = tmp_path_factory.mktemp("demo") / "demo.db"
    with Memory.open(path, settings=settings, embedder=real_embedder) as m:
        m.import_jsonl(DEMO)
    before = snapshot_store(path)
    yield path
    # shared by the whole session: a test that wrote to it (a search logs a retrieval) would skew others
    assert snapshot_store(path) == before, "a test wrote to the session's demo_store; copy it first"


@pytest.fixture(scope="session")
def question_stores(tmp_path_factory, settings, real_embedder) -> dict[str, Path]:
    """Each question set's corpus (tests/data/<set>) in its own store, embedded by the real model once per run;
    set name -> store path (the quality guard and the speed layer's parity test read them)."""
    from memlens import Memory
    from tests.data import beir

    root = tmp_path_factory.mktemp("quality")
    out = {}
    for name in beir.SETS:
        try:
            docs = beir.corpus(name)
        except beir.CorpusMismatch as exc:
            pytest.fail(str(exc))
        beir.write_entries(docs, beir.WINGS[name], root / f"{name}.jsonl")
        out[name] = root / f"{name}.db"
        with Memory.open(out[name], settings=settings, embedder=real_embedder) as mem:
            assert mem.import_jsonl(root / f"{name}.jsonl")["imported"] == len(docs)
    return out


@pytest.fixture
def demo_mem(demo_store, tmp_path, settings, real_embedder):
    from memlens import Memory

    path = tmp_path / "demo.db"
    shutil.copy(demo_store, path)
    with Memory.open(path, settings=settings, embedder=real_embedder) as m:
        yield m


def run_cli(*args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 120, **kw):
    """Run the installed `memlens` command in a fresh process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [MEMLENS, *args], input=input, capture_output=True, text=True, env=full_env, timeout=timeout, **kw
    )


def snapshot_store(path: Path) -> tuple:
    """Everything observable about a store: entries, vectors, audit and generations, once this process's
    retrieval-log rows still waiting in a log spool are written (as its next read or write would write them)."""
    from memlens.store import db, logspool

    logspool.drain_all()
    conn = db.connect(path, create=False)
    try:
        return (
            conn.execute("SELECT * FROM entries ORDER BY rowid").fetchall(),
            conn.execute("SELECT rowid, embedding, wing, room, kind, type, status FROM entries_vec ORDER BY rowid").fetchall(),
            conn.execute("SELECT * FROM audit ORDER BY seq").fetchall(),
            conn.execute("SELECT * FROM wings ORDER BY wing").fetchall(),
        )
    finally:
        conn.close()


def logged_retrievals(path: Path, at_least: int, timeout: float = 30) -> int:
    """The retrieval rows in the file once there are ``at_least`` (another process's log spool writes its
    searches' rows within a moment of them); fails the test after ``timeout`` seconds."""
    from memlens.store import db

    deadline = time.monotonic() + timeout
    while True:
        conn = db.connect(path, create=False)
        try:
            n = int(conn.execute("SELECT count(*) FROM audit WHERE action = 'retrieval'").fetchone()[0])
        finally:
            conn.close()
        if n >= at_least:
            return n
        assert time.monotonic() < deadline, f"{n} retrieval rows in {path} after {timeout} s, expected {at_least}"
        time.sleep(0.02)


def bounded(fn, timeout: float = 30):
    """fn() in a daemon thread: its result or exception, or a test failure instead of a hang if it blocks (a FIFO would)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"blocked for {timeout} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


from tests.pg_fixture import backend_mem, pg_server, pg_uri  # noqa: E402,F401  (PostgreSQL backend fixtures)
