"""Source code into chunks at syntax boundaries (tree-sitter), or line windows for other text files.

Grammars come from per-language wheels (``tree-sitter-python`` and, when
installed, JavaScript, Go and Rust); nothing is downloaded at run time. A
language without an installed grammar, or a file that does not parse, is cut
into line windows. Every chunk's text is exactly its lines of the file, so the
retrieval gate can tell later whether the file still holds them.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from memlens.ingest.chunking import Chunk, TokenCounter, line_windows, text_budget

# extension -> (language name, grammar module, attribute returning the language pointer)
GRAMMARS: dict[str, tuple[str, str, str]] = {
    ".py": ("python", "tree_sitter_python", "language"),
    ".pyi": ("python", "tree_sitter_python", "language"),
    ".js": ("javascript", "tree_sitter_javascript", "language"),
    ".mjs": ("javascript", "tree_sitter_javascript", "language"),
    ".cjs": ("javascript", "tree_sitter_javascript", "language"),
    ".jsx": ("javascript", "tree_sitter_javascript", "language"),
    ".go": ("go", "tree_sitter_go", "language"),
    ".rs": ("rust", "tree_sitter_rust", "language"),
}
CODE_EXTENSIONS = frozenset({
    *GRAMMARS, ".ts", ".tsx", ".c", ".h", ".cc", ".cpp", ".hpp", ".cxx", ".java", ".kt", ".scala", ".rb", ".php", ".cs",
    ".swift", ".m", ".lua", ".sh", ".bash", ".zsh", ".pl", ".r", ".jl", ".sql", ".css", ".scss", ".vue", ".svelte",
    ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini", ".proto", ".el", ".ex", ".exs", ".erl", ".hs", ".ml", ".zig",
    ".dart", ".groovy", ".gradle", ".cmake", ".mk",
})
# node types that are a unit worth its own chunk, and those whose children should be split further
_DEFINITIONS = {
    "function_definition", "class_definition", "decorated_definition",  # python
    "function_declaration", "class_declaration", "method_definition", "lexical_declaration", "export_statement",  # js
    "method_declaration", "type_declaration",  # go
    "function_item", "impl_item", "struct_item", "enum_item", "trait_item", "mod_item",  # rust
}
_CONTAINERS = {"class_definition", "decorated_definition", "class_declaration", "class_body", "impl_item", "trait_item",
               "mod_item", "block", "declaration_list", "export_statement"}
_parsers: dict[str, Any] = {}
_parsers_lock = threading.Lock()


def language_for(suffix: str) -> str | None:
    g = GRAMMARS.get(suffix.lower())
    return g[0] if g else None


def _parser(suffix: str) -> Any | None:
    spec = GRAMMARS.get(suffix.lower())
    if spec is None:
        return None
    name, module, attr = spec
    with _parsers_lock:
        if name not in _parsers:
            try:
                import tree_sitter

                lang = tree_sitter.Language(getattr(importlib.import_module(module), attr)())
                _parsers[name] = lang
            except Exception:  # grammar wheel not installed or incompatible: line windows instead
                _parsers[name] = None
        lang = _parsers[name]
    if lang is None:
        return None
    import tree_sitter

    return tree_sitter.Parser(lang)  # parsers are cheap and not shared between threads


def _symbol(node: Any) -> str:
    target = node
    if node.type == "decorated_definition":
        target = node.child_by_field_name("definition") or node
    name = target.child_by_field_name("name")
    if name is None and target.type == "impl_item":
        name = target.child_by_field_name("type")
    if name is None:
        return ""
    kind = {"class_definition": "class", "class_declaration": "class", "impl_item": "impl", "struct_item": "struct",
            "trait_item": "trait", "enum_item": "enum"}.get(target.type, "def")
    return f"{kind} {name.text.decode('utf-8', 'replace')}"


def _units(node: Any, count_lines: Any, budget: int, depth: int = 0) -> list[tuple[int, int, str]]:
    """(first row, last row, symbol) spans covering ``node``'s children at syntax boundaries, 0-based rows."""
    spans: list[tuple[int, int, str]] = []
    for child in node.children:
        a, b = child.start_point[0], child.end_point[0]
        if child.end_point[1] == 0 and b > a:
            b -= 1
        if (child.type in _CONTAINERS or child.type in _DEFINITIONS) and count_lines(a, b) > budget and depth < 6:
            inner = child
            if child.type == "decorated_definition":
                inner = child.child_by_field_name("definition") or child
            body = inner.child_by_field_name("body") or next(
                (c for c in inner.children if c.type in _CONTAINERS), None)
            if body is not None and body.children:
                sym = _symbol(child)
                head_end = max(a, body.start_point[0] - 1) if body.start_point[0] > a else a
                if body.start_point[0] > a:
                    spans.append((a, head_end, sym))
                spans += [(x, y, f"{sym} {s}".strip() if sym and s else (s or sym))
                          for x, y, s in _units(body, count_lines, budget, depth + 1)]
                continue
        spans.append((a, b, _symbol(child) if child.type in _DEFINITIONS else ""))
    return spans


def code_chunks(rel: str, text: str, suffix: str, count: TokenCounter) -> tuple[list[Chunk], str]:
    """Chunks of a source file and how it was cut (``tree-sitter:<language>`` or ``lines``)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    language = language_for(suffix)

    def title_for(lo: int, hi: int, symbol: str = "") -> str:
        return f"{rel}:{lo}-{hi}" + (f" {symbol}" if symbol else "")

    parser = _parser(suffix)
    if parser is None or not lines:
        return line_windows(lines, 1, title_for, count), "lines"
    try:
        tree = parser.parse(text.encode("utf-8"))
    except Exception:
        return line_windows(lines, 1, title_for, count), "lines"
    if tree.root_node.has_error and tree.root_node.child_count == 0:
        return line_windows(lines, 1, title_for, count), "lines"
    line_tokens = [count(line) for line in lines]

    def count_lines(a: int, b: int) -> int:
        return sum(line_tokens[a : b + 1])

    budget = text_budget(count, title_for(len(lines), len(lines), "class SomeName def method_name"))
    spans = sorted(_units(tree.root_node, count_lines, budget), key=lambda s: s[0])
    chunks: list[Chunk] = []
    # merge neighbouring small spans (imports, constants, short functions) up to the budget; fill gaps (comments)
    cur: list[int] = []  # [first row, last row]
    cur_syms: list[str] = []

    def label(syms: list[str]) -> str:
        sym = ", ".join(dict.fromkeys(s for s in syms if s))
        return sym if len(sym) <= 80 else sym[:79] + "…"

    def fits(a: int, b: int, syms: list[str]) -> bool:
        return count_lines(a, b) <= text_budget(count, title_for(a + 1, b + 1, label(syms)))

    def flush() -> None:
        if not cur:
            return
        a, b = cur
        sym = label(cur_syms)
        if not fits(a, b, cur_syms):  # one unit larger than the window: line windows inside it
            chunks.extend(line_windows(lines[a : b + 1], a + 1, lambda lo, hi: title_for(lo, hi, sym), count))
        else:
            body = "\n".join(lines[a : b + 1])
            if body.strip():
                chunks.append(Chunk(title_for(a + 1, b + 1, sym), body, {"lines": [a + 1, b + 1]}))
        cur.clear()
        cur_syms.clear()

    def add(a: int, b: int, sym: str) -> None:
        if cur and (not fits(cur[0], b, [*cur_syms, sym]) or (sym and any(cur_syms) and count_lines(a, b) > budget // 2)):
            flush()
        if not cur:
            cur[:] = [a, b]
        else:
            cur[1] = b
        cur_syms.append(sym)

    next_row = 0
    for a, b, sym in spans:
        a = next_row  # comments and blank lines before a unit belong to it; spans never overlap
        if b < a:
            continue
        add(a, b, sym)
        next_row = b + 1
    if next_row < len(lines):
        add(next_row, len(lines) - 1, "")
    flush()
    return chunks, f"tree-sitter:{language}"
