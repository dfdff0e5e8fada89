"""Working memory: window, summaries, pruning, blockers, backfill, CLI, concurrency."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memlens import Memory
from memlens.config import load_settings
from memlens.demo import demo_tasks_file, load_tasks
from memlens.embed import HashEmbedder
from memlens.errors import NotFoundError, ValidationError
from memlens.store import db
from memlens.working.tasks import Task, report_digest, summarize

from .conftest import REPO, bounded, run_cli, snapshot_store

T0 = "2026-01-11T10:00:00Z"


def at(minute: int, second: int = 0) -> str:
    return f"2026-01-11T{10 + minute // 60:02d}:{minute % 60:02d}:{second:02d}Z"


def wm_snapshot(path: Path) -> tuple:
    """snapshot_store plus the working-memory tables."""
    conn = db.connect(path, create=False)
    try:
        extra = (
            conn.execute("SELECT * FROM tasks ORDER BY task_id").fetchall(),
            conn.execute("SELECT * FROM blockers ORDER BY id").fetchall(),
        )
    finally:
        conn.close()
    return snapshot_store(path) + extra


def one_line_error(proc, fragment):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("memlens: error: ")
    assert "Traceback" not in proc.stderr
    assert fragment in lines[0], lines[0]


def open_mem(path: Path, **wm) -> Memory:
    settings = load_settings(working_memory=wm) if wm else load_settings()
    return Memory.open(path, settings=settings, embedder=HashEmbedder())


# -- the window -----------------------------------------------------------------------------------


def test_nothing_to_show_renders_empty_string(mem):
    assert mem.tasks.render() == ""
    w = mem.tasks.window()
    assert w.tasks == [] and w.blockers == []
    assert w.to_dict() == {"tasks": [], "blockers": [], "markdown": ""}


def test_window_is_the_last_five_by_completed_at_oldest_first(mem):
    # completed out of time order: the window follows completed_at, not insertion
    for i, minute in enumerate([30, 0, 50, 10, 40, 20, 60, 5]):
        mem.tasks.complete(f"task-{i}", f"intent {i}", completed_at=at(minute))
    ids = [t.task_id for t in mem.tasks.window().tasks]
    # minutes 20, 30, 40, 50, 60 -> tasks 5, 0, 4, 2, 6
    assert ids == ["task-5", "task-0", "task-4", "task-2", "task-6"]
    assert [t.task_id for t in mem.tasks.recent(2)] == ["task-2", "task-6"]
    assert mem.tasks.recent(0) == []
    assert mem.tasks.count() == 8


def test_ties_on_completed_at_follow_completion_order(mem):
    for tid in ("b", "c", "a"):
        mem.tasks.complete(tid, f"do {tid}", completed_at=T0)
    assert [t.task_id for t in mem.tasks.recent()] == ["b", "c", "a"]
    # completing "b" again (same time) makes it the latest of the tie
    mem.tasks.complete("b", "do b again", completed_at=T0)
    assert [t.task_id for t in mem.tasks.recent()] == ["c", "a", "b"]
    # stable across connections and reads
    with open_mem(mem.path) as other:
        assert [t.task_id for t in other.tasks.recent()] == ["c", "a", "b"]
        assert other.tasks.render() == mem.tasks.render()


def test_window_size_is_configuration(store_path):
    with open_mem(store_path, window=3) as m:
        for i in range(6):
            m.tasks.complete(f"t{i}", f"intent {i}", completed_at=at(i))
        assert [t.task_id for t in m.tasks.window().tasks] == ["t3", "t4", "t5"]
        assert m.tasks.render().count("\n") == 3  # heading + 3 lines
        assert [t.task_id for t in m.tasks.window(1).tasks] == ["t5"]
        assert m.tasks.render(0) == ""
        with pytest.raises(ValidationError, match="window size"):
            m.tasks.window(-1)


def test_window_size_from_the_environment_reaches_the_cli(mem, store_path):
    for i in range(6):
        mem.tasks.complete(f"t{i}", f"intent {i}", completed_at=at(i))
    out = run_cli("--store", str(store_path), "tasks", env={"MEMLENS_WORKING_MEMORY__WINDOW": "2"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "## Recent Task History",
        '1. t4: "intent 4" (completed: 2026-01-11T10:04Z, ✓ success)',
        '2. t5: "intent 5" (completed: 2026-01-11T10:05Z, ✓ success)',
    ]
    out = run_cli("--store", str(store_path), "tasks", "-n", "1", "--json")
    assert [t["task_id"] for t in json.loads(out.stdout)["tasks"]] == ["t5"]


def test_markdown_block_format(mem):
    mem.tasks.complete("task-042", "Implement user authentication module", completed_at="2026-01-11T10:00:00Z")
    mem.tasks.complete(
        "task-043",
        'Add "JWT" validation\n   middleware',
        outcome="failure",
        completed_at="2026-01-11T10:05:30Z",
        validation_report={"tests": {"passed": 10, "failed": 2}, "errors": ["token expiry not checked", "second"]},
    )
    mem.tasks.complete("task-044", "Create login endpoint", completed_at="2026-01-11T10:10:00Z", requires_context=False)
    mem.tasks.block("task-046", "Waiting for the OAuth client secret", blocked_at="2026-01-11T09:00:00Z")
    mem.tasks.block("task-045", "Schema migration needs review", blocked_at="2026-01-11T09:30:00Z")
    assert mem.tasks.render() == textwrap.dedent(
        """\
        ## Recent Task History
        1. task-042: "Implement user authentication module" (completed: 2026-01-11T10:00Z, ✓ success)
        2. task-043: "Add \\"JWT\\" validation middleware" (completed: 2026-01-11T10:05Z, ✗ failure)
           tests: 10 passed, 2 failed; errors: 2 (first: "token expiry not checked")
        3. task-044 (completed: 2026-01-11T10:10Z, ✓ success)

        ## Active Blockers
        - task-046: "Waiting for the OAuth client secret" (blocked: 2026-01-11T09:00Z)
        - task-045: "Schema migration needs review" (blocked: 2026-01-11T09:30Z)"""
    )


def test_only_blockers_renders_only_the_blocker_section(mem):
    mem.tasks.block("t1", "waiting", blocked_at=T0)
    assert mem.tasks.render() == '## Active Blockers\n- t1: "waiting" (blocked: 2026-01-11T10:00Z)'


def test_requires_context_false_keeps_the_task_opaque(mem):
    t = mem.tasks.complete("secret-1", "Rotate the production signing key", requires_context=False, completed_at=T0)
    assert t.intent is None and t.summary is None and t.requires_context is False
    assert mem.tasks.get("secret-1").intent is None
    text = mem.tasks.render()
    assert text == "## Recent Task History\n1. secret-1 (completed: 2026-01-11T10:00Z, ✓ success)"
    assert "signing key" not in json.dumps(mem.tasks.window().to_dict())
    # the audit keeps what was said, so nothing is lost
    assert mem.audit("secret-1")[0]["detail"] == {"intent": "Rotate the production signing key"}
    # an opaque task needs no intent at all
    assert mem.tasks.complete("secret-2", None, requires_context=False).intent is None


# -- summaries ------------------------------------------------------------------------------------


def test_summaries_are_deterministic_and_ignore_key_order():
    report = {
        "tests": {"passed": 12, "failed": 1, "skipped": 2},
        "checks": [{"name": "ruff", "passed": True}, {"name": "mypy", "passed": False}],
        "lint": {"issues": 3},
        "coverage": 0.874,
        "errors": ["AssertionError: expected 3", "second"],
        "notes": "flaky  on\nCI",
        "duration_ms": 12345,
        "unknown_field": {"anything": [1, 2]},
    }
    reordered = json.loads(json.dumps(dict(reversed(list(report.items())))))
    reordered["tests"] = {"skipped": 2, "failed": 1, "passed": 12}
    reordered["checks"] = list(reversed(report["checks"]))
    expected = (
        "Fix the parser — failure; tests: 12 passed, 1 failed, 2 skipped; checks: 1/2 passed (failed: mypy); "
        'lint: 3 issues; coverage 87%; errors: 2 (first: "AssertionError: expected 3"); notes: flaky on CI; took 12.3 s'
    )
    assert summarize("Fix the parser", "failure", report) == expected
    assert summarize("Fix the parser", "failure", reordered) == expected
    assert summarize("  Fix   the parser ", "failure", report) == expected
    assert summarize("Ship it", "success", None) == "Ship it — success"
    assert summarize("Ship it", "success", {}) == "Ship it — success"


def test_summary_tolerates_unknown_and_misshapen_fields():
    odd = {"tests": "lots", "checks": [1, {"name": 3}], "lint": "maybe", "errors": {"x": 1}, "coverage": -1, "extra": None}
    assert report_digest(odd) == ""
    assert report_digest({"checks": {"b": True, "a": False}, "lint": True}) == "checks: 1/2 passed (failed: a); lint ok"
    assert report_digest({"tests": {"failed": 2}}) == "tests: 0 passed, 2 failed"


def test_stored_summary_matches_the_pure_function(mem):
    report = {"tests": {"passed": 3, "failed": 0}, "lint": True}
    t = mem.tasks.complete("t1", "Add the node", validation_report=report)
    expected = "Add the node — success; tests: 3 passed, 0 failed; lint ok"
    assert t.summary == summarize("Add the node", "success", report) == expected
    assert mem.tasks.get("t1").summary == t.summary
    assert mem.tasks.get("t1").validation_report == report


# -- completion rules, blockers, pruning, audit ---------------------------------------------------


def test_completing_again_replaces_and_is_audited(mem):
    mem.tasks.complete("t1", "first try", outcome="failure", completed_at=at(0))
    mem.tasks.complete("t1", "second try", completed_at=at(5))
    assert mem.tasks.count() == 1
    got = mem.tasks.get("t1")
    assert got.intent == "second try" and got.outcome.value == "success"
    last = mem.audit("t1")[0]
    assert last["action"] == "task.complete"
    assert last["before"]["intent"] == "first try" and last["after"]["intent"] == "second try"


def test_completing_a_blocked_task_resolves_its_blocker(mem):
    mem.tasks.block("t1", "waiting for review", blocked_at=at(0))
    assert [b.task_id for b in mem.tasks.blockers()] == ["t1"]
    mem.tasks.complete("t1", "land the change", completed_at=at(10))
    assert mem.tasks.blockers() == []
    (resolved,) = mem.tasks.blockers(active_only=False)
    assert resolved.resolution == "complete" and resolved.resolved_at.minute == 10
    actions = [a["action"] for a in mem.audit("t1")]
    assert actions[:2] == ["task.unblock", "task.complete"]
    assert mem.audit("t1")[0]["detail"] == {"by": "task.complete"}


def test_block_unblock_and_errors(mem):
    b = mem.tasks.block("t9", "flaky hardware", blocked_at=at(0))
    assert b.active and b.reason == "flaky hardware"
    with pytest.raises(ValidationError, match="already blocked since 2026-01-11T10:00:00Z"):
        mem.tasks.block("t9", "another reason")
    after = mem.tasks.unblock("t9")
    assert not after.active and after.resolution == "unblock"
    with pytest.raises(NotFoundError, match=r"task 't9' has no active blocker \(active blockers: none\)"):
        mem.tasks.unblock("t9")
    with pytest.raises(NotFoundError, match="no active blocker"):
        mem.tasks.unblock("never-seen")
    # blocked again after being unblocked: fine
    mem.tasks.block("t9", "flaky again")
    assert [a["action"] for a in mem.audit("t9")] == ["task.block", "task.unblock", "task.block"]


def _nested(depth: int) -> dict:
    report: dict = {}
    inner = report
    for _ in range(depth):
        inner["a"] = {}
        inner = inner["a"]
    return report


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda m: m.tasks.complete("bad id", "x"), "not a valid task id"),
        (lambda m: m.tasks.complete("t1", "  "), "an intent is required"),
        (lambda m: m.tasks.complete("t1", "x", outcome="meh"), "outcome must be"),
        (lambda m: m.tasks.complete("t1", "x", validation_report=[1, 2]), "field 'validation_report'"),
        (lambda m: m.tasks.complete("t1", "x", validation_report={"x": float("nan")}), "plain JSON"),
        (lambda m: m.tasks.complete("t1", "x", completed_at="yesterday"), "field 'completed_at'"),
        (lambda m: m.tasks.complete("t1", "x", validation_report={"blob": "x" * 300_000}), "too large"),
        (lambda m: m.tasks.complete("t1", "x", validation_report=_nested(100_000)), "nested deeper than"),
        (lambda m: m.tasks.complete("t1", "x", validation_report={"log": "caf\udce9"}), "unpaired surrogate"),
        (lambda m: m.tasks.complete("t1", "x", validation_report={"n": 10**400}), "64-bit"),
        (lambda m: m.tasks.block("t1", ""), "field 'reason'"),
        (lambda m: m.tasks.block("t 1", "why"), "not a valid task id"),
    ],
)
def test_invalid_input_is_refused_and_writes_nothing(mem, call, fragment):
    with pytest.raises(ValidationError, match=fragment) as info:
        call(mem)
    assert "\n" not in str(info.value)
    assert mem.audit() == [] and mem.tasks.is_empty()


def test_the_101st_task_prunes_the_oldest_and_the_audit_keeps_it(mem):
    for i in range(101):
        mem.tasks.complete(f"task-{i:03d}", f"step {i}", completed_at=at(i))
    assert mem.tasks.count() == 100
    with pytest.raises(NotFoundError):
        mem.tasks.get("task-000")
    assert mem.tasks.all()[0].task_id == "task-001"
    history = mem.audit("task-000")
    assert [a["action"] for a in history] == ["task.prune", "task.complete"]
    assert history[0]["before"]["intent"] == "step 0" and history[0]["detail"] == {"max_tasks": 100}


def test_pruning_bound_is_configuration_and_ignores_insertion_order(store_path):
    with open_mem(store_path, max_tasks=3) as m:
        for tid, minute in (("new", 50), ("old", 1), ("mid", 30), ("older", 0), ("newest", 59)):
            m.tasks.complete(tid, tid, completed_at=at(minute))
        assert [t.task_id for t in m.tasks.all()] == ["mid", "new", "newest"]
        pruned = [a["entry_id"] for a in m.audit(limit=100) if a["action"] == "task.prune"]
        assert sorted(pruned) == ["old", "older"]


def test_writes_bump_the_tasks_generation_for_other_processes(mem):
    assert mem.tasks.generation() == 0
    mem.tasks.complete("t1", "x")
    mem.tasks.block("t2", "y")
    mem.tasks.unblock("t2")
    with open_mem(mem.path) as other:
        assert other.generations()["_tasks"] == 3 == other.tasks.generation()


# -- backfill from legacy state files ------------------------------------------------------------------

LEGACY = {
    "version": 3,
    "current_task": {"task_id": "task-010"},
    "completed_tasks": [
        {"task_id": "task-001", "completed_at": "2026-01-10T08:00:00Z", "validation_report": {"passed": True}},
        {"task_id": "task-002", "completed_at": "2026-01-10T09:00:00",
         "validation_report": {"passed": False, "tests": {"passed": 1, "failed": 3}}},
        {"id": "task-003", "completed_at": "2026-01-10T10:00:00Z", "legacy_note": "kept?", "intent": "Tune QoS"},
    ],
    "blocked_tasks": {"task-004": {"reason": "needs a GPU", "blocked_at": "2026-01-10T07:00:00Z"}},
    "blockers": [{"task_id": "task-005", "blocked_at": "2026-01-09T07:00:00Z", "resolved_at": "2026-01-09T09:00:00Z"}],
}


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def test_legacy_state_without_new_fields_loads_as_opaque_tasks(mem, tmp_path):
    src = write_json(tmp_path / "state.json", LEGACY)
    rep = mem.tasks.import_state(src)
    assert rep["tasks_imported"] == 3 and rep["backfilled"] == 3 and rep["blockers_imported"] == 2
    assert rep["ignored_fields"] == ["completed_tasks.legacy_note"]
    tasks = mem.tasks.all()
    assert [t.task_id for t in tasks] == ["task-001", "task-002", "task-003"]
    assert all(t.requires_context is False and t.intent is None and t.summary is None for t in tasks)
    assert [t.outcome.value for t in tasks] == ["success", "failure", "success"]
    assert tasks[1].validation_report == {"passed": False, "tests": {"passed": 1, "failed": 3}}
    assert [b.task_id for b in mem.tasks.blockers()] == ["task-004"]
    assert [b.task_id for b in mem.tasks.blockers(active_only=False)] == ["task-005", "task-004"]
    assert mem.tasks.render() == textwrap.dedent(
        """\
        ## Recent Task History
        1. task-001 (completed: 2026-01-10T08:00Z, ✓ success)
        2. task-002 (completed: 2026-01-10T09:00Z, ✗ failure)
        3. task-003 (completed: 2026-01-10T10:00Z, ✓ success)

        ## Active Blockers
        - task-004: "needs a GPU" (blocked: 2026-01-10T07:00Z)"""
    )
    assert {a["action"] for a in mem.audit(limit=100)} == {"task.import"}
    assert mem.audit("task-003")[0]["detail"] == {"source": str(src), "item": "completed_tasks[2]", "intent": "Tune QoS"}
    # importing the same file again changes nothing at all
    before = wm_snapshot(mem.path)
    rep2 = mem.tasks.import_state(src)
    assert rep2["tasks_unchanged"] == 3 and rep2["blockers_unchanged"] == 2 and rep2["tasks_imported"] == 0
    assert wm_snapshot(mem.path) == before


def test_state_with_full_fields_replaces_stored_tasks(mem, tmp_path):
    mem.tasks.complete("task-001", "old intent", completed_at="2026-01-10T08:00:00Z")
    state = {
        "completed_tasks": [
            {"task_id": "task-001", "completed_at": "2026-01-10T08:00:00Z", "requires_context": True,
             "intent": "new intent", "outcome": "failed", "validation_report": {"lint": False}},
        ]
    }
    rep = mem.tasks.import_state(write_json(tmp_path / "s.json", state))
    assert rep["tasks_replaced"] == 1 and rep["backfilled"] == 0
    t = mem.tasks.get("task-001")
    assert t.intent == "new intent" and t.outcome.value == "failure" and t.summary == "new intent — failure; lint failed"
    assert mem.audit("task-001")[0]["before"]["intent"] == "old intent"


BAD_STATES = [
    (b'{"completed_tasks": [', "invalid JSON at line 1 column 22"),
    (b"\x00\x01\x02binary\xff", "binary data"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"", "empty file"),
    (b"[]", "expected a JSON object"),
    (b'{"tasks": []}', "no completed_tasks, blocked_tasks or blockers"),
    (b'{"completed_tasks": "task-1"}', "completed_tasks must be a list, got a string"),
    (b'{"completed_tasks": [42]}', "completed_tasks[0]: expected an object, got a number"),
    (b'{"completed_tasks": [{"task_id": 7, "completed_at": "2026-01-01T00:00:00Z"}]}', "completed_tasks[0]: field 'task_id'"),
    (b'{"completed_tasks": [{"task_id": "t", "completed_at": 5}]}', "completed_tasks[0]: field 'completed_at'"),
    (b'{"completed_tasks": [{"task_id": "t"}]}', "completed_tasks[0]: field 'completed_at' is required"),
    (b'{"completed_tasks": [{"task_id": "t", "completed_at": "2026-01-01T00:00:00Z", "validation_report": [1]}]}',
     "field 'validation_report': must be a JSON object"),
    (b'{"completed_tasks": [{"task_id": "t", "completed_at": "2026-01-01T00:00:00Z", "requires_context": "yes"}]}',
     "field 'requires_context': must be true or false"),
    (b'{"completed_tasks": [{"task_id": "t", "completed_at": "2026-01-01T00:00:00Z", "requires_context": true}]}',
     "an intent is required"),
    (b'{"completed_tasks": [{"task_id": "t", "completed_at": "2026-01-01T00:00:00Z", "outcome": "meh"}]}', "field 'outcome'"),
    (b'{"completed_tasks": [{"task_id": "a", "completed_at": "2026-01-01T00:00:00Z"},'
     b' {"task_id": "a", "completed_at": "2026-01-02T00:00:00Z"}]}', "completed_tasks[1]: duplicate task_id 'a'"),
    (b'{"blockers": [{"task_id": "a", "blocked_at": "2026-01-01T00:00:00Z"},'
     b' {"task_id": "a", "blocked_at": "2026-01-02T00:00:00Z"}]}',
     "blockers[1]: task 'a' has two active blockers"),
    (b'{"blocked_tasks": [{"task_id": "a", "reason": "r"}]}', "blocked_tasks[0]: field 'blocked_at' is required"),
    (b'{"blocked_tasks": 3}', "blocked_tasks must be a list or an object"),
    (b'{"blockers": [{"task_id": "a", "reason": "r", "blocked_at": "2026-01-02T00:00:00Z",'
     b' "resolved_at": "2026-01-01T00:00:00Z"}]}',
     "resolved_at is before blocked_at"),
    # valid items first, then a bad one: still nothing is written
    (b'{"completed_tasks": [{"task_id": "ok-1", "completed_at": "2026-01-01T00:00:00Z"},'
     b' {"task_id": "x y", "completed_at": "2026-01-01T00:00:00Z"}]}',
     "completed_tasks[1]: field 'task_id'"),
    # conflicts with the store are found inside the transaction, which rolls back
    (b'{"completed_tasks": [{"task_id": "ok-2", "completed_at": "2026-01-01T00:00:00Z"}],'
     b' "blockers": [{"task_id": "held", "reason": "again", "blocked_at": "2026-01-05T00:00:00Z"}]}',
     "task 'held' already has an active blocker in the store"),
]


@pytest.mark.parametrize("content, fragment", BAD_STATES, ids=[f[1][:40] for f in BAD_STATES])
def test_malformed_state_file_is_a_one_line_error_and_changes_nothing(mem, tmp_path, content, fragment):
    mem.tasks.complete("existing", "keep me", completed_at=T0)
    mem.tasks.block("held", "already blocked", blocked_at=T0)
    before = wm_snapshot(mem.path)
    src = tmp_path / "state.json"
    src.write_bytes(content)
    with pytest.raises(ValidationError) as info:
        mem.tasks.import_state(src)
    msg = str(info.value)
    assert "\n" not in msg and fragment in msg and str(src) in msg, msg
    assert wm_snapshot(mem.path) == before


def test_missing_state_file(mem, tmp_path):
    with pytest.raises(Exception, match="no such file"):
        mem.tasks.import_state(tmp_path / "nope.json")


def test_demo_history_loads(mem):
    rep = load_tasks(mem)
    assert rep["tasks_imported"] == 20 and rep["blockers_imported"] == 3 and rep["backfilled"] == 0
    assert load_tasks(mem) is None  # only into an empty working memory
    tasks = mem.tasks.all()
    assert sum(t.outcome.value == "failure" for t in tasks) >= 3
    assert len(mem.tasks.blockers()) == 2
    assert len([b for b in mem.tasks.blockers(active_only=False) if not b.active]) == 1
    text = mem.tasks.render()
    assert text.startswith("## Recent Task History\n1. ") and "\n5. task-120: " in text and "\n6. " not in text
    assert text.count("\n- task-") == 2
    # the shipped file is the one in the repository
    assert demo_tasks_file().resolve() == (REPO / "data" / "demo_tasks.json").resolve()


def test_task_model_round_trip():
    t = Task(task_id="t1", intent="x", requires_context=True, completed_at=T0, validation_report={"b": 1, "a": 2})
    assert Task.model_validate(t.to_record()) == t
    assert list(t.validation_report) == ["a", "b"]  # canonical key order


# -- schema migration -----------------------------------------------------------------------------


def test_a_v1_store_migrates_forward_on_open(tmp_path, settings):
    path = tmp_path / "v1.db"
    conn = db.connect(path)
    with db.transaction(conn, path):
        for stmt in db.MIGRATIONS[1](384):
            conn.execute(stmt)
        conn.execute("PRAGMA user_version = 1")
        conn.execute("INSERT INTO store_meta(key, value) VALUES ('model', 'hash-bow-384'), ('dim', '384')")
        conn.execute("INSERT INTO wings(wing, generation) VALUES ('lifecore_ros2', 7)")
    conn.close()
    assert db.SCHEMA_VERSION >= 2
    with Memory.open(path, settings=settings, embedder=HashEmbedder()) as m:
        assert db.schema_version(m.conn) == db.SCHEMA_VERSION
        names = {r[0] for r in m.conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
        assert {"tasks", "blockers", "tasks_recent", "blockers_active", "blockers_open"} <= names
        assert m.generations()["lifecore_ros2"] == 7  # v1 data survives
        m.tasks.complete("t1", "after migration")
        m.add("an entry", wing="w")
        assert m.tasks.count() == 1 and m.count() == 1
    with Memory.open(path, settings=settings, embedder=HashEmbedder()) as m:  # reopening is a no-op
        assert db.schema_version(m.conn) == db.SCHEMA_VERSION and m.tasks.count() == 1


# -- CLI ------------------------------------------------------------------------------------------


def test_cli_round_trip(mem, store_path, tmp_path):
    s = str(store_path)
    report = write_json(tmp_path / "report.json", {"tests": {"passed": 4, "failed": 1}})
    out = run_cli("--store", s, "task", "complete", "task-1", "--intent", "Add the node", "--failed", "--report", str(report),
                  "--at", "2026-01-11T10:00:00Z", "--json")
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert rec["outcome"] == "failure" and rec["summary"] == "Add the node — failure; tests: 4 passed, 1 failed"
    out = run_cli("task", "--store", s, "block", "task-2", "--reason", "needs review", "--at", "2026-01-11T09:00:00Z")
    assert out.returncode == 0 and out.stdout.strip() == "blocked task-2: needs review"
    out = run_cli("--store", s, "task", "complete", "task-3", "--no-context", "--at", "2026-01-11T10:05:00Z")
    assert out.returncode == 0 and out.stdout.strip() == "completed task-3 (✓ success)"
    out = run_cli("--store", s, "tasks")
    assert out.stdout.rstrip("\n") == mem.tasks.render() and "task-2" in out.stdout
    d = json.loads(run_cli("--store", s, "tasks", "--json").stdout)
    assert [t["task_id"] for t in d["tasks"]] == ["task-1", "task-3"] and d["blockers"][0]["task_id"] == "task-2"
    assert d["markdown"] == mem.tasks.render()
    out = run_cli("--store", s, "task", "unblock", "task-2", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["resolution"] == "unblock"
    state = write_json(tmp_path / "state.json", LEGACY)
    out = run_cli("--store", s, "tasks", "import-state", str(state), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["tasks_imported"] == 3 and "imported 3 tasks" in out.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["task", "complete", "t1"], "--intent TEXT is required"),
        (["task", "complete", "bad id", "--intent", "x"], "not a valid task id"),
        (["task", "complete", "t1", "--intent", "x", "--report", "REPORT"], "--report"),
        (["task", "complete", "t1", "--intent", "x", "--report", "MISSING"], "no such file"),
        (["task", "complete", "t1", "--intent", "x", "--at", "noon"], "field 'completed_at'"),
        (["task", "block", "t1"], "--reason TEXT is required"),
        (["task", "unblock", "ghost"], "task 'ghost' has no active blocker"),
        (["task"], "task needs an action"),
        (["tasks", "-n", "-1"], "-n/--window must be a whole number"),
        (["tasks", "import-state"], "needs a FILE.json"),
        (["tasks", "import-state", "BAD"], "invalid JSON at line 1"),
        (["tasks", "import-state", "BINARY"], "binary data"),
    ],
)
def test_cli_bad_input_is_one_line_and_changes_nothing(mem, store_path, tmp_path, args, fragment):
    mem.tasks.complete("existing", "keep", completed_at=T0)
    files = {
        "REPORT": tmp_path / "r.json",
        "BAD": tmp_path / "bad.json",
        "BINARY": tmp_path / "bin.json",
        "MISSING": tmp_path / "missing.json",
    }
    files["REPORT"].write_text("[1, 2]")
    files["BAD"].write_text("{not json")
    files["BINARY"].write_bytes(bytes(range(256)))
    before = wm_snapshot(store_path)
    proc = run_cli("--store", str(store_path), *[str(files.get(a, a)) for a in args])
    one_line_error(proc, fragment)
    assert wm_snapshot(store_path) == before


# -- concurrency ----------------------------------------------------------------------------------

WRITER = """
import sys, time
from memlens import Memory
from memlens.config import load_settings
from memlens.embed import HashEmbedder

path, prefix = sys.argv[1], sys.argv[2]
with Memory.open(path, settings=load_settings(), embedder=HashEmbedder()) as mem:
    mem.tasks.count()
    print("ready", flush=True)
    sys.stdin.readline()  # the test says go once both writers are past their imports and open
    for i in range(50):
        mem.tasks.complete(f"{prefix}-{i:02d}", f"{prefix} step {i}", validation_report={"tests": {"passed": i, "failed": 0}})
        time.sleep(0.002)  # an agent does some work between completions; lets the writers interleave
print("done")
"""


def test_two_processes_complete_concurrently_without_lost_writes(mem, store_path, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = [
        subprocess.Popen([sys.executable, str(script), str(store_path), p], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for p in ("a", "b")
    ]
    try:
        for p in procs:  # both open and waiting: the start line reaches them together
            assert bounded(p.stdout.readline, timeout=120) == "ready\n"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "locked" not in err and out.strip() == "done"
    ids = {t.task_id for t in mem.tasks.all()}
    assert ids == {f"{p}-{i:02d}" for p in "ab" for i in range(50)}
    assert len([a for a in mem.audit(limit=1000) if a["action"] == "task.complete"]) == 100
    assert mem.tasks.generation() == 100
    # the two writers really overlapped in time (their audit sequences interleave)
    order = [a["entry_id"][0] for a in reversed(mem.audit(limit=1000)) if a["action"] == "task.complete"]
    assert order.index("a") < len(order) - 1 - order[::-1].index("b")
    assert order.index("b") < len(order) - 1 - order[::-1].index("a")
    # completion order interleaved or not, the window is a deterministic function of the store
    assert len(mem.tasks.window().tasks) == 5
