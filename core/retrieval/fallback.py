"""Fallback order when memory cannot answer, so an agent is never left without context:

    memory backend → docs/architecture.md → README.md → workspace text search

The bundle says that retrieval was degraded, why, and which sources were
tried. Workspace search stays inside the workspace (no symlinks out, no
``..``), reads regular files only (a FIFO would block, a device never end),
skips hidden, binary, empty, huge and vendored files, and is bounded in
entries visited, folder depth, files and bytes actually read, so a large
checkout or a hostile one cannot stall an agent. A workspace on ``/proc``,
``/sys`` or ``/dev`` is refused: it holds the system's state, not documents.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from memlens.files import expand_user, on_pseudo_fs
from memlens.models import Entry, EntryType, Kind, Status, utcnow
from memlens.trace import Bundle, Result, Trace

SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", "dist", "build", ".tox",
             ".mypy_cache", ".pytest_cache", ".ruff_cache", "site-packages", ".idea", ".vscode"}
MAX_FILE_BYTES = 512 * 1024
MAX_FILES = 5000
MAX_TOTAL_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 100_000  # names looked at, text or not
MAX_DEPTH = 32
_STOP = {"the", "and", "for", "with", "that", "this", "are", "was", "how", "what", "why", "not", "does", "from", "into"}


def terms(text: str) -> list[str]:
    """Distinct search words, at most MAX_QUERY_TERMS (each one is looked for in every passage)."""
    from memlens.limits import MAX_QUERY_TERMS

    words = dict.fromkeys(w for w in re.findall(r"\w+", text.lower()) if len(w) > 2 and w not in _STOP)
    return list(words)[:MAX_QUERY_TERMS]


def _score(chunk: str, words: list[str]) -> float:
    low = chunk.lower()
    hits = sum(1 for w in words if w in low)
    return hits / len(words) if words else 0.0


def _read_text(path: Path) -> str | None:
    """The text of a regular, non-empty UTF-8 file of at most MAX_FILE_BYTES, else None.

    ``lstat`` first (no FIFO, device or symlink is opened), then a
    non-blocking, no-follow open checked again with ``fstat``; the size cap
    counts the bytes read, since pseudo-files report a size of 0.
    """
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or st.st_size > MAX_FILE_BYTES:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_FILE_BYTES + 1)
        while 0 < len(data) <= MAX_FILE_BYTES:  # os.read may return less than asked
            more = os.read(fd, MAX_FILE_BYTES + 1 - len(data))
            if not more:
                break
            data += more
    except OSError:
        return None
    finally:
        os.close(fd)
    head = data[:8192]
    if not data or len(data) > MAX_FILE_BYTES or b"\x00" in head:
        return None
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not just a character cut at the 8 KiB boundary
            return None
    return data.decode("utf-8", errors="replace")


def _sections(text: str) -> list[tuple[int, int, str, str]]:
    """Markdown split at headings: (first line, last line, heading, body)."""
    lines = text.splitlines()
    out: list[tuple[int, int, str, str]] = []
    start, heading = 0, ""
    for i, line in enumerate(lines + ["# end"]):
        if line.startswith("#") and i > start or i == len(lines):
            body = "\n".join(lines[start:i]).strip()
            if body:
                out.append((start + 1, i, heading, body))
            start, heading = i, line.lstrip("#").strip()
    return out


def _paragraphs(text: str, max_lines: int = 30) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    buf: list[str] = []
    first = 1
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or len(buf) >= max_lines:
            if buf:
                out.append((first, i - 1, "\n".join(buf)))
            buf, first = ([line] if line.strip() else []), (i if line.strip() else i + 1)
        else:
            if not buf:
                first = i
            buf.append(line)
    if buf:
        out.append((first, first + len(buf) - 1, "\n".join(buf)))
    return out


def _result(rel: str, a: int, b: int, title: str, text: str, score: float) -> Result:
    e = Entry.model_construct(
        id=f"workspace:{rel}:{a}-{b}", wing="_workspace", room="", kind=Kind.document, type=EntryType.note,
        status=Status.active, title=title[:120], text=text[:4000], key=None, salience=0.0, overrides=None,
        created_at=utcnow(), updated_at=utcnow(), meta={"path": rel, "lines": [a, b], "source": "workspace fallback"},
    )
    r = Result(entry=e, score=round(score, 6), flags=["fallback"], found_in=["_workspace"])
    r.components.final = r.score
    return r


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root)
        return True
    except (ValueError, OSError):
        return False


def workspace_fallback(bundle: Bundle, workspace: str | os.PathLike[str], text: str, k: int, reason: str) -> None:
    """Fill an empty bundle from the workspace and mark it degraded."""
    root = expand_user(workspace)
    tried: list[dict[str, Any]] = []
    degraded: dict[str, Any] = {"reason": reason, "source": None, "tried": tried, "workspace": str(root)}
    bundle.trace.degraded = degraded
    if not root.is_dir():
        tried.append({"source": str(root), "result": "workspace is not a directory"})
        return
    pseudo = on_pseudo_fs(root)
    if pseudo:
        tried.append({"source": str(root), "result": f"workspace is on a system pseudo-filesystem ({pseudo})"})
        return
    root = root.resolve()
    words = terms(text)
    for rel in ("docs/architecture.md", "README.md"):
        path = root / rel
        if not path.is_file() or not _inside(root, path):
            tried.append({"source": rel, "result": "missing"})
            continue
        content = _read_text(path.resolve())  # a link inside the workspace is read as its target
        if content is None:
            tried.append({"source": rel, "result": "not a readable text file"})
            continue
        secs = _sections(content)
        scored = sorted(((_score(body, words), a, b, h, body) for a, b, h, body in secs), key=lambda x: (-x[0], x[1]))
        hits = [s for s in scored if s[0] > 0] if words else scored[:1]
        if not hits:
            tried.append({"source": rel, "result": "no section matches the query"})
            continue
        bundle.results = [_result(rel, a, b, f"{rel} § {h}" if h else rel, body, sc) for sc, a, b, h, body in hits[:k]]
        tried.append({"source": rel, "result": f"{len(bundle.results)} section(s)"})
        degraded["source"] = rel
        _rank(bundle)
        return
    found = _grep(root, words, k, tried)
    if found:
        bundle.results = found
        degraded["source"] = "workspace search"
        _rank(bundle)


def _grep(root: Path, words: list[str], k: int, tried: list[dict[str, Any]]) -> list[Result]:
    if not words:
        tried.append({"source": "workspace search", "result": "no search terms in the query"})
        return []
    files = total = entries = 0
    stopped = ""
    hits: list[tuple[float, str, int, int, str]] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        entries += len(dirnames) + len(filenames)
        if entries > MAX_ENTRIES:
            stopped = f"stopped after {MAX_ENTRIES} entries"
            break
        deep = len(Path(dirpath).parts) - base_depth >= MAX_DEPTH
        dirnames[:] = [] if deep else sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):  # hidden files (.env, .netrc, ...) stay out of an agent's context
                continue
            path = Path(dirpath) / name
            if not _inside(root, path):
                continue
            content = _read_text(path)
            if content is None:
                continue
            files += 1
            total += len(content.encode("utf-8", errors="replace"))
            if files > MAX_FILES or total > MAX_TOTAL_BYTES:
                stopped = f"stopped at {MAX_FILES} files / {MAX_TOTAL_BYTES >> 20} MiB"
                break
            rel = str(path.relative_to(root))
            for a, b, chunk in _paragraphs(content):
                sc = _score(chunk, words)
                if sc > 0:
                    hits.append((sc, rel, a, b, chunk))
        else:
            continue
        break
    if stopped:
        tried.append({"source": "workspace search", "result": stopped})
    hits.sort(key=lambda h: (-h[0], h[1], h[2]))
    tried.append({"source": "workspace search", "result": f"{len(hits)} matching passage(s) in {files} file(s)"})
    return [_result(rel, a, b, f"{rel}:{a}-{b}", chunk, sc) for sc, rel, a, b, chunk in hits[:k]]


def _rank(bundle: Bundle) -> None:
    for i, r in enumerate(bundle.results):
        r.rank = i + 1


def fallback_bundle(query: str, workspace: str | os.PathLike[str], k: int, reason: str) -> Bundle:
    """A bundle made from the workspace alone, for when the store itself is unreachable."""
    from memlens.retrieval.query import parse

    try:
        text = parse(query).text
    except Exception:
        text = query
    trace = Trace(query=query, text=text)
    trace.cache.enabled = False
    bundle = Bundle(results=[], trace=trace)
    workspace_fallback(bundle, workspace, text or query, k, reason)
    if bundle.trace.degraded is not None:
        bundle.trace.degraded["store_ok"] = False
    return bundle
