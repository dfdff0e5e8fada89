"""The repository explains itself: no file points at a document the repository does not hold.

Code, UI text, tests, snapshots, the demo data and the README state each rule in
plain words instead of citing an outside design document, style guide or
specification section (a reader of this repository has none of them).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("core", "tui", "tests", "data", "screenshots", "README.md", "pyproject.toml", "Makefile")
SKIP_DIRS = {"__pycache__", ".pytest_cache"}
# Citations of documents that live outside the repository. "seed" alone is fine (a random seed, a
# seeded store); a three-digit seed number, a numbered section or a path into the team's docs is not.
CITATION = re.compile(
    r"\b(?:DESIGN|STYLE)\.md\b"
    r"|\bseeds?\s+0\d\d\b"
    r"|\bseeds/"
    r"|§\s*\d"
    r"|(?:\.\./|/work/)shared\b",
    re.IGNORECASE,
)


def citations(root: Path, exclude: frozenset[Path] = frozenset()) -> list[str]:
    """``path:line: text`` for every citation under the scanned parts of ``root``."""
    found = []
    for name in SCANNED:
        top = root / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else []
        for path in files:
            if path.resolve() in exclude or SKIP_DIRS.intersection(path.relative_to(root).parts):
                continue
            data = path.read_bytes()
            if b"\0" in data:
                continue  # binary
            # SVG snapshots write spaces as &#160;
            text = data.decode("utf-8", errors="replace").replace("&#160;", " ")
            for no, line in enumerate(text.splitlines(), 1):
                m = CITATION.search(line)
                if m:
                    found.append(f"{path.relative_to(root)}:{no}: {m.group(0)!r} in {line.strip()[:120]}")
    return found


def test_no_file_cites_a_document_the_repository_does_not_hold():
    found = citations(ROOT, exclude=frozenset({Path(__file__).resolve()}))
    assert not found, "state the rule instead of citing an outside document:\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_citation(tmp_path):
    # Built from pieces, so that this file itself holds no citation for other scanners to find.
    seed, sec, shared, doc = "seed", "\u00a7", "shared", "{}.md".format
    samples = [
        f'"""Context budget ({seed} 004 {sec}7)."""',
        f"# {seed.title()} 001 task 3: the cache",
        f"always included ({seed}&#160;004&#160;{sec}9)",
        f"see {doc('DESIGN')} contracts",
        f"({doc('STYLE')}: checked)",
        f"# {sec}3 retrieval order",
        f"as in ../{shared}/notes",
        f"read /work/{shared}/{seed}s/004.txt",
    ]
    for i, line in enumerate(samples):
        (tmp_path / "core").mkdir(exist_ok=True)
        (tmp_path / "core" / f"m{i}.py").write_text(f"x = 1\n{line}\n")
    (tmp_path / "README.md").write_text("Vectors: standard normal (seed 20260101); a seeded random vector.\n")
    (tmp_path / "core" / "fine.py").write_text(f'label = f"{{rel}} {sec} {{heading}}"  # a section sign before a name\n')
    found = citations(tmp_path)
    assert sorted(f.split(":")[0] for f in found) == sorted(f"core/m{i}.py" for i in range(len(samples)))
    assert all(":2:" in f for f in found)
