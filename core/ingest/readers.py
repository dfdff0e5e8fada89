"""Documents into chunks: Markdown (split at headings), HTML (trafilatura), plain text and PDF (pypdf).

Each reader takes the file's bytes and returns ``(chunks, info)``; a file that
cannot be read as its type raises ``Unreadable`` with the reason, which the
pipeline reports as a skip. Nothing here touches the network: trafilatura
reads the local file's text, never a URL.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

from memlens.ingest.chunking import Chunk, TokenCounter, blocks_of, pack_blocks, text_budget

PARSER_VERSIONS = {"markdown": 2, "html": 3, "text": 1, "pdf": 1, "code": 2}  # code 2: long lines cut into pieces;
# markdown 2: front matter left out; html 3: a code block opened inside a list item no longer hides later headings
MARKDOWN = frozenset({".md", ".markdown", ".mdown", ".mkd"})
HTML = frozenset({".html", ".htm", ".xhtml"})
PDF = frozenset({".pdf"})
TEXT = frozenset({".txt", ".text", ".rst", ".adoc"})
TITLE_MAX = 200
_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")


class Unreadable(Exception):
    """The file cannot be read as its type; the message is the skip reason."""


def reason(exc: BaseException) -> str:
    """A parser's error in one short line: its type and the start of its message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:120]}" if text else type(exc).__name__


def parser_for(path: str | Path) -> str | None:
    """``markdown``, ``html``, ``pdf`` or ``text`` by extension; None for anything else."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    for name, exts in (("markdown", MARKDOWN), ("html", HTML), ("pdf", PDF), ("text", TEXT)):
        if ext in exts:
            return name
    return None


def decode(data: bytes) -> str:
    """UTF-8 text (a BOM is dropped); Unreadable for a binary or undecodable file."""
    if b"\x00" in data[:8192]:
        raise Unreadable("binary (a NUL byte in the first 8 KB)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _title(*parts: str) -> str:
    t = " > ".join(p.strip() for p in parts if p and p.strip())
    return t if len(t) <= TITLE_MAX else t[: TITLE_MAX - 1] + "…"


def _heading_sections(lines: list[str]) -> list[tuple[list[str], int, list[str]]]:
    """(heading path, first body line number, body lines) for each section of a Markdown text."""
    sections: list[tuple[list[str], int, list[str]]] = []
    path: list[tuple[int, str]] = []
    body: list[str] = []
    body_start = 1
    fence: str | None = None

    def close() -> None:
        if any(b.strip() for b in body):
            sections.append(([h for _, h in path], body_start, list(body)))

    i = 0
    while i < len(lines):
        line = lines[i]
        f = _FENCE.match(line)
        if f:
            fence = None if fence and line.strip().startswith(fence) else (fence or f.group(1))
        level, text = 0, ""
        if fence is None and not f:
            m = _ATX.match(line)
            if m:
                level, text = len(m.group(1)), m.group(2)
            elif i + 1 < len(lines) and line.strip() and not line.startswith((" ", "\t", "-", "*", ">", "|")):
                s = _SETEXT.match(lines[i + 1])
                if s and (not body or not body[-1].strip()):
                    level, text = (1 if s.group(1)[0] == "=" else 2), line.strip()
                    i += 1
        if level:
            close()
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, text))
            body, body_start = [], i + 2
        else:
            body.append(line)
        i += 1
    close()
    return sections


FRONT_MATTER_LINES = 200  # a front matter block closes within this many lines, or the file has none


def front_matter_blanked(lines: list[str]) -> list[str]:
    """``lines`` with a leading front matter block (``---`` … ``---`` or ``...``, as static site generators write
    it) blanked: it is metadata, not text to search. Blank lines keep the chunks' line numbers true."""
    if not lines or lines[0].rstrip() != "---":
        return lines
    for end in range(1, min(len(lines), FRONT_MATTER_LINES)):
        if lines[end].rstrip() in ("---", "..."):
            return [""] * (end + 1) + lines[end + 1 :]
    return lines


def read_markdown(text: str, doc_title: str, count: TokenCounter) -> list[Chunk]:
    chunks = []
    for heads, first, body in _heading_sections(text.split("\n")):
        title = _title(doc_title, *heads)
        for piece, lo, hi in pack_blocks(blocks_of(body, first), text_budget(count, title), count):
            chunks.append(Chunk(title, piece, {"heading_path": heads, "lines": [lo, hi]}))
    return chunks


def read_text(text: str, doc_title: str, count: TokenCounter) -> list[Chunk]:
    title = _title(doc_title)
    return [Chunk(title, piece, {"lines": [lo, hi]})
            for piece, lo, hi in pack_blocks(blocks_of(text.split("\n")), text_budget(count, title), count)]


_CLASS = "contains(concat(' ', normalize-space(@class), ' '), ' {} ')"
# boilerplate trafilatura may keep: landmark roles, header/footer/navigation blocks by class, and blocks of
# pagination links (rel next/prev/up), as generated manuals (texinfo, sphinx, javadoc) put above each page
BOILERPLATE_XPATH = [
    "//*[@role='navigation' or @role='banner' or @role='contentinfo' or @role='search']",
    "//*[" + " or ".join(_CLASS.format(c) for c in ("header", "footer", "navbar", "nav-panel", "navigation",
                                                    "breadcrumb", "breadcrumbs", "related", "sphinxsidebar")) + "]",
    "//*[a[@rel='next' or @rel='prev' or @rel='up']]",
]


def read_html(text: str, doc_title: str, count: TokenCounter) -> tuple[list[Chunk], dict[str, Any]]:
    """Main text only (navigation, footers and other boilerplate removed), as Markdown, split at its headings."""
    import trafilatura
    from trafilatura.metadata import extract_metadata

    # fast: trafilatura's own extractor without its slower fallbacks (readability, justext), a fifth of the time
    main = trafilatura.extract(text, output_format="markdown", include_comments=False, include_tables=True,
                               include_links=False, include_images=False, prune_xpath=BOILERPLATE_XPATH, fast=True)
    if not main or not main.strip():
        raise Unreadable("no main text found in the HTML")
    info: dict[str, Any] = {}
    meta = extract_metadata(text, extensive=False)  # not extensive: no date guessing over the whole page
    if meta is not None:
        for key in ("title", "author", "date", "sitename", "description"):
            value = getattr(meta, key, None)
            if isinstance(value, str) and value.strip():
                info[key] = value.strip()[:500]
    return read_markdown(_fences_apart(main), info.get("title") or doc_title, count), info


def _fences_apart(md: str) -> str:
    """trafilatura's Markdown with every code fence on a line of its own. A ``<code>`` block of several lines inside
    a list item or paragraph comes out as ``text ```\n…\n```\n``: its opening fence ends a line of text, which
    Markdown does not read as a fence, so its closing one opened a block instead, and every heading after it was
    read as code and every ``# comment`` in later code as a heading (Node's all.html: 561 chunks under one)."""
    out: list[str] = []
    inside = False
    for line in md.split("\n"):
        if _FENCE.match(line):
            inside = not inside
        elif not inside and line.rstrip().endswith("```") and line.count("```") % 2 == 1:
            out += [line.rstrip()[:-3].rstrip(), "```"]
            inside = True
            continue
        out.append(line)
    return "\n".join(out)


def read_pdf(data: bytes, doc_title: str, count: TokenCounter) -> tuple[list[Chunk], dict[str, Any]]:
    """Page by page: each chunk knows its page."""
    try:
        from pypdf import PdfReader
    except ImportError:  # pragma: no cover - a declared dependency
        raise Unreadable("reading PDF needs pypdf (pip install pypdf)") from None
    import logging

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise Unreadable("encrypted PDF")
        info: dict[str, Any] = {}
        meta = reader.metadata
        if meta is not None and isinstance(meta.title, str) and meta.title.strip():
            info["title"] = meta.title.strip()[:500]
        title = _title(info.get("title") or doc_title)
        chunks = []
        for number, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").replace("\x00", "")
            for piece, _, _ in pack_blocks(blocks_of(text.split("\n")), text_budget(count, title), count):
                chunks.append(Chunk(title, piece, {"page": number}))
        info["pages"] = len(reader.pages)
    except Unreadable:
        raise
    except Exception as exc:  # any fault of the file (pypdf's limits on decompression bombs included) is a skip
        raise Unreadable(f"unreadable PDF ({reason(exc)})") from None
    return chunks, info


def read_document(path: Path, data: bytes, parser: str, count: TokenCounter) -> tuple[list[Chunk], dict[str, Any]]:
    """Chunks of a document file and what was learnt about it (title, author, pages…)."""
    doc_title = path.name
    if parser == "pdf":
        return read_pdf(data, doc_title, count)
    text = decode(data)
    if parser == "html":
        return read_html(text, doc_title, count)
    if parser == "markdown":  # a Markdown file's own front matter (not what an HTML page is converted to)
        return read_markdown("\n".join(front_matter_blanked(text.split("\n"))), doc_title, count), {}
    return read_text(text, doc_title, count), {}
