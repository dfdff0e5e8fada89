"""The maps a newcomer reads first stay true: core/README's layer diagram names every package of the engine on the
row of its layer (the layers tests/test_layering.py enforces), the README's Layout names every folder, and every
file its "Start here" names exists."""

from __future__ import annotations

import re
import subprocess

from tests.test_layering import FACADE, FOUNDATION, ROOT, SUBPACKAGE_LAYER

LAYER_ROWS = {0: "foundation", 1: "store/", 2: "retrieval/", 3: "memory.py", 4: "cli/"}


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end > 0 else len(text)]


def _diagram_rows() -> dict[int, str]:
    """The rows of core/README's layer diagram (the first code block of its Architecture section), by layer."""
    arch = _section((ROOT / "core" / "README.md").read_text(encoding="utf-8"), "## Architecture")
    block = arch.split("```")[1]
    rows = [line for line in block.splitlines() if line.strip() and line.strip() != "↑"]
    out = {}
    for layer, first in LAYER_ROWS.items():
        (row,) = [r for r in rows if r.split()[0] == first]
        out[layer] = row
    return out


def _packages(base: str) -> list[str]:
    """Every package under ``base`` (a folder with ``__init__.py``), as a path relative to ``base``."""
    return sorted(str(p.parent.relative_to(ROOT / base)) for p in (ROOT / base).rglob("__init__.py")
                  if p.parent != ROOT / base)


def test_core_readme_diagram_names_every_package_on_its_layer():
    rows = _diagram_rows()
    for pkg in _packages("core"):
        top = pkg.split("/")[0]
        layer = SUBPACKAGE_LAYER[top]
        named = f"{pkg}/" if "/" in pkg else f"{top}/"
        assert re.search(rf"(^|\s){re.escape(named)}", rows[layer]), f"core/README's diagram: {named} not on the {layer} row"
    for module in FOUNDATION:
        assert module in rows[0].split(), f"core/README's diagram: foundation module {module} not named"
    for module in FACADE:
        assert f"{module}.py" in rows[3], f"core/README's diagram: facade module {module}.py not named"
    assert "tui/" in rows[4] and "mcp/" in rows[4]


def test_readme_layout_names_every_folder():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = _section(readme, "## Layout").split("```")[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    top = {f.split("/")[0] for f in tracked if "/" in f}
    for folder in sorted(top):
        assert re.search(rf"^{re.escape(folder)}/", layout, re.M), f"README Layout: {folder}/ not listed"
    for pkg in _packages("core") + ["tui/" + p for p in _packages("tui")]:
        name = pkg.split("/")[-1] + "/"
        assert name in layout, f"README Layout: {pkg}/ not named"
    assert readme.index("## Layout") < readme.index("## A short tour")  # near the top, not after the benchmarks


def test_start_here_names_files_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = _section(readme, "## Start here")
    assert len([line for line in start.splitlines() if line.strip()]) <= 12
    named = re.findall(r"`((?:core/|tui/)?[\w/]+\.py)", start)
    assert len(named) >= 8
    folder = "core"
    for path in named:  # a bare name (`plan.py`) lives in the folder of the path named before it
        if "/" in path and not path.startswith(("core/", "tui/")):
            path = f"core/{path}"
        elif "/" not in path:
            path = f"{folder}/{path}"
        assert (ROOT / path).is_file(), f"README Start here names {path}, which does not exist"
        folder = path.rpartition("/")[0]
