"""What the ``memlens`` command prints for a person carries no terminal control sequence.

Much of what the CLI shows is text memlens did not write: stored entries, page
text, file names, headings, a model's answer, errors quoting any of these. A
byte like ESC in it would reach the terminal as a command (clear the screen,
set the window title, rewrite a status line with ``\\r``). Every command that
prints for a person therefore writes through :class:`TerminalText`, which
passes its text through ``memlens.visible.for_terminal`` (streamed writes too:
each control character is dropped wherever a write splits a sequence).
Output for programs (``--json``, JSONL, OpenTelemetry spans) is left exactly as
it is: JSON escapes control characters itself. memlens's own progress lines,
which move the cursor on purpose, go to :func:`progress_stream`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from memlens.visible import for_terminal

LONG_RUNNING = (None, "tui", "mcp")  # the app owns the terminal; the MCP server's stdout is its wire


class TerminalText:
    """A text stream that drops control sequences and invisible characters from what is written to it."""

    def __init__(self, stream: TextIO) -> None:
        self.unfiltered = stream

    def write(self, text: str) -> int:
        self.unfiltered.write(for_terminal(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self.unfiltered, name)


def machine_output(args: argparse.Namespace) -> bool:
    """Whether this command's stdout is for a program (JSON, JSONL, spans), left byte for byte as it is."""
    return (args.command == "export" or bool(getattr(args, "json", False)) or bool(getattr(args, "queries", None))
            or getattr(args, "format", None) == "openinference")


@contextmanager
def for_people(args: argparse.Namespace) -> Iterator[None]:
    """stdout (unless it is for a program) and stderr filtered through :class:`TerminalText` while a command runs."""
    if args.command in LONG_RUNNING:
        yield
        return
    saved = sys.stdout, sys.stderr
    if not machine_output(args):
        sys.stdout = TerminalText(sys.stdout)
    sys.stderr = TerminalText(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def progress_stream() -> TextIO:
    """stderr as it is, for memlens's own progress lines (``\\r`` and erase-line on purpose, no outside text)."""
    err = sys.stderr
    return err.unfiltered if isinstance(err, TerminalText) else err


def count(n: int, one: str, many: str | None = None) -> str:
    """``1 entry``, ``2 entries``: a number with its noun agreeing (``many`` when adding an s is wrong)."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"
