"""What every ``memlens`` command shares: the ``--store`` option, opening the store, printing results."""

from __future__ import annotations

import argparse
from typing import Any


def store_arg(p: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    p.add_argument("--store", metavar="PATH|URI", default=default,
                   help="store file, or a postgresql:// URI (default: $MEMLENS_STORE or the user data dir)")


def open_store(args: argparse.Namespace, *, create: bool = False) -> Any:
    """The store for a command: only commands that write (add, import, demo, tui, task) create a missing one.

    ``args.store`` is a file or a ``postgresql://`` URI; a new SQLite file goes again if the command fails."""
    from memlens.memory import Memory

    if create:  # a store this command creates goes again if the command fails (see memlens.store.newstore)
        from memlens.stores import open_for_write

        return open_for_write(args.store, client="cli")
    return Memory.open(args.store, create=False, client="cli")  # the retrieval log names the CLI's searches "cli"


def format_results(bundle: Any) -> str:
    """A search's results as text: one line per result plus its id, then a summary line."""
    from memlens.visible import one_line

    lines = []
    t = bundle.trace
    for r in bundle.results:
        e = r.entry
        where = f"{e.wing}/{e.room}" if e.room else e.wing
        flags = f"  [{', '.join(r.flags)}]" if r.flags else ""
        if r.vector is not None and not r.vector["fresh"]:
            flags += "  (stale vector: memlens reembed)"
        lines.append(f"{r.rank:>3}  {r.score:6.3f}  {e.type.value:<9} {where:<32} {one_line(e.title)}{flags}")
        lines.append(f"{'':>5}{e.id}")
    if not bundle.results:
        lines.append("no results")
    if t.degraded:
        lines.append(f"-- degraded: {t.degraded['reason']}; used {t.degraded.get('source') or 'nothing'}")
    lines += [f"-- note: {note}" for note in t.notes]
    lines.append(
        f"-- {len(bundle.results)} results from {', '.join(t.wings_searched) or 'no wings'}"
        f" in {t.latency_ms.get('total', 0):.1f} ms"
        f" ({'cache hit' if t.cache_hit else 'cache miss'})"
    )
    return "\n".join(lines)
