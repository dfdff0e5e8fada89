"""Real material for the ingestion tests, none of it written here.

- Markdown: the long descriptions (READMEs) that installed packages ship in their
  ``*.dist-info/METADATA``, with the package's own one-line ``Summary`` as a question.
- HTML: libffi's manual pages, shipped by the system (``/usr/share/doc/libffi8/html``).
- PDF: the shared-mime-info specification shipped by the system.
- Code: Python modules of the standard library and of installed packages.

A test whose material is missing on this machine is skipped, naming what is missing.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import shutil
from pathlib import Path

import pytest

# dependencies of memlens (installed wherever its tests run) whose READMEs are Markdown
PACKAGES = ("sentence-transformers", "urllib3", "textual", "charset-normalizer", "rich", "trafilatura", "platformdirs",
            "watchfiles", "onnx", "numpy", "sympy", "starlette", "markdown-it-py", "tree-sitter", "torch", "pydantic",
            "huggingface_hub", "transformers", "idna", "attrs", "pypdf", "htmldate", "uvicorn", "courlan", "tokenizers")
HTML_DIR = Path("/usr/share/doc/libffi8/html")
PDF_FILE = Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")


def readmes(folder: Path, limit: int = 25) -> dict[str, str]:
    """Write installed packages' Markdown READMEs into ``folder`` as NAME.md; returns {file name: the package's Summary}."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            meta = md.metadata(name)
        except md.PackageNotFoundError:
            continue
        body = meta.get_payload() or ""
        summary = (meta.get("Summary") or "").strip()
        if "markdown" not in (meta.get("Description-Content-Type") or "") or len(body) < 2000 or len(summary) < 15:
            continue
        fname = f"{name.lower().replace('_', '-')}.md"
        (folder / fname).write_text(body, encoding="utf-8")
        out[fname] = summary
        if len(out) >= limit:
            break
    if len(out) < min(8, limit):
        pytest.skip(f"only {len(out)} installed packages ship a Markdown README")
    return out


def html_pages(folder: Path, limit: int = 12) -> list[Path]:
    if not HTML_DIR.is_dir():
        pytest.skip(f"no HTML manual at {HTML_DIR}")
    folder.mkdir(parents=True, exist_ok=True)
    pages = sorted(p for p in HTML_DIR.glob("*.html") if p.stat().st_size > 3000)[:limit]
    if len(pages) < 4:
        pytest.skip(f"too few HTML pages in {HTML_DIR}")
    return [Path(shutil.copy(p, folder / p.name)) for p in pages]


def pdf_file(folder: Path) -> Path:
    if not PDF_FILE.is_file():
        pytest.skip(f"no PDF at {PDF_FILE}")
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(PDF_FILE, folder / PDF_FILE.name))


def stdlib_package(name: str) -> Path:
    import importlib

    mod = importlib.import_module(name)
    return Path(os.path.dirname(mod.__file__ or ""))


def code_workspace(folder: Path, packages: tuple[str, ...] = ("email", "json", "http")) -> Path:
    """A workspace holding copies of real Python packages (their .py files only)."""
    for name in packages:
        src = stdlib_package(name)
        for path in sorted(src.rglob("*.py")):
            rel = path.relative_to(src.parent)
            if "__pycache__" in rel.parts or "test" in rel.parts:
                continue
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    return folder


def strip_module_docstring(path: Path) -> str | None:
    """Remove a module's docstring from the file (blank lines in its place); returns its first line."""
    text = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    if not tree.body or not isinstance(tree.body[0], ast.Expr) or not isinstance(getattr(tree.body[0], "value", None),
                                                                                  ast.Constant):
        return None
    node = tree.body[0]
    doc = node.value.value
    if not isinstance(doc, str) or not doc.strip():
        return None
    lines = text.split("\n")
    for i in range(node.lineno - 1, node.end_lineno or node.lineno):
        lines[i] = ""
    path.write_text("\n".join(lines), encoding="utf-8")
    return doc.strip().split("\n")[0].strip()
