"""Writes made by another process, for tests that check a long-lived ``Memory`` sees them (its caches are checked
against the store, not against its own writes only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_WRITER = """
import sys
from memlens import Memory
from memlens.embed import HashEmbedder
with Memory.open(sys.argv[1], embedder=HashEmbedder()) as m:
    if sys.argv[2] == "add":
        print(m.add(sys.argv[3], wing=sys.argv[4]).id)
    elif sys.argv[2] == "status":
        m.set_status(sys.argv[3], sys.argv[4])
    elif sys.argv[2] == "title":
        m.update(sys.argv[3], title=sys.argv[4])
    else:
        m.delete(sys.argv[3])
"""


def write(path: Path | str, *args: str) -> str:
    """Run one write in a fresh process: ``add TEXT WING`` (prints the new id), ``status ID STATUS``,
    ``title ID TITLE`` or ``delete ID``; returns what it printed."""
    proc = subprocess.run([sys.executable, "-c", _WRITER, str(path), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()
