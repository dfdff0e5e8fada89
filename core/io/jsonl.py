"""JSONL import and export: one entry per line, the stable format of ``Entry.to_record``.

Import is all-or-nothing and never holds the write lock for long:

1. validate every line (JSON, fields, duplicate ids, ids already stored,
   ``overrides`` targets) - a bad line stops here, naming line and field;
2. embed the lines that carry no usable vector, in batches, into a
   memory-mapped scratch file (memory stays bounded on large files, and other
   writers are not blocked while the model works);
3. write the entries as staged rows, invisible to every reader, in short
   transactions that let other writers in between (``memlens.store.staging``);
4. publish them all in one short transaction.

A process killed at any point leaves the store as it was for every reader:
either the publishing transaction committed or it did not. The staged rows of
a killed import, and its scratch directory, are removed by the next import.
``export --with-vectors`` adds ``model``, ``vector`` (base64 of little-endian
float32) and ``vector_of`` (the content hash of the text the vector was made
from); import reuses those vectors when the model matches the store's, so
moving a store never re-embeds, and embeds again a line whose text is not
what its vector was made from (a text edited in the file by hand, or a vector
the store already held stale).
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from memlens.errors import CorruptRowError, MemlensError, ValidationError
from memlens.models import Entry, content_hash
from memlens.store import staging
from memlens.store.rows import HINT, row_problem, row_to_entry, rule_problem
from memlens.store.writes import describe_validation, override_cycle

if TYPE_CHECKING:
    from memlens.store.base import Writes

    Embed = Callable[[list[str]], np.ndarray]

VECTOR_FIELDS = ("model", "vector", "vector_of")
MAX_LINE_BYTES = 16 << 20  # one entry a line; a longer line is not an entry (and is not read into memory whole)
MAX_NUMBER_DIGITS = 64  # no field holds a longer integer (meta integers are 64-bit)
_CHUNK = 1 << 20


@contextmanager
def _source(path: Path, scratch: Path) -> Iterator[Path]:
    """A re-readable file: stdin ("-") and pipes (``<(cmd)``, FIFOs) are spooled into the scratch directory first."""
    if str(path) != "-":
        try:
            if not path.exists():
                raise MemlensError(f"{path}: no such file")
            if path.is_dir():
                raise MemlensError(f"{path}: is a directory, not a JSONL file")
            regular = path.is_file()
        except OSError as exc:
            raise MemlensError(f"{path}: cannot read ({exc.strerror})") from None
        if regular:
            yield path
            return
    spool = scratch / "input.jsonl"
    try:
        src = sys.stdin.buffer if str(path) == "-" else path.open("rb")
    except OSError as exc:
        raise MemlensError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        with spool.open("wb") as out:
            while chunk := src.read(_CHUNK):
                if b"\x00" in chunk:  # a device such as /dev/zero would otherwise be read forever
                    raise ValidationError(f"{path}: binary data (NUL byte); not a JSONL file")
                out.write(chunk)
    finally:
        if src is not sys.stdin.buffer:
            src.close()
    yield spool


def _lines(path: Path, digest: Any) -> Iterator[tuple[int, str]]:
    """(line number, text) of non-blank lines; refuses binary, non-UTF-8 and overlong lines."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise MemlensError(f"{path}: cannot read ({exc.strerror})") from None
    with fh:
        n = 0
        while raw := fh.readline(MAX_LINE_BYTES + 1):
            n += 1
            digest.update(raw)
            if b"\x00" in raw:
                raise ValidationError(f"{path}: line {n}: binary data (NUL byte); not a JSONL file")
            if len(raw) > MAX_LINE_BYTES:
                raise ValidationError(f"{path}: line {n}: longer than {MAX_LINE_BYTES >> 20} MiB; not an entry")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValidationError(f"{path}: line {n}: not UTF-8 text ({exc.reason}); not a JSONL file") from None
            if n == 1:
                text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
            if text.strip():
                yield n, text


class _BadJson(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for k, v in pairs:
        if k in obj:
            raise _BadJson(f"key {k!r} appears twice in one object")
        obj[k] = v
    return obj


def _constant(name: str) -> Any:
    raise _BadJson(f"{name} is not a JSON number")


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _BadJson(f"a number with {len(digits.lstrip('-'))} digits (at most {MAX_NUMBER_DIGITS})")
    return int(digits)


def loads(text: str) -> Any:
    """Strict JSON: no NaN/Infinity, no duplicate keys, no giant integers; ``ValueError``/``RecursionError`` otherwise."""
    return json.loads(text, object_pairs_hook=_object, parse_constant=_constant, parse_int=_int)


def json_error_text(exc: json.JSONDecodeError) -> str:
    msg = exc.msg  # some end in "at" ("Unterminated string starting at"): the column completes them
    return f"{msg} column {exc.colno}" if msg.endswith(" at") else f"{msg} at column {exc.colno}"


def check_vector(blob: bytes, dim: int) -> bytes:
    """A stored vector from the bytes of a ``vector`` field: ``dim`` finite float32, not all zero, unit length.

    A vector that is not of unit length is scaled to it (search compares by dot product); ValueError otherwise.
    """
    if len(blob) % 4:
        raise ValueError(f"is {len(blob)} bytes, not a whole number of float32 values")
    if len(blob) != dim * 4:
        raise ValueError(f"has {len(blob) // 4} dimensions, expected {dim}")
    v = np.frombuffer(blob, dtype="<f4")
    if not np.isfinite(v).all():
        raise ValueError("contains NaN or infinity")
    norm = float(np.linalg.norm(v.astype(np.float64)))
    if norm == 0.0:
        raise ValueError("is all zeros (no direction to compare)")
    if abs(norm - 1.0) > 1e-3:
        blob = (v.astype(np.float64) / norm).astype("<f4").tobytes()
    return blob


def parse_line(path: Path, n: int, text: str, model_id: str, dim: int) -> tuple[Entry, bytes | None]:
    """One line → (entry, vector blob if it carries a usable one)."""
    from pydantic import ValidationError as PydanticError

    try:
        obj = loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{path}: line {n}: invalid JSON: {json_error_text(exc)}") from None
    except RecursionError:
        raise ValidationError(f"{path}: line {n}: invalid JSON: nested too deeply") from None
    except ValueError as exc:  # _BadJson, and Python's own limits on numbers
        raise ValidationError(f"{path}: line {n}: invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        got = "null" if obj is None else {"bool": "true or false", "str": "a string", "int": "a number", "float": "a number",
                                            "list": "an array"}.get(type(obj).__name__, type(obj).__name__)
        raise ValidationError(f"{path}: line {n}: expected a JSON object, got {got}")
    model, vector, made_from = obj.pop("model", None), obj.pop("vector", None), obj.pop("vector_of", None)
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
            try:
                blob = check_vector(blob, dim)
            except ValueError as exc:
                raise ValidationError(f"{path}: line {n}: field 'vector' {exc}") from None
        if made_from is not None and not isinstance(made_from, str):
            raise ValidationError(f"{path}: line {n}: field 'vector_of' must be the content hash of a text")
        if made_from is not None and made_from != content_hash(entry.embed_text):
            blob = None  # the text is not what the vector was made from: embedded again
    return entry, blob


def import_file(
    store: Writes, embed: Embed, path: Path, *, batch_size: int = 256,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Import ``path`` into ``store``; ``embed`` makes the vectors the file does not carry."""
    store.sweep_imports()  # the staged rows of imports killed earlier
    with staging.scratch() as scratch, _source(path, scratch) as real:
        return _import(store, embed, path, real, scratch, batch_size, progress or (lambda *_: None))


def _import(
    store: Writes, embed: Embed, shown: Path, path: Path, scratch: Path, batch_size: int,
    progress: Callable[[str, int, int], None],
) -> dict[str, Any]:
    model_id, dim = store.model_id, store.dim

    # 1. validate everything before touching the store
    h1 = hashlib.sha256()
    ids: dict[str, int] = {}
    overrides: list[tuple[int, str]] = []
    links: dict[str, str] = {}  # id -> the id it overrides, of the file's lines
    need_embed = 0
    for n, text in _lines(path, h1):
        entry, blob = parse_line(shown, n, text, model_id, dim)
        if entry.id in ids:
            raise ValidationError(f"{shown}: line {n}: field 'id': {entry.id!r} already appears on line {ids[entry.id]}")
        ids[entry.id] = n
        if entry.overrides:
            overrides.append((n, entry.overrides))
            links[entry.id] = entry.overrides
        need_embed += blob is None
    hit = store.entry_states(list(ids))
    if hit:
        where = "already exists in the store" if hit[1] else "is being imported by another process"
        raise ValidationError(f"{shown}: line {ids[hit[0]]}: field 'id': {hit[0]!r} {where}")
    for eid in links:  # every line's id is new: a cycle can only run through the file's own lines
        cycle = override_cycle(eid, links.get)
        if cycle is not None and cycle[0] == eid:
            raise ValidationError(f"{shown}: line {ids[eid]}: field 'overrides': {' -> '.join(cycle)} would be a cycle of "
                                  "overrides, in which each entry hides the next and search returns none of them")
    outside: dict[str, int] = {}  # override targets already in the store -> first line naming them
    for n, target in overrides:
        if target in ids:
            continue
        if store.missing_ids([target]):
            raise ValidationError(f"{shown}: line {n}: field 'overrides': no entry with id {target!r}")
        outside.setdefault(target, n)
    total = len(ids)
    progress("validated", total, total)
    if total == 0:
        return {"imported": 0, "embedded": 0, "reused_vectors": 0}

    # 2. vectors for every line, into a bounded memory-mapped scratch file
    vecs = np.lib.format.open_memmap(scratch / "vectors.npy", mode="w+", dtype="<f4", shape=(total, dim))
    embedded = 0
    h2 = hashlib.sha256()
    pending: list[tuple[int, str]] = []
    seen: dict[str, int] = {}  # content hash -> row already holding its vector

    def flush() -> None:
        nonlocal embedded
        if not pending:
            return
        out = embed([t for _, t in pending])
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
            continue
        stored = store.reusable_vector(ch, model_id)  # never a degenerate one: it must not spread
        if stored is not None:
            vecs[row] = np.frombuffer(stored, dtype="<f4")
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

    # 3. staged rows in short transactions, 4. published at once
    h3 = hashlib.sha256()
    rows = ((row, n, parse_line(shown, n, text, model_id, dim)[0]) for row, (n, text) in enumerate(_lines(path, h3)))

    def unchanged() -> None:
        if h3.digest() != h1.digest():
            raise MemlensError(f"{shown} changed while it was being imported; nothing was written")

    store.import_staged(shown, rows, vecs, outside, unchanged, lambda done: progress("writing", done, total))
    return {"imported": total, "embedded": embedded, "reused_vectors": total - embedded}


def export(
    store: Writes, out: IO[str], *, wing: str | None = None, with_vectors: bool = False, on_skip: Any = None
) -> int:
    """Write entries as JSONL; returns the count.

    A damaged row (a hand edit the data model rejects) is left out and reported
    to ``on_skip(entry_id, problem)``; without ``on_skip`` it raises CorruptRowError.
    """
    n = 0
    model = store.model_id
    for row, blob, made_from in store.export_rows(wing, with_vectors):
        problem = row_problem(row) or rule_problem(row)  # (a row import would refuse is not written either)
        if problem is not None:
            if on_skip is None:
                raise CorruptRowError(f"stored entry {row[0]!r} is damaged: {problem}; {HINT}")
            on_skip(row[0], problem)
            continue
        rec = row_to_entry(row).to_record()
        if blob is not None:
            rec["model"] = model
            rec["vector"] = base64.b64encode(blob).decode("ascii")
            rec["vector_of"] = made_from
        try:
            line = json.dumps(rec, ensure_ascii=False, allow_nan=False)
        except ValueError:  # stored by an earlier version, which accepted NaN in meta
            raise MemlensError(
                f"entry {rec['id']!r} holds NaN or an infinity in 'meta', which JSON cannot hold; "
                f"change it (memlens update / Memory.update) and export again"
            ) from None
        out.write(line + "\n")
        n += 1
    return n
