"""Working memory: recent completed tasks and active blockers.

An agent loses the thread when it only sees its last task. ``WorkingMemory``
keeps, in the same store as the entries, every completed task (bounded)
and every blocker, and renders the **sliding window** an agent receives at the
top of its context::

    ## Recent Task History
    1. task-042: "Implement user authentication module" (completed: 2026-01-11T10:00Z, ✓ success)
    2. task-043: "Add JWT validation middleware" (completed: 2026-01-11T10:05Z, ✗ failure)
       tests: 10 passed, 2 failed; errors: 1 (first: "token expiry not checked")
    3. task-044 (completed: 2026-01-11T10:10Z, ✓ success)

    ## Active Blockers
    - task-045: "Waiting for the auth service credentials" (blocked: 2026-01-11T09:00Z)

Use it through ``Memory.tasks``::

    with Memory.open("memory.db") as mem:
        mem.tasks.complete("task-042", "Implement user authentication module",
                           validation_report={"tests": {"passed": 12, "failed": 0}})
        mem.tasks.block("task-045", "Waiting for the auth service credentials")
        prompt_head = mem.tasks.render()        # "" when there is nothing to show

Rules (all writes are one transaction, audited, and bump the ``_tasks``
generation in the ``wings`` table so other processes — the TUI — can notice):

* **Window**: the last ``working_memory.window`` (5) completed tasks by
  ``completed_at``, listed oldest first (the newest is last, next to the work
  that follows). Equal ``completed_at`` are ordered by completion order (the
  audit sequence of the write that stored them), so the order never depends on
  chance. Then *all* active blockers, oldest first. ``render()`` returns ``""``
  when there are neither tasks nor blockers, and a section is left out when it
  is empty; the text has no trailing newline.
* **Opaque tasks** (``requires_context=False``, the default for legacy
  tasks): no intent and no summary are stored on the task, so none can be
  injected; the window shows only id, time and outcome. The intent given to
  ``complete`` is kept in the audit row's ``detail`` so nothing is lost.
* **Summary**: ``summarize(intent, outcome, validation_report)`` is a pure
  function (no model): same input, same text, whatever the key order of the
  report. The report fields it understands are listed in ``report_digest``;
  unknown fields, and known fields of an unexpected shape, are kept in the
  stored report but left out of the summary. When the summary says more than
  "intent — outcome", the extra part is shown under the task in the window.
* **Completing the same task id again** replaces the stored completion (the
  latest call wins, whatever its ``completed_at``); the audit row holds the
  replaced record in ``before``.
* **Completing a blocked task** resolves its active blocker (``resolved_at`` =
  the completion time, or the blocked time if the completion is back-dated
  before it), audited as ``task.unblock`` with ``detail.by = "task.complete"``.
* **Blocking** a task that already has an active blocker is an error (unblock
  it first); **unblocking** a task without an active blocker is an error.
* **Pruning**: after each write only the newest ``working_memory.max_tasks``
  (100) completed tasks are kept, and as many resolved blockers; each pruned
  row is written to the audit (``task.prune``, full record in ``before``).

Audit actions: ``task.complete``, ``task.block``, ``task.unblock``,
``task.prune``, ``task.import``; ``entry_id`` is the task id, ``wing`` is NULL.

Legacy state files (``import_state``) are described in ``memlens.working.task_import``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.errors import NotFoundError, ValidationError
from memlens.limits import MAX_LIST, check_int
from memlens.models import format_ts, utcnow
from memlens.working.task_models import (
    GENERATION_KEY,
    MAX_REPORT_BYTES,
    MAX_TEXT,
    NO_REASON,
    Blocker,
    Task,
    _db_ts,
    _parse_db_ts,
    _row_to_blocker,
    _row_to_task,
    _validate,
    blocker_values,
    check_task_id,
    task_values,
)
from memlens.working.task_report import Outcome, report_digest, summarize
from memlens.working.task_state import parse_state, read_state
from memlens.working.task_window import DETAIL_SHOWN, INTENT_SHOWN, REASON_SHOWN, Window, _quote, render_markdown

if TYPE_CHECKING:
    from memlens.config import Settings
    from memlens.store.base import Writer, Writes


class WorkingMemory:
    """Recent tasks and blockers of one store (``Memory.tasks``). Thread-safe like the store."""

    def __init__(self, store: Writes, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    @property
    def config(self) -> Any:
        return self.settings.working_memory

    # -- reads ---------------------------------------------------------------------------------

    def get(self, task_id: str) -> Task:
        row = self.store.tasks().task(task_id)
        if row is None:
            raise NotFoundError(f"no completed task {task_id!r} in {self.store.path}")
        return _row_to_task(row)

    def count(self) -> int:
        return self.store.tasks().task_count()

    def is_empty(self) -> bool:
        return self.store.tasks().is_empty()

    def _n(self, n: int | None) -> int:
        if n is None:
            return int(self.config.window)
        return check_int("window size", n, 0, MAX_LIST)

    def recent(self, n: int | None = None) -> list[Task]:
        """The last ``n`` (default: ``working_memory.window``) completed tasks, oldest first."""
        n = self._n(n)
        if n == 0:
            return []
        return [_row_to_task(r) for r in self.store.tasks().recent_tasks(n)]

    def all(self) -> list[Task]:
        """Every stored (not pruned) completed task, oldest first."""
        return [_row_to_task(r) for r in self.store.tasks().all_tasks()]

    def blockers(self, active_only: bool = True) -> list[Blocker]:
        """Active blockers (or all, resolved included), oldest first."""
        return [_row_to_blocker(r) for r in self.store.tasks().blockers(active_only)]

    def window(self, n: int | None = None) -> Window:
        """The last ``n`` completed tasks and all active blockers (one read transaction)."""
        n = self._n(n)
        with self.store.tasks().snapshot():  # one snapshot for both reads
            return Window(self.recent(n), self.blockers())

    def render(self, n: int | None = None) -> str:
        """The markdown block an agent receives; ``""`` when there is nothing."""
        return self.window(n).render()

    def generation(self) -> int:
        """Bumped by every working-memory write, in any process."""
        return self.store.generations([GENERATION_KEY])[GENERATION_KEY]

    # -- writes --------------------------------------------------------------------------------

    def complete(
        self,
        task_id: str,
        intent: str | None,
        *,
        outcome: str | Outcome = Outcome.success,
        validation_report: Mapping[str, Any] | None = None,
        requires_context: bool = True,
        completed_at: datetime | str | None = None,
    ) -> Task:
        """Record a completed task (the finalizer): capture intent, build the summary, prune.

        With ``requires_context=False`` the task stays opaque: the intent is only
        kept in the audit. Completing an id again replaces the earlier completion;
        completing a blocked task resolves its blocker.
        """
        if isinstance(outcome, str) and outcome.strip().lower() not in ("success", "failure"):
            raise ValidationError(f"outcome must be 'success' or 'failure', got {outcome!r}")
        if requires_context and (intent is None or (isinstance(intent, str) and not intent.strip())):
            raise ValidationError("an intent is required: what the task was for, in a sentence (or mark it "
                                  "requires_context=false to keep it out of agents' context)")
        record: dict[str, Any] = {
            "task_id": task_id,
            "intent": intent,
            "outcome": outcome,
            "requires_context": requires_context,
            "validation_report": validation_report,
            "completed_at": completed_at if completed_at is not None else utcnow(),
        }
        if not isinstance(requires_context, bool):
            raise ValidationError("requires_context must be true or false")
        task: Task = _validate(Task, record)
        withheld = intent.strip() if (not requires_context and isinstance(intent, str) and intent.strip()) else None
        with self.store.write() as w:
            seq = self._put_task(w, task, "task.complete", {"intent": withheld} if withheld else None)
            last = self._resolve_on_complete(w, task) or seq
            last = self._prune(w) or last
            w.bump({GENERATION_KEY}, last)
        return task

    def block(self, task_id: str, reason: str, blocked_at: datetime | str | None = None) -> Blocker:
        """Mark a task blocked; an already blocked task must be unblocked first."""
        blocker: Blocker = _validate(
            Blocker, {"task_id": task_id, "reason": reason, "blocked_at": blocked_at if blocked_at is not None else utcnow()}
        )
        with self.store.write() as w:
            row = w.tasks.active_blocker(blocker.task_id)
            if row is not None:
                old = _row_to_blocker(row[1:])
                raise ValidationError(
                    f"task {blocker.task_id!r} is already blocked since {format_ts(old.blocked_at)} "
                    f"({_quote(old.reason, 80)}); unblock it first"
                )
            seq = w.audit("task.block", blocker.task_id, None, None, blocker.to_record())
            w.tasks.insert_blocker(blocker_values(blocker))
            w.bump({GENERATION_KEY}, seq)
        return blocker

    def unblock(self, task_id: str, resolved_at: datetime | str | None = None) -> Blocker:
        """Resolve the task's active blocker; an error if it has none."""
        when = _validate(Blocker, {"task_id": task_id, "reason": "-", "blocked_at": resolved_at or utcnow()})
        task_id, when = when.task_id, when.blocked_at
        with self.store.write() as w:
            row = w.tasks.active_blocker(task_id)
            if row is None:
                active = w.tasks.active_task_ids(6)
                known = ", ".join(active[:5]) + (", …" if len(active) > 5 else "") if active else "none"
                raise NotFoundError(f"task {task_id!r} has no active blocker (active blockers: {known})")
            before = _row_to_blocker(row[1:])
            after, seq = self._resolve(w, row[0], before, when, "unblock", None)
            last = self._prune(w) or seq
            w.bump({GENERATION_KEY}, last)
        return after

    # -- write helpers (inside a transaction) ---------------------------------------------------

    def _put_task(self, w: Writer, task: Task, action: str, detail: dict[str, Any] | None) -> int:
        row = w.tasks.task(task.task_id)
        before = _row_to_task(row).to_record() if row else None
        seq = w.audit(action, task.task_id, None, before, task.to_record(), detail)
        w.tasks.put_task(task_values(task), seq)
        return seq

    @staticmethod
    def _resolve(
        w: Writer, rowid: int, before: Blocker, when: datetime, how: str, detail: dict[str, Any] | None
    ) -> tuple[Blocker, int]:
        resolved_at = max(when, before.blocked_at)
        after = before.model_copy(update={"resolved_at": resolved_at, "resolution": how})
        w.tasks.resolve_blocker(rowid, _db_ts(resolved_at), how)
        seq = w.audit("task.unblock", before.task_id, None, before.to_record(), after.to_record(), detail)
        return after, seq

    def _resolve_on_complete(self, w: Writer, task: Task) -> int | None:
        row = w.tasks.active_blocker(task.task_id)
        if row is None:
            return None
        _, seq = self._resolve(w, row[0], _row_to_blocker(row[1:]), task.completed_at, "complete", {"by": "task.complete"})
        return seq

    def _prune(self, w: Writer) -> int | None:
        """Keep the newest ``max_tasks`` tasks and as many resolved blockers; audit each removal."""
        keep = int(self.config.max_tasks)
        last = None
        for row in w.tasks.tasks_beyond(keep):
            task = _row_to_task(row)
            last = w.audit("task.prune", task.task_id, None, task.to_record(), None, {"max_tasks": keep})
            w.tasks.delete_task(task.task_id)
        for row in w.tasks.resolved_beyond(keep):
            b = _row_to_blocker(row[1:])
            last = w.audit("task.prune", b.task_id, None, b.to_record(), None, {"max_tasks": keep, "blocker": True})
            w.tasks.delete_blocker(row[0])
        return last

    # -- backfill ----------------------------------------------------------------------------------

    def import_state(self, source: str | Path, *, parsed: tuple[str, Any] | None = None) -> dict[str, Any]:
        """Load a legacy state file (the format is described in ``memlens.working.task_state``), all or nothing.

        ``parsed``: the file's (name, JSON) already read by ``read_state`` (the CLI checks it before opening a store).
        """
        name, obj = parsed if parsed is not None else read_state(source)
        tasks, blockers, info = parse_state(obj, name)
        report = {
            "source": name,
            "tasks_imported": 0,
            "tasks_replaced": 0,
            "tasks_unchanged": 0,
            "blockers_imported": 0,
            "blockers_updated": 0,
            "blockers_unchanged": 0,
            "backfilled": info["backfilled"],
            "pruned": 0,
            "ignored_fields": info["ignored_fields"],
        }
        with self.store.write() as w:
            last = None
            for index, task, withheld in tasks:
                row = w.tasks.task(task.task_id)
                if row is not None and _row_to_task(row).to_record() == task.to_record():
                    report["tasks_unchanged"] += 1
                    continue
                report["tasks_replaced" if row else "tasks_imported"] += 1
                detail = {"source": name, "item": index, **({"intent": withheld} if withheld else {})}
                last = self._put_task(w, task, "task.import", detail)
            for index, b in blockers:
                row = w.tasks.blocker_at(b.task_id, _db_ts(b.blocked_at))
                if row is not None:
                    old = _row_to_blocker(row[1:])
                    same = old.reason == b.reason and old.resolved_at == b.resolved_at
                    if same:
                        report["blockers_unchanged"] += 1
                        continue
                    if b.active:
                        self._check_no_other_active(w, b, name, index, exclude=row[0])
                    how = None if b.active else (old.resolution if old.resolved_at else "import")
                    new = b.model_copy(update={"resolution": how})
                    resolved = _db_ts(new.resolved_at) if new.resolved_at else None
                    w.tasks.update_blocker(row[0], new.reason, resolved, new.resolution)
                    last = w.audit(
                        "task.import", b.task_id, None, old.to_record(), new.to_record(), {"source": name, "item": index}
                    )
                    report["blockers_updated"] += 1
                    continue
                if b.active:
                    self._check_no_other_active(w, b, name, index)
                new = b.model_copy(update={"resolution": "import"}) if b.resolved_at else b
                last = w.audit("task.import", b.task_id, None, None, new.to_record(), {"source": name, "item": index})
                w.tasks.insert_blocker(blocker_values(new))
                report["blockers_imported"] += 1
            before_prune = w.tasks.task_count()
            last = self._prune(w) or last
            report["pruned"] = before_prune - w.tasks.task_count()
            if last is not None:
                w.bump({GENERATION_KEY}, last)
        return report

    @staticmethod
    def _check_no_other_active(w: Writer, b: Blocker, name: str, index: str, exclude: int | None = None) -> None:
        row = w.tasks.other_active(b.task_id, exclude)
        if row is not None:
            since = format_ts(_parse_db_ts(row[1]))
            raise ValidationError(
                f"{name}: {index}: task {b.task_id!r} already has an active blocker in the store (since {since}); "
                "unblock it first"
            )


# the working-memory API in one place: the records, their checks and the text views are re-exported from the modules
# they live in
__all__ = ["DETAIL_SHOWN", "GENERATION_KEY", "INTENT_SHOWN", "MAX_REPORT_BYTES", "MAX_TEXT", "NO_REASON", "REASON_SHOWN",
           "Blocker", "Outcome", "Task", "Window", "WorkingMemory", "blocker_values", "check_task_id",
           "parse_state", "read_state", "render_markdown", "report_digest", "summarize", "task_values"]
