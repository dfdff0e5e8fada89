"""Imports flow one way, and never in a circle (an AST check of every import in core/ and tui/).

Layers, lowest first; a module may import its own layer or a lower one, never a higher one:

    0 foundation   memlens (the package), errors ids vocab models limits files config profiles
                   trace embed embed_model embed_st bert_onnx attribution
    1 store        memlens.store.*
    2 engine       memlens.retrieval.*, memlens.working.*, memlens.io.*
    3 facade       memlens.memory (and memory_writes) and the engine calls the front ends share (stats, demo, browse)
    4 front ends   memlens.mcp.*, memlens.cli.*, memlens.tui.*

The front ends do not import each other, except that the CLI starts the app and the MCP
server from inside the commands that launch them (a function-level import). Nothing
outside the app imports textual or rich. Imports count at module and function level
alike, and so do those under ``if TYPE_CHECKING:`` for the layers (they never run, but a part
typed against a higher layer depends on it all the same); cycles count the imports that run.

Imports that break these rules today are listed in KNOWN, each with the reason it is
allowed for now. The list only shrinks: an entry that no longer matches a real
violation fails the test, so whoever fixes one also deletes its line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"memlens": ROOT / "core", "memlens.tui": ROOT / "tui"}

FOUNDATION = {
    "errors",
    "ids",
    "vocab",
    "models",
    "limits",
    "files",
    "config",
    "config_source",
    "profiles",
    "trace",
    "embed",
    "embed_model",
    "embed_st",
    "bert_onnx",
    "attribution",
    "compact_json",
    "setting_checks",
    "secrets",
    "untrusted",
    "visible",
    "sigterm",
}
SUBPACKAGE_LAYER = {
    "store": 1,
    "retrieval": 2,
    "working": 2,
    "io": 2,
    "replay": 3,
    "review": 2,
    "web": 2,
    "ingest": 2,
    "assist": 3,
    "mcp": 4,
    "cli": 4,
    "tui": 4,
}
FACADE = {"memory", "memory_writes", "stores", "stats", "demo", "browse"}
LAYER_NAMES = {0: "foundation", 1: "store", 2: "engine", 3: "facade", 4: "front end"}
FRONT_ENDS = ("memlens.cli", "memlens.mcp", "memlens.tui")
UI_TOOLKITS = ("textual", "rich")

# (importer, imported): the import edges that break the rules today. Each is either an upward
# import (a lower layer reaching up) or an edge that closes a cycle. Delete a line when its
# import is gone; never add one for new code.
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    path: Path
    line: int
    typing_only: bool = False  # under ``if TYPE_CHECKING:``

    def where(self) -> str:
        shown = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{shown}:{self.line}: {self.importer} imports {self.imported}"


def _modules() -> dict[str, Path]:
    """Every module under core/ and tui/, by its import name."""
    out: dict[str, Path] = {}
    for package, base in SOURCES.items():
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """All import statements, at any depth, each with whether it sits under ``if TYPE_CHECKING:`` (never run)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append((node, typing_only))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    return found


def _lazy_names() -> dict[str, str]:
    """``from memlens import Memory`` really imports memlens.memory: the package's lazy names (its ``_LAZY``)."""
    tree = ast.parse((SOURCES["memlens"] / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            return {name: f"memlens.{module}" for name, (module, _attr) in ast.literal_eval(node.value).items()}
    raise AssertionError("core/__init__.py has no _LAZY table")


def _imports(modules: dict[str, Path]) -> list[Import]:
    out = []
    lazy = _lazy_names()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, typing_only in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` imports mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules
                           else lazy.get(a.name, base) if base == "memlens" else base for a in node.names]
            for target in dict.fromkeys(targets):
                if target != name:
                    out.append(Import(name, target, path, node.lineno, typing_only))
    return out


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0  # the package itself: lazy names only
    if parts[1] in SUBPACKAGE_LAYER:
        return SUBPACKAGE_LAYER[parts[1]]
    if parts[1] in FOUNDATION:
        return 0
    if parts[1] in FACADE:
        return 3
    raise AssertionError(f"{module} has no layer: add it to FOUNDATION, FACADE or SUBPACKAGE_LAYER in {__file__}")


def _front_end(module: str) -> str | None:
    return next((f for f in FRONT_ENDS if module == f or module.startswith(f + ".")), None)


def _function_level(imp: Import, tree_cache: dict[Path, ast.AST]) -> bool:
    tree = tree_cache.setdefault(imp.path, ast.parse(imp.path.read_text(encoding="utf-8")))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = node.end_lineno or node.lineno
            if node.lineno <= imp.line <= end:
                return True
    return False


def _breaks_rules(imp: Import, trees: dict[Path, ast.AST]) -> str | None:
    """Why this internal import breaks the layer rules, or None."""
    src, dst = _layer(imp.importer), _layer(imp.imported)
    if imp.importer == "memlens" and imp.typing_only:
        return None  # the package names its lazy exports' types (``from memlens import Memory``), nothing more
    if dst > src:
        return f"{LAYER_NAMES[src]} imports {LAYER_NAMES[dst]}"
    a, b = _front_end(imp.importer), _front_end(imp.imported)
    if a and b and a != b:
        launcher = a == "memlens.cli" and b in ("memlens.tui", "memlens.mcp") and _function_level(imp, trees)
        if not launcher:
            return f"front end {a} imports front end {b} (only the CLI may, inside the command that launches it)"
    return None


def _sccs(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _shortest_loop(comp: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest path inside ``comp`` from its first module back to itself (breadth first)."""
    start = min(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & comp):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if child not in prev:
                    prev[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no loop through {start}")


def _scan() -> tuple[dict[str, Path], list[Import]]:
    modules = _modules()
    return modules, _imports(modules)


def _internal(imports: list[Import], modules: dict[str, Path]) -> list[Import]:
    return [i for i in imports if i.imported in modules]


def _run_time(imports: list[Import]) -> list[Import]:
    """The imports that run: two modules naming each other's types (``TYPE_CHECKING``) make no cycle at run time."""
    return [i for i in imports if not i.typing_only]


def _graph(imports: list[Import], skip: Collection[tuple[str, str]] = ()) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for i in imports:
        if (i.importer, i.imported) not in skip:
            graph.setdefault(i.importer, set()).add(i.imported)
            graph.setdefault(i.imported, set())
    return graph


def test_every_module_has_a_layer():
    modules, _ = _scan()
    assert len(modules) > 50  # the scan found the sources
    for name in modules:
        _layer(name)


def test_imports_follow_the_layers():
    modules, imports = _scan()
    trees: dict[Path, ast.AST] = {}
    bad = []
    for imp in _internal(imports, modules):
        why = _breaks_rules(imp, trees)
        if why and (imp.importer, imp.imported) not in KNOWN:
            bad.append(f"{imp.where()} ({why})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycles():
    modules, imports = _scan()
    internal = _run_time(_internal(imports, modules))
    comps = _sccs(_graph(internal, set(KNOWN)))
    sites = {}
    for i in internal:
        sites.setdefault((i.importer, i.imported), i)
    lines = []
    for comp in comps:
        loop = _shortest_loop(comp, _graph(internal, set(KNOWN)))
        lines.append(f"cycle among {len(comp)} modules ({', '.join(sorted(comp))}), for example:")
        lines += [f"  {sites[edge].where()}" for edge in zip(loop, loop[1:])]
    assert not lines, "import cycles (function-level imports count):\n" + "\n".join(lines)


def test_known_violations_are_still_real():
    """A KNOWN entry must still be an import that breaks the layers or closes a cycle; else delete it."""
    modules, imports = _scan()
    internal = _internal(imports, modules)
    trees: dict[Path, ast.AST] = {}
    edges = {(i.importer, i.imported): i for i in internal}
    cyclic = _sccs(_graph(_run_time(internal)))
    stale = []
    for edge in sorted(KNOWN):
        imp = edges.get(edge)
        if imp is None:
            stale.append(f"{edge[0]} no longer imports {edge[1]}")
        elif not _breaks_rules(imp, trees) and not any(edge[0] in c and edge[1] in c for c in cyclic):
            stale.append(f"{imp.where()} is now allowed (no layer broken, no cycle)")
    assert not stale, "KNOWN lists violations that are gone; delete them:\n" + "\n".join(stale)


def test_only_the_app_imports_the_ui_toolkit():
    _, imports = _scan()
    bad = [i.where() for i in imports
           if i.imported.split(".")[0] in UI_TOOLKITS and not i.importer.startswith("memlens.tui")]
    assert not bad, "modules outside the app import textual or rich:\n" + "\n".join(bad)


def test_the_app_never_imports_the_cli():
    modules, imports = _scan()
    bad = [i.where() for i in _internal(imports, modules)
           if i.importer.startswith("memlens.tui") and i.imported.startswith("memlens.cli")]
    assert not bad, "\n".join(bad)


_SQL = re.compile(r"\b(SELECT\b.+\bFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+TABLE|PRAGMA)\b", re.S)


def test_the_app_runs_no_sql():
    """The app reaches the store through the engine's calls: no sqlite3, no connection, no SQL text."""
    bad = []
    for name, path in _modules().items():
        if not name.startswith("memlens.tui"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad += [f"{where}: imports {m}" for m in mods if m.split(".")[0] in ("sqlite3", "sqlite_vec")]
            elif isinstance(node, ast.Attribute) and node.attr == "conn":
                bad.append(f"{where}: uses a store connection (.conn)")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL.search(node.value):
                bad.append(f"{where}: SQL text {node.value[:60]!r}")
    assert not bad, "the app touches the database directly:\n" + "\n".join(bad)


def test_the_app_reaches_the_engine_only_through_its_service():
    """Screens and widgets ask ``Lens`` (tui/service.py); none takes the engine's ``Memory`` out of it."""
    bad = []
    for name, path in _modules().items():
        if not name.startswith("memlens.tui") or name == "memlens.tui.service":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("mem", "_mem"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert not bad, "the app reaches past tui/service.py:\n" + "\n".join(bad)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The checker itself: an import inside a function and a relative one are found, a TYPE_CHECKING one as such,
    and the app importing the CLI is named as a violation with its file and line."""
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..widgets import bars\n"
        "if TYPE_CHECKING:\n    from memlens.memory import Memory\n"
        "def f():\n    from memlens.cli.main import main\n",
        encoding="utf-8",
    )
    modules = {"memlens.tui.screens.fake": fake, "memlens.tui.widgets.bars": fake, "memlens.cli.main": fake,
               "memlens.memory": fake}
    found = {(i.imported, i.line) for i in _imports(modules)}
    assert ("memlens.tui.widgets.bars", 2) in found
    assert ("memlens.cli.main", 6) in found
    (typed,) = [i for i in _imports(modules) if i.importer == "memlens.tui.screens.fake" and i.imported == "memlens.memory"]
    assert typed.typing_only and typed.line == 4
    typed_up = Import("memlens.store.fake", "memlens.memory", fake, 4, typing_only=True)
    assert _breaks_rules(typed_up, {}) == "store imports facade"  # a type import counts for the layers
    cli = next(i for i in _imports(modules) if i.imported == "memlens.cli.main")
    assert "front end memlens.tui imports front end memlens.cli" in (_breaks_rules(cli, {}) or "")
    assert cli.where().endswith("fake.py:6: memlens.tui.screens.fake imports memlens.cli.main")
    lazy = tmp_path / "lazy.py"
    lazy.write_text("from memlens import Memory\n", encoding="utf-8")
    (up,) = [i for i in _imports({"memlens.store.lazy": lazy, "memlens.memory": fake}) if i.importer == "memlens.store.lazy"]
    assert up.imported == "memlens.memory"  # a lazy package name counts as the module behind it
    assert _breaks_rules(up, {}) == "store imports facade"
