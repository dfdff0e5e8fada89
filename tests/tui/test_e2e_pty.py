"""End to end: the installed ``memlens`` command in a real pseudo-terminal.

Keys go in through the pty's master side; what the app writes is fed to a
terminal emulator (pyte) and the tests read the emulated 120x40 screen. Every
wait is bounded; the child inherits the test environment (temp cache and
config, offline) from ``tests/conftest.py``.
"""

from __future__ import annotations

import re
import shutil

import pytest

from ..bench.tui import CTRL_Q, PtyApp, header_drawn
from ..conftest import MEMLENS

pytestmark = pytest.mark.model

CTRL_C = b"\x03"
START_S = 15  # first frame (well under 1 s on an idle machine; generous for a busy CI box)
SEARCH_S = 20  # model load + search


@pytest.fixture
def store(demo_store, tmp_path):
    path = tmp_path / "demo.db"
    shutil.copy(demo_store, path)
    return path


def _started(app: PtyApp) -> str:
    app.wait_for(lambda s: header_drawn(s) and "Working memory" in s and "Scoped search" in s, START_S)
    return app.text()


def test_type_a_query_see_results_and_quit_with_q(store):
    with PtyApp([MEMLENS, "--store", str(store)]) as app:
        screen = _started(app)
        assert "memlens" in screen.splitlines()[0]

        app.send("callbacks blocking")
        app.wait_for(lambda s: "Callbacks must not block" in s and re.search(r"\d+ results · [\d.]+ ms", s), SEARCH_S)
        app.wait_for(lambda s: "model ready" in s.splitlines()[0], SEARCH_S)  # the header is told in its own message
        screen = app.text()
        assert "callbacks blocking" in screen  # the query as typed, in the input
        status = next(line for line in screen.splitlines() if re.search(r"\d+ results", line))
        assert "cache miss" in status or "cache hit" in status

        # the query input has the focus and takes printable keys: enter hands the focus to the results
        app.send("\r")
        app.wait_for(lambda s: re.search(r"\bq Quit\b", s.splitlines()[-1]), START_S)
        app.send("q")
        assert app.wait_exit(10) == 0
        raw = bytes(app.raw)  # the terminal is given back: alternate screen left, cursor shown again
        assert raw.rfind(b"\x1b[?1049l") > raw.rfind(b"\x1b[?1049h") > -1
        assert raw.rfind(b"\x1b[?25h") > raw.rfind(b"\x1b[?1049h")


def test_ctrl_c_only_says_how_to_quit_and_ctrl_q_quits(store):
    with PtyApp([MEMLENS, "--store", str(store)]) as app:
        _started(app)
        app.send(CTRL_C)
        app.wait_for("Do you want to quit?", START_S)
        assert app.proc is not None and app.proc.poll() is None
        app.send(CTRL_Q)
        assert app.wait_exit(10) == 0


def test_escape_and_q_in_one_read_leave_the_search_box_and_quit(store):
    """Esc and q typed fast reach the app in one read, the same bytes as alt+q: the search box typed q and the app
    stayed open. An arrow's escape sequence still moves the cursor in the box."""
    with PtyApp([MEMLENS, "--store", str(store)]) as app:
        _started(app)
        app.send("callbacks blocking")
        app.wait_for(lambda s: "Callbacks must not block" in s, SEARCH_S)
        app.send("\x1b[D\x1b[DX")  # left, left, X
        app.wait_for("callbacks blockiXng", START_S)
        app.send("\x1bq")
        assert app.wait_exit(10) == 0
