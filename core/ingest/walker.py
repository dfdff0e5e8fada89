"""Walking a directory for ingestion or indexing: what to read, and every skip with its reason.

Honours ``.gitignore`` files (each applies below its own folder, read with
pathspec and matched by RE2, in linear time) and a default skip list of folders nobody wants indexed. Symbolic
links are never followed: one that leads out of the walked folder is reported
as such, and one inside it is skipped because its target is walked where it
lives (this also keeps link loops out). Files that are not regular files
(FIFOs, devices, sockets) are never opened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", "node_modules", "dist", "build", "target", ".venv", "venv", "__pycache__", "vendor",
    "vendored", "third_party", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".eggs", "site-packages",
    ".idea", ".cache",
})
MAX_CODE_BYTES = 500 * 1024  # code and other text files in a workspace
MAX_DOC_BYTES = 64 * 1024 * 1024  # a document (PDF, HTML, Markdown, text) given to ingest


@dataclass
class Found:
    """A file to read: its absolute path (under the walked root, links not resolved), path relative to the root, stat."""

    path: str
    rel: str
    size: int
    mtime_ns: int


@dataclass
class Skip:
    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": shown(self.path), "reason": self.reason}


NOT_UTF8 = "its name is not valid UTF-8 (rename it to read it)"


def shown(path: str) -> str:
    """``path`` as text that can be printed and stored: bytes of a name that are not UTF-8 appear as ``\\xNN``."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # Python keeps such bytes as lone surrogates, which no text output accepts
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def _compile(lines: list[str]) -> Any:
    """The rules of one .gitignore, matched by RE2 (linear time: no pattern can make a match backtrack).

    Python's own regular expressions backtrack, and a pattern such as ``*a*a*a*a*a*a*a*a*a*a*a*ab``
    against a long name of ``a``s would take minutes. A pattern RE2 cannot compile (pathspec turns
    POSIX classes like ``[[:alpha:]]``, which it does not support, into nested sets) is left out;
    with Python's engine it matched nothing either.
    """
    import pathspec

    try:
        return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")
    except Exception:
        pass
    kept = []
    for line in lines:
        try:
            pathspec.GitIgnoreSpec.from_lines([line], backend="re2")
        except Exception:
            continue
        kept.append(line)
    return pathspec.GitIgnoreSpec.from_lines(kept, backend="re2")


def _load_gitignore(folder: str) -> Any | None:
    path = os.path.join(folder, ".gitignore")
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1024 * 1024:
            return None
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    try:
        return _compile(lines)
    except Exception:  # rules RE2 cannot hold at all: ignore the file rather than fail the walk
        return None


def _ignored(specs: list[tuple[str, Any]], rel: str, is_dir: bool) -> bool:
    """Whether any .gitignore at or above ``rel``'s folder ignores it (deeper files are consulted last)."""
    verdict = False
    for base, spec in specs:
        sub = rel[len(base) + 1 :] if base else rel
        if is_dir:
            sub += "/"
        result = spec.check_file(sub)
        if result.include is not None:
            verdict = bool(result.include)
    return verdict


def walk(root: str, skips: list[Skip], stop: Callable[[], bool] | None = None) -> Iterator[Found]:
    """Regular files under ``root`` (a real, absolute folder), sorted by path; skips are appended to ``skips``.

    ``stop``: asked before each entry; when it says so the walk ends there (a deadline that holds even in a
    folder whose entries are all skipped).
    """
    specs: list[tuple[str, Any]] = []
    yield from _walk(root, "", specs, skips, root, stop or (lambda: False))


def _walk(root: str, rel_dir: str, specs: list[tuple[str, Any]], skips: list[Skip], real_root: str,
          stop: Callable[[], bool]) -> Iterator[Found]:
    folder = os.path.join(root, rel_dir) if rel_dir else root
    spec = _load_gitignore(folder)
    if spec is not None:
        specs.append((rel_dir, spec))
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        skips.append(Skip(folder, f"cannot read folder: {exc.strerror or exc}"))
        entries = []
    for e in entries:
        if stop():
            break
        rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
        try:
            if e.is_symlink():
                skips.append(Skip(e.path, _link_reason(e.path, real_root)))
                continue
            is_dir = e.is_dir(follow_symlinks=False)
            if is_dir:
                if e.name in SKIP_DIRS or e.name.endswith(".egg-info"):
                    skips.append(Skip(e.path, "folder on the default skip list"))
                elif _ignored(specs, rel, True):
                    skips.append(Skip(e.path, "ignored by .gitignore"))
                elif shown(e.name) != e.name:
                    skips.append(Skip(e.path, NOT_UTF8))
                else:
                    yield from _walk(root, rel, specs, skips, real_root, stop)
                continue
            if e.name == ".gitignore":
                continue
            st = e.stat(follow_symlinks=False)
        except OSError as exc:
            skips.append(Skip(e.path, f"cannot read: {exc.strerror or exc}"))
            continue
        if not stat.S_ISREG(st.st_mode):
            skips.append(Skip(e.path, "not a regular file"))
        elif _ignored(specs, rel, False):
            skips.append(Skip(e.path, "ignored by .gitignore"))
        elif shown(e.name) != e.name:
            skips.append(Skip(e.path, NOT_UTF8))
        else:
            yield Found(e.path, rel, st.st_size, st.st_mtime_ns)
    if spec is not None:
        specs.pop()


def _link_reason(path: str, real_root: str) -> str:
    target = os.path.realpath(path)
    if not os.path.exists(target):
        return "dangling symbolic link"
    if not inside(target, real_root):
        return "symbolic link out of the folder (never followed)"
    return "symbolic link inside the folder (its target is read where it lives)"


def inside(path: str, root: str) -> bool:
    """Whether the real path ``path`` is ``root`` or below it (both real and absolute)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def count_files(root: str) -> int:
    """How many files ``walk`` would yield (for a progress bar); cheap: names and stats only."""
    return sum(1 for _ in walk(root, []))
