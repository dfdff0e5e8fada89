"""``memlens task …`` and ``memlens tasks …``: working memory from the command line.

    memlens task complete ID --intent TEXT [--failed] [--report FILE] [--no-context] [--at TIME] [--json]
    memlens task block ID --reason TEXT [--at TIME] [--json]
    memlens task unblock ID [--json]
    memlens tasks [-n N] [--json]                  # the window an agent sees (markdown)
    memlens tasks import-state FILE.json [--json]  # legacy state file, all or nothing ('-' reads stdin)

The rules (replacement, blockers, pruning, the state-file shape) are in
``memlens.working.tasks``. Input is checked before the store is opened, and every
user error is one line on stderr with exit status 2 (``memlens.cli.main.main``).
This module stays cheap to import: the engine loads inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from memlens.cli.common import open_store, store_arg
from memlens.errors import MemlensError, ValidationError


def _json_arg(p: argparse.ArgumentParser, help: str, default: Any = False) -> None:
    p.add_argument("--json", action="store_true", default=default, help=help)


def register(sub: Any) -> None:
    """Add ``task`` and ``tasks`` to the top-level sub-parsers."""
    s = sub.add_parser("task", help="working memory: complete, block or unblock a task")
    store_arg(s)
    actions = s.add_subparsers(dest="task_action", metavar="ACTION")

    c = actions.add_parser("complete", help="record a completed task (captures intent, builds the summary, prunes)")
    store_arg(c)
    c.add_argument("task_id", metavar="ID")
    c.add_argument("--intent", help="what the task set out to do (required unless --no-context)")
    c.add_argument("--failed", action="store_true", help="the task failed (default: success)")
    c.add_argument("--report", metavar="FILE", help="validation report: a JSON object ('-' reads stdin)")
    c.add_argument("--no-context", action="store_true", help="opaque task: no intent or summary in the window")
    c.add_argument("--at", metavar="TIME", help="completion time, ISO-8601 (default: now)")
    _json_arg(c, "print the stored task as JSON")

    b = actions.add_parser("block", help="mark a task blocked")
    store_arg(b)
    b.add_argument("task_id", metavar="ID")
    b.add_argument("--reason", help="why the task cannot proceed")
    b.add_argument("--at", metavar="TIME", help="blocked since, ISO-8601 (default: now)")
    _json_arg(b, "print the blocker as JSON")

    u = actions.add_parser("unblock", help="resolve a task's active blocker")
    store_arg(u)
    u.add_argument("task_id", metavar="ID")
    _json_arg(u, "print the resolved blocker as JSON")

    t = sub.add_parser("tasks", help="show recent tasks and active blockers (the agent's working memory)")
    store_arg(t)
    t.add_argument("-n", "--window", metavar="N", help="completed tasks to show (default: working_memory.window, 5)")
    _json_arg(t, "print {tasks, blockers, markdown} as JSON")
    tsub = t.add_subparsers(dest="tasks_action", metavar="ACTION")
    i = tsub.add_parser("import-state", help="load a legacy state file (completed_tasks, blocked_tasks), all or nothing")
    store_arg(i)
    i.add_argument("file", metavar="FILE.json", nargs="?")
    _json_arg(i, "print the import report as JSON", default=argparse.SUPPRESS)


def _read_report(source: str) -> dict[str, Any]:
    from memlens.files import MiB
    from memlens.working.task_state import read_json_file

    # a stored report is at most 256 KiB serialised (checked when stored); the file may be pretty-printed
    name, obj = read_json_file(source, label="--report ", expected="a JSON object", cap=1 * MiB)
    if not isinstance(obj, dict):
        raise ValidationError(f"--report {name}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _text(value: str | None, option: str, what: str) -> str:
    if value is None or not value.strip():
        raise ValidationError(f"{option} TEXT is required: {what}")
    return value


def _dump(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False))


def cmd_task(args: argparse.Namespace) -> int:
    from memlens.working.task_window import _detail
    from memlens.working.tasks import check_task_id

    action = getattr(args, "task_action", None)
    if action is None:
        raise MemlensError("task needs an action: complete, block or unblock (e.g. memlens task complete ID --intent TEXT)")
    task_id = check_task_id(args.task_id)
    if action == "complete":
        if args.no_context:
            intent = args.intent
        else:
            intent = _text(args.intent, "--intent", "what the task set out to do (or --no-context for an opaque task)")
        report = _read_report(args.report) if args.report else None
        with open_store(args, create=True) as mem:
            task = mem.tasks.complete(
                task_id,
                intent,
                outcome="failure" if args.failed else "success",
                validation_report=report,
                requires_context=not args.no_context,
                completed_at=args.at,
            )
        if args.json:
            _dump(task.to_record())
        else:
            mark = "✓ success" if task.outcome.value == "success" else "✗ failure"
            detail = _detail(task)
            print(f"completed {task.task_id} ({mark})" + (f": {detail}" if detail else ""))
        return 0
    if action == "block":
        reason = _text(args.reason, "--reason", "why the task is blocked")
        with open_store(args, create=True) as mem:
            blocker = mem.tasks.block(task_id, reason, blocked_at=args.at)
        if args.json:
            _dump(blocker.to_record())
        else:
            print(f"blocked {blocker.task_id}: {blocker.reason}")
        return 0
    # unblock: there is nothing to unblock in a store that does not exist
    with open_store(args, create=False) as mem:
        blocker = mem.tasks.unblock(task_id)
    if args.json:
        _dump(blocker.to_record())
    else:
        print(f"unblocked {blocker.task_id}")
    return 0


def _window_size(value: str | None) -> int | None:
    if value is None:
        return None
    from memlens.limits import MAX_LIST

    try:
        n = int(value.strip())
    except ValueError:
        n = -1
    if not 0 <= n <= MAX_LIST:
        raise ValidationError(f"-n/--window must be a whole number from 0 to {MAX_LIST}, got {value[:40]!r}")
    return n


def cmd_tasks(args: argparse.Namespace) -> int:
    as_json = getattr(args, "json", False)
    if getattr(args, "tasks_action", None) == "import-state":
        if not args.file:
            raise MemlensError("tasks import-state needs a FILE.json ('-' reads stdin)")
        import memlens.working.tasks  # noqa: F401  (first: task_state and tasks import each other)
        from memlens.working.task_state import parse_state, read_state

        name, obj = read_state(args.file)
        parse_state(obj, name)  # a bad file is refused before a missing store is created
        with open_store(args, create=True) as mem:
            rep = mem.tasks.import_state(args.file, parsed=(name, obj))
        if as_json:
            _dump(rep)
        print(
            f"imported {rep['tasks_imported']} tasks ({rep['tasks_replaced']} replaced, {rep['tasks_unchanged']} unchanged, "
            f"{rep['backfilled']} backfilled without context) and {rep['blockers_imported']} blockers "
            f"({rep['blockers_updated']} updated, {rep['blockers_unchanged']} unchanged); pruned {rep['pruned']}",
            file=sys.stderr,
        )
        if rep["ignored_fields"]:
            print(f"ignored fields: {', '.join(rep['ignored_fields'])}", file=sys.stderr)
        return 0
    n = _window_size(args.window)
    with open_store(args, create=False) as mem:
        window = mem.tasks.window(n)
    if as_json:
        _dump(window.to_dict())
        return 0
    text = window.render()
    if text:
        print(text)
    else:
        print("no active blockers, and -n 0 shows no completed task" if n == 0 else "no completed tasks and no active blockers",
              file=sys.stderr)
    return 0
