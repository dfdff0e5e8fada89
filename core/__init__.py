"""memlens: agent memory on one SQLite file, with every retrieval explained.

    from memlens import Memory
    with Memory.open("memory.db") as mem:
        mem.add("Callbacks must not block.", wing="lifecore_ros2", type="invariant")
        bundle = mem.search("blocking callbacks", active_wing="lifecore_ros2")

Importing this package is cheap: heavy modules (numpy, the model, pydantic
models) load when first used, and textual/rich are never imported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Memory", "Entry", "Bundle", "Result", "Trace", "MemlensError", "parse_query", "__version__"]

if TYPE_CHECKING:
    from .errors import MemlensError
    from .memory import Memory
    from .models import Entry
    from .retrieval.query import parse as parse_query
    from .retrieval.search import Bundle, Result, Trace

_LAZY = {
    "Memory": ("memory", "Memory"),
    "Entry": ("models", "Entry"),
    "Bundle": ("retrieval.search", "Bundle"),
    "Result": ("retrieval.search", "Result"),
    "Trace": ("retrieval.search", "Trace"),
    "MemlensError": ("errors", "MemlensError"),
    "parse_query": ("retrieval.query", "parse"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'memlens' has no attribute {name!r}")
