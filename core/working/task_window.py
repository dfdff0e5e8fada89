"""The sliding window an agent receives: recent tasks, then active blockers, as markdown."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memlens.working.task_models import Blocker, Task
from memlens.working.task_report import Outcome, _one_line

INTENT_SHOWN = 200  # characters of an intent in the window
REASON_SHOWN = 300
DETAIL_SHOWN = 300


@dataclass(frozen=True)
class Window:
    """What an agent sees: recent tasks (oldest first) and active blockers (oldest first)."""

    tasks: list[Task]
    blockers: list[Blocker]

    def render(self) -> str:
        return render_markdown(self.tasks, self.blockers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": [t.to_record() for t in self.tasks],
            "blockers": [b.to_record() for b in self.blockers],
            "markdown": self.render(),
        }



def _minute(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%MZ")


def _quote(text: str, limit: int) -> str:
    return json.dumps(_one_line(text, limit), ensure_ascii=False)


def _detail(task: Task) -> str | None:
    """What the summary adds to "intent — outcome" (the line shown under a task)."""
    if not task.summary or not task.intent:
        return None
    head = f"{_one_line(task.intent)} — {task.outcome.value}"
    summary = _one_line(task.summary)
    if summary == head:
        return None
    if summary.startswith(head + "; "):
        summary = summary[len(head) + 2 :]
    return _one_line(summary, DETAIL_SHOWN)


def render_markdown(tasks: list[Task], blockers: list[Blocker]) -> str:
    """The working-memory block (recent tasks, then active blockers); ``""`` when both lists are empty; no trailing newline."""
    lines: list[str] = []
    if tasks:
        lines.append("## Recent Task History")
        for i, t in enumerate(tasks, 1):
            mark = "✓ success" if t.outcome is Outcome.success else "✗ failure"
            status = f"(completed: {_minute(t.completed_at)}, {mark})"
            if t.requires_context and t.intent:
                lines.append(f"{i}. {t.task_id}: {_quote(t.intent, INTENT_SHOWN)} {status}")
                detail = _detail(t)
                if detail:
                    lines.append(f"{' ' * (len(str(i)) + 2)}{detail}")
            else:
                lines.append(f"{i}. {t.task_id} {status}")
    if blockers:
        if lines:
            lines.append("")
        lines.append("## Active Blockers")
        for b in blockers:
            lines.append(f"- {b.task_id}: {_quote(b.reason, REASON_SHOWN)} (blocked: {_minute(b.blocked_at)})")
    return "\n".join(lines)
