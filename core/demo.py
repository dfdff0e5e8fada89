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


def demo_tasks_file() -> Path:
    """The demo task history: completed tasks and blockers, in the legacy state-file shape with full fields."""
    from importlib.resources import files

    return Path(str(files("memlens.data") / "demo_tasks.json"))


def load_tasks(mem: Memory) -> dict[str, Any] | None:
    """Load the demo task history into an empty working memory: the import report; None if it is not empty."""
    if not mem.tasks.is_empty():
        return None
    report: dict[str, Any] = mem.tasks.import_state(demo_tasks_file())
    return report


def load(mem: Memory) -> dict[str, Any]:
    """Entries, then tasks, into an empty store; the entries' import report. A store that holds entries now (the
    app offered the demo when it was empty, and another process wrote since) is left as it is: an error says so."""
    held = mem.count()
    if held:
        from memlens.errors import StoreError

        raise StoreError(f"store {mem.path} holds {held} {'entry' if held == 1 else 'entries'} now (written since it was "
                         "found empty): the demo memory loads only into an empty store; nothing was loaded")
    report = load_entries(mem)
    load_tasks(mem)
    return report
