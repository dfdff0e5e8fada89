"""Code chunks (entries of kind ``code``) as the app shows them: ``path:start-end`` and the language of a preview.

The index stores each chunk's file in ``meta.source`` (absolute), its path inside the workspace in ``meta.path``
(when a folder was indexed) and its line range in ``meta.lines``; see ``memlens.ingest``.
"""

from __future__ import annotations

import os
from typing import Any

LANGUAGES = {".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
             ".jsx": "javascript", ".go": "go", ".rs": "rust", ".json": "json", ".toml": "toml", ".yaml": "yaml",
             ".yml": "yaml", ".sh": "bash", ".bash": "bash", ".md": "markdown", ".java": "java", ".css": "css",
             ".html": "html", ".htm": "html", ".sql": "sql", ".xml": "xml"}


def lines_of(entry: Any) -> tuple[int, int] | None:
    lines = (entry.meta or {}).get("lines")
    if isinstance(lines, list) and len(lines) == 2 and all(isinstance(n, int) for n in lines):
        return lines[0], lines[1]
    return None


def location(entry: Any, *, full: bool = False) -> str | None:
    """``path:start-end`` of a code chunk (the workspace-relative path, or the whole one with ``full``), else None."""
    if getattr(entry.kind, "value", entry.kind) != "code":
        return None
    meta = entry.meta or {}
    path = meta.get("source") if full else (meta.get("path") or meta.get("source"))
    span = lines_of(entry)
    if not isinstance(path, str) or span is None:
        return None
    return f"{path}:{span[0]}-{span[1]}"


def language(entry: Any) -> str | None:
    """The syntax to highlight a chunk's text with (by its file's extension), or None for plain text."""
    source = (entry.meta or {}).get("source")
    return LANGUAGES.get(os.path.splitext(source)[1].lower()) if isinstance(source, str) else None
