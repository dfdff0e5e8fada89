"""Helpers shared by the benchmark suites: environment, timing statistics,
machine description, and writing results (JSON + the table in tests/bench/README.md)."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
README = Path(__file__).resolve().parent / "README.md"  # the full tables; the top README has a summary

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def setup_environment() -> dict[str, str]:
    """Make runs reproducible and offline; call before importing memlens or any HF library.

    * nothing may reach the network (HF offline switches);
    * a user's config file and ``MEMLENS_*`` overrides must not change what is
      measured: the engine runs on its defaults;
    * the ONNX export / weights-verification cache is the engine's default
      (platformdirs user cache, outside the repository) unless
      ``MEMLENS_CACHE_DIR`` is already set, so it is shared across runs and never
      committed.
    """
    for key in [k for k in os.environ if k.startswith("MEMLENS_") and k != "MEMLENS_CACHE_DIR"]:
        del os.environ[key]
    os.environ.update(OFFLINE_ENV)
    if "MEMLENS_CACHE_DIR" not in os.environ:
        import platformdirs

        os.environ["MEMLENS_CACHE_DIR"] = platformdirs.user_cache_dir("memlens")
    os.environ["MEMLENS_CONFIG"] = os.devnull  # not a regular file: no config file is read, defaults apply
    return {k: os.environ[k] for k in (*OFFLINE_ENV, "MEMLENS_CACHE_DIR", "MEMLENS_CONFIG")}


# -- statistics ---------------------------------------------------------------------------


def summary(samples_s: list[float]) -> dict[str, Any]:
    """p50/p95/mean/min of durations given in seconds, reported in ms."""
    import numpy as np

    a = np.asarray(samples_s, dtype=np.float64) * 1000.0
    return {
        "n": int(a.size),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "mean_ms": round(float(a.mean()), 3),
        "min_ms": round(float(a.min()), 3),
        "max_ms": round(float(a.max()), 3),
    }


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


# -- machine ------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_state() -> dict[str, Any]:
    def run(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    return {"commit": run("rev-parse", "HEAD") or None, "dirty": bool(run("status", "--porcelain", "--untracked-files=no"))}


def machine_info() -> dict[str, Any]:
    from memlens.store import db

    conn = db.connect(Path(":memory:"))
    try:
        sqlite_version, vec_version = conn.execute("SELECT sqlite_version(), vec_version()").fetchone()
    finally:
        conn.close()
    try:
        mem_kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
    except (OSError, AttributeError):
        mem_kb = 0
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite_version,
        "sqlite_driver": db.driver().__name__,
        "sqlite_vec": vec_version,
        "packages": {
            d: _version(d)
            for d in ("memlens", "sqlite-vec", "sqlean.py", "numpy", "faiss-cpu", "onnxruntime", "tokenizers",
                      "sentence-transformers", "torch", "transformers")
        },
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "git": git_state(),
    }


# -- output -------------------------------------------------------------------------------


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=False)
        fh.write("\n")
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be committed and read
    os.replace(tmp, path)


def write_readme_block(name: str, body: str, readme: Path = README) -> None:
    """Replace what is strictly between the suite's two marker lines; nothing else changes."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = readme.read_text(encoding="utf-8")
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == start]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        raise SystemExit(f"{readme}: expected exactly one {start} line followed by one {end} line")
    new = lines[: starts[0] + 1] + body.strip("\n").split("\n") + lines[ends[0] :]
    readme.write_text("\n".join(new), encoding="utf-8")


def ensure_readme_block(name: str, after: str, readme: Path = README) -> None:
    """Add the empty marker pair of suite ``name`` right after suite ``after``'s end marker if it is missing."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = readme.read_text(encoding="utf-8")
    lines = text.split("\n")
    if any(line.strip() == start for line in lines):
        return
    anchor = [i for i, line in enumerate(lines) if line.strip() == f"<!-- bench:{after}:end -->"]
    if len(anchor) != 1:
        raise SystemExit(f"{readme}: no single <!-- bench:{after}:end --> line to put the {name} block after")
    i = anchor[0] + 1
    readme.write_text("\n".join(lines[:i] + ["", start, end] + lines[i:]), encoding="utf-8")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def publish(name: str, res: dict[str, Any], table: str, *, official: bool, target_lines: list[str]) -> None:
    """Where a run's figures go: results/ and tests/bench/README.md for an official run, the temp dir otherwise."""
    res["readme_table"] = table
    if official:
        write_json(RESULTS / f"{name}.json", res)
        write_readme_block(name, table, README)
        log(f"[{name}] wrote {RESULTS / f'{name}.json'} and the table in {README.relative_to(ROOT)}")
    else:
        out = Path(tempfile.gettempdir()) / f"memlens-bench-{name}-{res['mode']}.json"
        write_json(out, res)
        log(f"[{name}] {res['mode']} run: wrote {out} (README and results/ untouched)")
    print(table)
    for line in target_lines:
        log(f"  target {line}")
    log(f"[{name}] done in {res['duration_s']} s")


def suite_main(prog: str, doc: str | None, run: Any, quick_help: str, argv: list[str] | None = None) -> int:
    """``python -m tests.bench.SUITE [--quick]``: the same entry point for every suite."""
    import argparse

    p = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=quick_help)
    args = p.parse_args(argv)
    setup_environment()  # before memlens is imported: offline, engine defaults (a spawned app inherits it)
    run(quick=args.quick)
    return 0
