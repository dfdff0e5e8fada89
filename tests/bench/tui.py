"""First-frame benchmark of the terminal app (target: the first frame in under 1 s).

``memlens --store PATH`` is spawned in a real pseudo-terminal (120x40,
``TERM=xterm-256color``), a fresh process each run, and the bytes it writes are
fed to a terminal emulator (pyte). Timed from spawn:

* **first frame**: the header with the title ``memlens`` is on the emulated
  screen (the main screen's panes are drawn in the same frame);
* **first-run screen** (empty store only): the "Welcome to memlens" dialog;
* **model ready**: the header says ``model ready`` (the embedding model loads in
  a thread worker after the first frame, so this is the time until a search
  can run at full speed).

Stores: the demo memory (``memlens import data/demo.jsonl``, ~170 entries) and
a path that does not exist yet (the empty store that offers the demo). The
reference row is a bare Textual app with the same ``Header`` in the same
terminal: what Textual itself costs before memlens draws anything.

    python -m tests.bench.tui [--quick]

A full run writes ``tests/bench/results/tui.json`` and the table in tests/bench/README.md between
the ``bench:tui`` markers; a quick run writes its JSON to the temp directory.

``PtyApp`` (the pty driver) is also used by ``tests/tui/test_e2e_pty.py``.
"""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

NAME = "tui"
TARGET_FIRST_FRAME_S = 1.0
MEMLENS = str(Path(sys.executable).parent / "memlens")
DEMO = Path(__file__).resolve().parents[2] / "data" / "demo.jsonl"

BARE_APP = """\
from textual.app import App
from textual.widgets import Header, Footer
class Bare(App):
    TITLE = "memlens"
    def compose(self):
        yield Header()
        yield Footer()
Bare().run()
"""


class PtyApp:
    """A command in a real pseudo-terminal whose screen is read through pyte.

    Single-threaded: output is only read inside ``wait_for`` / ``wait_exit``
    (the kernel buffers it meanwhile), so every wait is bounded by a deadline.
    Use as a context manager: the process is killed on the way out if it is
    still running.
    """

    def __init__(self, argv: list[str], *, cols: int = 120, rows: int = 40, env: dict[str, str] | None = None,
                 cwd: str | None = None) -> None:
        import pyte

        self.argv, self.cols, self.rows, self.cwd = argv, cols, rows, cwd
        self.env = {**(os.environ if env is None else env), "TERM": "xterm-256color", "COLUMNS": str(cols),
                    "LINES": str(rows)}  # fmt: skip
        self.env.pop("NO_COLOR", None)
        self.screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        self.first_output_s: float | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._master = -1
        self._eof = False

    # -- process ------------------------------------------------------------------------------

    def start(self) -> PtyApp:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", self.rows, self.cols, 0, 0))
        self.t0 = time.perf_counter()
        try:
            self.proc = subprocess.Popen(self.argv, stdin=slave, stdout=slave, stderr=slave, env=self.env, cwd=self.cwd,
                                         start_new_session=True, close_fds=True)  # fmt: skip
        finally:
            os.close(slave)
        self._master = master
        return self

    def __enter__(self) -> PtyApp:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self._master >= 0:
            os.close(self._master)
            self._master = -1

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    # -- screen -------------------------------------------------------------------------------

    def text(self) -> str:
        """The emulated screen, one line per row."""
        return "\n".join(self.screen.display)

    def _pump(self, wait_s: float) -> None:
        if self._eof:
            time.sleep(wait_s)
            return
        ready, _, _ = select.select([self._master], [], [], wait_s)
        if not ready:
            return
        try:
            data = os.read(self._master, 1 << 16)
        except OSError:  # EIO: every writer of the slave side has gone
            data = b""
        if not data:
            self._eof = True
            return
        if self.first_output_s is None:
            self.first_output_s = self.elapsed()
        self.raw.extend(data)
        self._stream.feed(data)

    def wait_for(self, until: str | Callable[[str], bool], timeout: float) -> float:
        """Read output until ``until`` (a substring or a predicate on ``text()``) holds; seconds since spawn."""
        check = (lambda s: until in s) if isinstance(until, str) else until
        deadline = time.monotonic() + timeout
        while True:
            if check(self.text()):
                return self.elapsed()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{until!r} not on screen after {timeout} s"
                                   f" (exit code {self.proc.poll() if self.proc else None}); screen:\n{self.text()}")  # fmt: skip
            if self._eof and self.proc is not None and self.proc.poll() is not None:
                raise EOFError(
                    f"{until!r} never appeared; the process exited with {self.proc.returncode}; screen:\n{self.text()}"
                )
            self._pump(0.02)

    def send(self, keys: str | bytes) -> None:
        os.write(self._master, keys.encode() if isinstance(keys, str) else keys)

    def wait_exit(self, timeout: float) -> int:
        """Keep draining output (so the app never blocks on a full pty) until the process ends."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"still running after {timeout} s; screen:\n{self.text()}")
            self._pump(0.02)
        return self.proc.returncode


# -- measuring ----------------------------------------------------------------------------------

CTRL_Q = b"\x11"


def header_drawn(text: str) -> bool:
    return "memlens" in text.split("\n", 1)[0]


def _one_run(argv: list[str], *, empty: bool, bare: bool = False, timeout: float = 60) -> dict[str, float]:
    with PtyApp(argv) as app:
        out: dict[str, float] = {"first_frame": app.wait_for(header_drawn, timeout)}
        out["first_output"] = app.first_output_s or out["first_frame"]
        if not bare:
            if empty:
                out["first_run_screen"] = app.wait_for("Welcome to memlens", timeout)
            out["model_ready"] = app.wait_for("model ready", timeout)
        app.send(CTRL_Q)
        code = app.wait_exit(15)
        if code != 0:
            raise RuntimeError(f"{argv} exited with {code}; screen:\n{app.text()}")
    return out


def _stats(runs: list[dict[str, float]], key: str) -> dict[str, Any]:
    from .common import summary

    return summary([r[key] for r in runs])


def _ms(v: float) -> str:
    return f"{v:,.0f} ms"


def render_table(res: dict[str, Any]) -> str:
    m, r = res["machine"], res["results"]
    target = f"< {TARGET_FIRST_FRAME_S * 1000:.0f} ms"
    verdict = {True: "met", False: "**missed**"}
    rows = [
        "| `memlens` in a 120x40 pty, fresh process | p50 | p95 | target | |",
        "|---|---:|---:|---|---|",
    ]
    for key, label in (("demo", "demo store (167 entries)"), ("empty", "empty store")):
        s = r[key]["first_frame"]
        met = res["targets"][key]["met"]
        rows.append(f"| first frame, {label} | {_ms(s['p50_ms'])} | {_ms(s['p95_ms'])} | p50 {target} | {verdict[met]} |")
    s = r["empty"]["first_run_screen"]
    rows.append(f"| first-run dialog, empty store | {_ms(s['p50_ms'])} | {_ms(s['p95_ms'])} |  |  |")
    s = r["demo"]["model_ready"]
    rows.append(f"| header says *model ready*, demo store | {_ms(s['p50_ms'])} | {_ms(s['p95_ms'])} |  |  |")
    s = r["bare_textual"]["first_frame"]
    rows.append(f"| reference: bare Textual app with the same `Header` | {_ms(s['p50_ms'])} | {_ms(s['p95_ms'])} |  |  |")
    rows.append("")
    rows.append(
        f"`python -m tests.bench.tui`: {res['plan']['runs']} runs each after one warm-up run; time from spawn until the "
        f"header is on the emulated screen (pyte); on an empty store that frame already holds the first-run dialog. "
        f"The model loads in a thread worker after the first frame. {m['cpu_model']}, {m['cores_usable']} cores, "
        f"Python {m['python']}, Textual {res['textual']}; 1-min load average before the run {res['load_before']:.2f}; "
        f"{m['date']}."
    )
    return "\n".join(rows)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    """Run the suite; a full run writes results/tui.json and its tests/bench/README.md block."""
    import importlib.metadata

    from .common import log, machine_info, publish

    t0 = time.perf_counter()
    runs = 3 if quick else 10
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-tui-"))
    try:
        res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                               "textual": importlib.metadata.version("textual"), "plan": {"runs": runs, "size": "120x40"},
                               "load_before": os.getloadavg()[0]}  # fmt: skip
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")
        demo = scratch / "demo.db"
        made = subprocess.run([MEMLENS, "--store", str(demo), "import", str(DEMO)], capture_output=True, text=True, timeout=300)
        if made.returncode != 0:
            raise SystemExit(f"building the demo store failed: {made.stderr}")
        res["demo_import"] = made.stdout.strip()
        bare_script = scratch / "bare_app.py"
        bare_script.write_text(BARE_APP)

        def demo_argv(i: int) -> list[str]:
            path = scratch / f"demo-{i}.db"
            shutil.copy(demo, path)  # every run opens an untouched copy
            return [MEMLENS, "--store", str(path)]

        def empty_argv(i: int) -> list[str]:
            return [MEMLENS, "--store", str(scratch / f"empty-{i}.db")]

        cases: dict[str, tuple[Callable[[int], list[str]], dict[str, bool]]] = {
            "demo": (demo_argv, {"empty": False}),
            "empty": (empty_argv, {"empty": True}),
            "bare_textual": (lambda i: [sys.executable, str(bare_script)], {"empty": False, "bare": True}),
        }
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in cases}
        for argv, kw in cases.values():
            _one_run(argv(-1), **kw)  # warm-up: page cache, ONNX export cache, .pyc files
        for i in range(runs):  # interleaved, so a burst of load elsewhere hits every case alike
            for key, (argv, kw) in cases.items():
                samples[key].append(_one_run(argv(i), **kw))
                log(f"  run {i + 1}/{runs} {key}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in samples[key][-1].items()))
        res["results"] = {key: {k: _stats(rs, k) for k in rs[0]} for key, rs in samples.items()}
        res["samples_s"] = {key: [{k: round(v, 4) for k, v in r.items()} for r in rs] for key, rs in samples.items()}
        res["targets"] = {
            key: {"limit_ms": TARGET_FIRST_FRAME_S * 1000, "measured_p50_ms": res["results"][key]["first_frame"]["p50_ms"],
                  "met": res["results"][key]["first_frame"]["p50_ms"] < TARGET_FIRST_FRAME_S * 1000}
            for key in ("demo", "empty")
        }  # fmt: skip
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        table = render_table(res)
        publish(
            NAME,
            res,
            table,
            official=write and not quick,
            target_lines=[
                f"first frame ({key}) p50: {t['measured_p50_ms']} ms vs {t['limit_ms']:g} ms -> {'met' if t['met'] else 'MISSED'}"
                for key, t in res["targets"].items()
            ],
        )
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from .common import suite_main

    return suite_main("python -m tests.bench.tui", __doc__, run, "3 runs per case; README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
