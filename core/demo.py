"""The demo memory shipped with the package: entries (``demo.jsonl``) and a task history.

``memlens demo`` and the app's first-run offer load it into an empty store.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlens.memory import Memory

QUERY = "callbacks blocking"  # the search ``memlens demo`` runs once the demo is loaded
WING = "lifecore_ros2"
K = 8


def demo_file() -> Path:
    """The demo entries, as JSONL."""
    from importlib.resources import files

    return Path(str(files("memlens.data") / "demo.jsonl"))


def load_entries(mem: Memory) -> dict[str, Any]:
    """Import the demo entries (the import report)."""
    return mem.import_jsonl(demo_file())


def load_tasks(mem: Memory) -> dict[str, Any] | None:
    """Load the demo's working memory (completed tasks and blockers); the report, or None if there is none."""
    from memlens.working.tasks import load_demo  # re-exported there; importing task_state first would close its cycle

    return load_demo(mem)


def load(mem: Memory) -> dict[str, Any]:
    """Entries, then tasks; the entries' import report."""
    report = load_entries(mem)
    load_tasks(mem)
    return report
