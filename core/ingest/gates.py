"""The gates a code chunk passes before it is served, by ``search`` and by ``context`` alike.

A chunk is its file's lines as they were indexed. It is served only while that
is still true; the first gate it fails names the stage it is dropped at:

- ``code_exists`` (``missing``): the chunk names no file and lines, or its file is gone or unreadable;
- ``code_workspace`` (``outside_workspace``): the file's real path left the indexed workspace (a link now
  leads elsewhere);
- ``code_binary`` (``binary``): the file now holds binary data, is not UTF-8, or is too large to be code;
- ``code_stale`` (``stale``): the file's lines at the chunk's range (and columns, for a piece of one long
  line) are not the chunk's text (edited since).

The file is stat'ed and its path resolved at every check (a few microseconds); it is read
and compared only when its (inode, size, mtime, ctime) differ from the last check of the
same chunk: the verdict is kept by that signature. A file changed less than
``RACY_S`` seconds ago is read every time, since a second change within the file
system's timestamp granularity could leave the signature unchanged.
"""

from __future__ import annotations

import os
import stat
import time
from typing import Any

from memlens.ingest.walker import MAX_CODE_BYTES, inside

Verdict = tuple[str, str, str] | None  # (stage, reason, detail) of the first gate failed, or None: serve it
VERDICTS_KEPT = 20_000
RACY_S = 2.0
_verdicts: dict[tuple[Any, ...], Verdict] = {}


def check(meta: dict[str, Any], text: str, roots: dict[str, str] | None = None) -> Verdict:
    """The first gate the chunk (``meta``: its ``source``, ``root`` and ``lines``; ``text``: as indexed) fails.
    ``roots`` keeps each workspace root's real path for the caller's pass over several chunks."""
    source, root, lines = meta.get("source"), meta.get("root"), meta.get("lines")
    if not isinstance(source, str) or not isinstance(lines, list) or len(lines) != 2 or not all(
            isinstance(n, int) for n in lines):
        return "code_exists", "missing", "the chunk does not name its file and lines"
    try:
        st = os.stat(source)
    except (OSError, ValueError):
        return "code_exists", "missing", f"{source} no longer exists"
    if not stat.S_ISREG(st.st_mode):
        return "code_exists", "missing", f"{source} no longer exists"
    real = os.path.realpath(source)
    if not isinstance(root, str):
        return "code_workspace", "outside_workspace", f"{source} names no indexed workspace"
    roots = {} if roots is None else roots
    real_root = roots.get(root)
    if real_root is None:
        real_root = roots[root] = os.path.realpath(root)
    if not inside(real, real_root):
        return "code_workspace", "outside_workspace", f"{source} resolves to {real}, outside the indexed workspace"
    cols = meta.get("cols")  # a piece of one long line: its character range in that line
    span = (cols[0], cols[1]) if isinstance(cols, list) and len(cols) == 2 and all(isinstance(c, int) for c in cols) else None
    key = (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, lines[0], lines[1], span, len(text),
           hash(text))
    if key in _verdicts:
        return _verdicts[key]
    verdict = _read(source, real, lines, span, text)
    if time.time() - st.st_mtime_ns / 1e9 > RACY_S:
        if len(_verdicts) >= VERDICTS_KEPT:
            _verdicts.clear()
        _verdicts[key] = verdict
    return verdict


def _read(source: str, real: str, lines: list[Any], span: tuple[int, int] | None, text: str) -> Verdict:
    try:
        with open(real, "rb") as fh:
            data = fh.read(MAX_CODE_BYTES + 1)
    except OSError as exc:
        return "code_exists", "missing", f"{source} cannot be read ({exc.strerror or exc})"
    if len(data) > MAX_CODE_BYTES or b"\x00" in data[:8192]:
        return "code_binary", "binary", f"{source} is now binary or larger than {MAX_CODE_BYTES // 1024} KB"
    try:
        now = data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError:
        return "code_binary", "binary", f"{source} is no longer UTF-8 text"
    a, b = lines
    held = "\n".join(now.split("\n")[a - 1 : b])
    if (held if span is None else held[span[0] : span[1]]) != text:
        return "code_stale", "stale", f"{source}:{a}-{b} changed since it was indexed"
    return None
