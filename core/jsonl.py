"""JSONL import and export (DESIGN.md "Contracts").

Import is all-or-nothing and holds the write lock only briefly:

1. validate every line (JSON, fields, duplicate ids, ids already stored,
   ``overrides`` targets) — a bad line stops here, naming line and field;
2. embed the lines that carry no usable vector, in batches, into a
   memory-mapped temp file (memory stays bounded on large files, and other
   writers are not blocked while the model works);
3. write everything in one transaction.

A process killed at any point leaves the store as it was: the transaction
either committed or it did not. ``export --with-vectors`` adds ``model`` and
``vector`` (base64 of little-endian float32); import reuses those vectors when
the model matches the store's, so moving a store never re-embeds.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

import numpy as np

from . import db
from .errors import MemlensError, ValidationError
from .models import Entry, content_hash

if TYPE_CHECKING:
    from .store import Memory

VECTOR_FIELDS = ("model", "vector")


@contextmanager
def _source(path: Path) -> Iterator[Path]:
    """A re-readable file: stdin ("-") is spooled to a temp file first."""
    if str(path) != "-":
        if not path.exists():
            raise MemlensError(f"{path}: no such file")
        if path.is_dir():
            raise MemlensError(f"{path}: is a directory, not a JSONL file")
        yield path
        return
    with tempfile.NamedTemporaryFile(prefix="memlens-import-", suffix=".jsonl") as tmp:
        shutil.copyfileobj(sys.stdin.buffer, tmp)
        tmp.flush()
        yield Path(tmp.name)


def _lines(path: Path, digest: Any) -> Iterator[tuple[int, str]]:
    """(line number, text) of non-blank lines; refuses binary and non-UTF-8 content."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise MemlensError(f"{path}: cannot read ({exc.strerror})") from None
    with fh:
        for n, raw in enumerate(fh, 1):
            digest.update(raw)
            if b"\x00" in raw:
                raise ValidationError(f"{path}: line {n}: binary data (NUL byte); not a JSONL file")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValidationError(f"{path}: line {n}: not UTF-8 text ({exc.reason}); not a JSONL file") from None
            if text.strip():
                yield n, text


def parse_line(path: Path, n: int, text: str, model_id: str, dim: int) -> tuple[Entry, bytes | None]:
    """One line → (entry, vector blob if it carries a usable one)."""
    from pydantic import ValidationError as PydanticError

    from .store import describe_validation

    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{path}: line {n}: invalid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise ValidationError(f"{path}: line {n}: expected a JSON object, got {type(obj).__name__}")
    model, vector = obj.pop("model", None), obj.pop("vector", None)
    try:
        entry = Entry.model_validate(obj)
    except PydanticError as exc:
        raise ValidationError(f"{path}: line {n}: {describe_validation(exc)}") from None
    blob = None
    if vector is not None:
        if not isinstance(vector, str) or not isinstance(model, str):
            raise ValidationError(f"{path}: line {n}: field 'vector' must be base64 text with a 'model' beside it")
        if model == model_id:
            try:
                blob = base64.b64decode(vector, validate=True)
            except ValueError:
                raise ValidationError(f"{path}: line {n}: field 'vector' is not valid base64") from None
            if len(blob) != dim * 4:
                raise ValidationError(f"{path}: line {n}: field 'vector' has {len(blob) // 4} dimensions, expected {dim}")
            if not np.isfinite(np.frombuffer(blob, dtype="<f4")).all():
                raise ValidationError(f"{path}: line {n}: field 'vector' contains NaN or infinity")
    return entry, blob


def import_file(
    mem: Memory, path: Path, *, batch_size: int = 256, progress: Callable[[str, int, int], None] | None = None
) -> dict[str, Any]:
    with _source(path) as real:
        return _import(mem, path, real, batch_size, progress or (lambda *_: None))


def _import(
    mem: Memory, shown: Path, path: Path, batch_size: int, progress: Callable[[str, int, int], None]
) -> dict[str, Any]:
    model_id, dim = mem.model_id, mem.dim

    # 1. validate everything before touching the store
    h1 = hashlib.sha256()
    ids: dict[str, int] = {}
    overrides: list[tuple[int, str]] = []
    need_embed = 0
    for n, text in _lines(path, h1):
        entry, blob = parse_line(shown, n, text, model_id, dim)
        if entry.id in ids:
            raise ValidationError(f"{shown}: line {n}: field 'id': {entry.id!r} already appears on line {ids[entry.id]}")
        ids[entry.id] = n
        if entry.overrides:
            overrides.append((n, entry.overrides))
        need_embed += blob is None
    id_list = list(ids)
    for i in range(0, len(id_list), 500):
        chunk = id_list[i : i + 500]
        q = f"SELECT id FROM entries WHERE id IN ({','.join('?' * len(chunk))}) LIMIT 1"
        hit = mem.conn.execute(q, chunk).fetchone()
        if hit:
            raise ValidationError(f"{shown}: line {ids[hit[0]]}: field 'id': {hit[0]!r} already exists in the store")
    for n, target in overrides:
        if target not in ids and not mem.conn.execute("SELECT 1 FROM entries WHERE id = ?", (target,)).fetchone():
            raise ValidationError(f"{shown}: line {n}: field 'overrides': no entry with id {target!r}")
    total = len(ids)
    progress("validated", total, total)
    if total == 0:
        return {"imported": 0, "embedded": 0, "reused_vectors": 0}

    # 2. vectors for every line, into a bounded memory-mapped scratch file
    with tempfile.TemporaryDirectory(prefix="memlens-import-") as scratch:
        vecs = np.lib.format.open_memmap(Path(scratch) / "vectors.npy", mode="w+", dtype="<f4", shape=(total, dim))
        embedded = reused = 0
        h2 = hashlib.sha256()
        pending: list[tuple[int, str]] = []
        seen: dict[str, int] = {}  # content hash -> row already holding its vector

        def flush() -> None:
            nonlocal embedded
            if not pending:
                return
            out = mem.embed([t for _, t in pending])
            for (row, _), v in zip(pending, out):
                vecs[row] = v
            embedded += len(pending)
            pending.clear()
            progress("embedding", embedded, need_embed)

        dupes: list[tuple[int, int]] = []
        for row, (n, text) in enumerate(_lines(path, h2)):
            entry, blob = parse_line(shown, n, text, model_id, dim)
            if blob is not None:
                vecs[row] = np.frombuffer(blob, dtype="<f4")
                continue
            t = entry.embed_text
            ch = content_hash(t)
            if ch in seen:
                dupes.append((row, seen[ch]))
                reused += 1
                continue
            stored = mem.conn.execute(
                "SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
                "WHERE e.content_hash = ? AND e.model = ? LIMIT 1",
                (ch, model_id),
            ).fetchone()
            if stored is not None:
                vecs[row] = np.frombuffer(stored[0], dtype="<f4")
                reused += 1
            else:
                pending.append((row, t))
                if len(pending) >= batch_size:
                    flush()
            seen[ch] = row
        flush()
        for row, src in dupes:
            vecs[row] = vecs[src]
        if h2.digest() != h1.digest():
            raise MemlensError(f"{shown} changed while it was being imported; nothing was written")

        # 3. one transaction
        h3 = hashlib.sha256()
        conn = mem.conn
        with db.transaction(conn, mem.path):
            wings: set[str] = set()
            seq = 0
            for row, (n, text) in enumerate(_lines(path, h3)):
                entry, _ = parse_line(shown, n, text, model_id, dim)
                mem._insert(conn, entry, vecs[row].tobytes())
                seq = mem._audit(conn, "import", entry.id, entry.wing, None, entry.to_record(), {"file": str(shown)})
                wings.add(entry.wing)
                if row % 1000 == 999:
                    progress("writing", row + 1, total)
            if h3.digest() != h1.digest():
                raise MemlensError(f"{shown} changed while it was being imported; nothing was written")
            mem._bump(conn, wings, seq)
        progress("writing", total, total)
    return {"imported": total, "embedded": embedded, "reused_vectors": total - embedded}


def export(
    mem: Memory, out: IO[str], *, wing: str | None = None, with_vectors: bool = False, on_skip: Any = None
) -> int:
    """Write entries as JSONL; returns the count.

    A damaged row (a hand edit the data model rejects) is left out and reported
    to ``on_skip(entry_id, problem)``; without ``on_skip`` it raises CorruptRowError.
    """
    from .rows import row_problem
    from .store import _COLUMNS, row_to_entry

    cols = ", ".join(f"e.{c.strip()}" for c in _COLUMNS.split(","))
    sql = f"SELECT {cols}" + (", v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid" if with_vectors else " FROM entries e")
    args: tuple[Any, ...] = ()
    if wing:
        sql += " WHERE e.wing = ?"
        args = (wing,)
    sql += " ORDER BY e.rowid"
    n = 0
    model = mem.model_id
    for row in mem.conn.execute(sql, args):
        problem = row_problem(row[:14]) if on_skip is not None else None
        if problem is not None:
            on_skip(row[0], problem)
            continue
        rec = row_to_entry(row[:14]).to_record()
        if with_vectors:
            rec["model"] = model
            rec["vector"] = base64.b64encode(row[14]).decode("ascii")
        out.write(json.dumps(rec, ensure_ascii=False) + "\n")
        n += 1
    return n
