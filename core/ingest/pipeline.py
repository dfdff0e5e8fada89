"""The streaming ingestion pipeline: walk → read → chunk → embed → write, in bounded batches.

The main thread walks, reads and chunks files; a worker thread embeds each batch
and writes it (one transaction per batch, each source's old chunks replaced in
that same transaction). A queue of at most ``QUEUE_BATCHES`` batches sits between
them, so memory holds a few batches whatever the number of files, and reading
overlaps embedding (ONNX Runtime releases the GIL).

Idempotent: the catalog's size and mtime_ns decide first; only on a mismatch is
the file hashed, and only a new sha256 (or a new parser/chunker version) gets
it re-chunked. Unchanged chunks of an edited file reuse their stored vectors.
"""

from __future__ import annotations

import hashlib
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError, ValidationError
from memlens.ingest import storage
from memlens.ingest.chunking import CHUNKER_VERSION, Chunk, TokenCounter, counter_for
from memlens.ingest.code_chunks import CODE_EXTENSIONS, code_chunks
from memlens.ingest.readers import PARSER_VERSIONS, Unreadable, decode, parser_for, read_document, reason
from memlens.ingest.walker import MAX_CODE_BYTES, MAX_DOC_BYTES, Found, Skip, inside, shown, walk
from memlens.limits import entry_text_limit
from memlens.models import content_hash
from memlens.store.writes import validate_entry
from memlens.vocab import NAME_RE

if TYPE_CHECKING:
    from memlens.ingest.context import IngestContext

BATCH_CHUNKS = 256  # chunks embedded and written together
BATCH_FILES = 200  # files per batch at most (many tiny files)
QUEUE_BATCHES = 2
EMBED_SLICE = 32  # texts embedded between two looks at the deadline: what a deadline can overrun by
Progress = Callable[[dict[str, Any]], None]


@dataclass
class Target:
    """One PATH argument: a file, or a folder walked (its vanished files are removed after a full walk)."""

    path: str  # absolute, real
    is_dir: bool


@dataclass
class Run:
    mode: str  # "ingest" or "index"
    wing: str
    room: str
    counts: dict[str, Any] = field(default_factory=lambda: {"added": 0, "updated": 0, "unchanged": 0, "removed": 0,
                                                             "chunks": 0})
    skipped: list[dict[str, str]] = field(default_factory=list)
    files_done: int = 0
    complete: bool = True


def check_name(what: str, value: str, required: bool) -> str:
    value = (value or "").strip()
    if not value and not required:
        return ""
    if not value or not NAME_RE.match(value) or len(value) > 200:
        raise ValidationError(f"{what} {value!r} is not a valid name (letters, digits, _ . -)")
    return value


def resolve_targets(paths: list[str | Path], *, want_dir: bool = False) -> list[Target]:
    """Each PATH as a real absolute path; a missing or unreadable one is a one-line error before anything is written."""
    if not paths:
        raise ValidationError("give at least one file or folder")
    out = []
    for p in paths:
        raw = os.fspath(p)
        if not raw.strip():
            raise ValidationError("an empty path was given")
        real = os.path.realpath(os.path.expanduser(raw))
        if shown(real) != real:  # a name with bytes that are not UTF-8 could be neither stored nor shown as text
            raise ValidationError(f"{shown(raw)}: the path is not valid UTF-8 (rename it to read it)")
        if not os.path.exists(real):
            raise MemlensError(f"{raw}: no such file or folder")
        is_dir = os.path.isdir(real)
        if want_dir and not is_dir:
            raise MemlensError(f"{raw}: not a folder (index takes a workspace folder)")
        if not os.access(real, os.R_OK | (os.X_OK if is_dir else 0)):
            raise MemlensError(f"{raw}: permission denied")
        out.append(Target(real, is_dir))
    # a path given twice, or inside a folder also given, is read once (as part of that folder)
    dirs = [t.path for t in out if t.is_dir]
    kept: list[Target] = []
    for t in out:
        if any(t.path == k.path for k in kept) or any(t.path != d and inside(t.path, d) for d in dirs):
            continue
        kept.append(t)
    return kept


def version_of(parser: str, count: TokenCounter, room: str = "") -> str:
    """How a file's chunks were made: parser, chunker and window, and the room they went to (a run with another
    ``--room`` writes an unchanged file again, into that room)."""
    made = f"{parser}/{PARSER_VERSIONS.get(parser.split(':')[0], 1)};chunk/{CHUNKER_VERSION};tokens/{count.max_tokens}"
    return f"{made};room/{room}" if room else made


def _files(targets: list[Target], skips: list[Skip], stop: Callable[[], bool]) -> Iterator[tuple[Target, Found]]:
    for t in targets:
        if t.is_dir:
            for f in walk(t.path, skips, stop):
                yield t, f
        else:
            try:
                st = os.stat(t.path)
            except OSError as exc:
                skips.append(Skip(t.path, f"cannot read: {exc.strerror or exc}"))
                continue
            if not stat.S_ISREG(st.st_mode):  # a FIFO or a device named on the command line: as the walk says it
                skips.append(Skip(t.path, "not a regular file"))
                continue
            yield t, Found(t.path, os.path.basename(t.path), st.st_size, st.st_mtime_ns)


def _read(path: str, cap: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        chunks, total = [], 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > cap:
                raise Unreadable(f"larger than {cap // 1024} KB")
            chunks.append(block)
        return b"".join(chunks)
    finally:
        os.close(fd)


class _Writer(threading.Thread):
    """Embeds and writes batches from the queue; the first error stops it and is raised by ``join_checked``."""

    def __init__(self, mem: IngestContext, run: Run, progress: Progress | None,
                 past_deadline: Callable[[], bool] = lambda: False) -> None:
        super().__init__(name="memlens-ingest-writer", daemon=True)
        self.mem, self.run_, self.progress, self.past_deadline = mem, run, progress, past_deadline
        self.q: queue.Queue[list[storage.SourceWrite] | None] = queue.Queue(maxsize=QUEUE_BATCHES)
        self.error: BaseException | None = None
        self.wrote = False  # the first batch is written whatever the deadline: every run gets further than the last

    def run(self) -> None:
        try:
            storage.open_writer_connection(self.mem)
        except BaseException as exc:
            self.error = exc
        try:
            while True:
                batch = self.q.get()
                if batch is None:
                    return
                if self.error is not None:
                    continue  # drain: the producer learns of the error at its next put
                if self.wrote and self.past_deadline():  # read but not embedded yet: left as it was, for the next run
                    self.run_.complete = False
                    continue
                try:
                    self._write(batch)
                except BaseException as exc:  # handed to the main thread
                    self.error = exc
        finally:
            storage.close_thread_connection(self.mem)

    def _write(self, batch: list[storage.SourceWrite]) -> None:
        texts = [e.embed_text for w in batch for e in w.entries]
        known = storage.stored_vectors(self.mem, texts) if texts else {}
        todo: dict[str, str] = {}
        for t in texts:
            h = content_hash(t)
            if h not in known:
                todo.setdefault(h, t)
        hashes, texts = list(todo), list(todo.values())
        for i in range(0, len(texts), EMBED_SLICE):
            if self.error is not None:  # stopped (an interrupt): nothing more is embedded or written
                return
            if self.wrote and self.past_deadline():  # nothing of this batch is written: its files are read again next run
                self.run_.complete = False
                return
            for h, v in zip(hashes[i : i + EMBED_SLICE], self.mem.embed(texts[i : i + EMBED_SLICE])):
                known[h] = v.astype("<f4").tobytes()
        for w in batch:
            w.vectors = [known[content_hash(e.embed_text)] for e in w.entries]
        done = storage.write_sources(self.mem, batch, action=self.run_.mode)
        self.wrote = True
        c = self.run_.counts
        c["added"] += done["added"]
        c["updated"] += done["updated"]
        c["chunks"] += done["chunks"]
        if self.progress:
            self.progress({"stage": "written", "files": self.run_.files_done, "chunks": c["chunks"]})

    def put(self, batch: list[storage.SourceWrite] | None) -> None:
        while True:
            if self.error is not None and batch is not None:
                raise self.error
            try:
                self.q.put(batch, timeout=0.5)
                return
            except queue.Full:
                if not self.is_alive():
                    raise MemlensError("the ingestion writer stopped unexpectedly") from self.error

    def join_checked(self) -> None:
        self.put(None)
        self.join()
        if self.error is not None:
            raise self.error


def _chunks_for(
    run: Run, target: Target, f: Found, data: bytes, count: TokenCounter
) -> tuple[list[Chunk], str, str, dict[str, Any]]:
    """(chunks, entry kind, parser name, document info) of one file."""
    suffix = Path(f.path).suffix.lower()
    parser = None if run.mode == "index" else parser_for(Path(f.path))
    if parser is not None:
        chunks, info = read_document(Path(f.path), data, parser, count)
        return chunks, "document", parser, info
    if run.mode == "ingest" and suffix not in CODE_EXTENSIONS:
        raise Unreadable(f"unsupported file type {suffix or '(no extension)'!r}")
    text = decode(data)
    rel = f.rel if target.is_dir else os.path.basename(f.path)
    chunks, how = code_chunks(rel, text, suffix, count)
    return chunks, "code", f"code:{how}", {}


def run_pipeline(mem: IngestContext, targets: list[Target], run: Run, *, progress: Progress | None = None,
                 deadline: float | None = None, only: set[str] | None = None) -> dict[str, Any]:
    """Bring the catalog of ``run.wing`` in line with ``targets``; returns the summary (see ``summary``).

    ``deadline`` (a ``time.monotonic()`` value): stop reading new files after it, and embedding too (a batch
    not embedded by then is not written), and leave the rest (and the removal of vanished files) to the next run:
    the run ends within one slice of embedding (``EMBED_SLICE`` texts) of it, except that the first file read
    that needs writing is always embedded and written (alone in its batch), so a file that takes longer than the
    deadline is not read again by every run and never written. ``only``: look at these paths only (the watcher).
    """
    t0 = time.perf_counter()

    def past_deadline() -> bool:
        return deadline is not None and time.monotonic() > deadline

    mem.store.check_writable()
    mem.check_model()
    count = counter_for(mem.embedder)
    skips: list[Skip] = []
    seen: dict[str, set[str]] = {t.path: set() for t in targets if t.is_dir}
    catalogs = {t.path: {s.path: s for s in storage.sources_under(mem, run.wing, t.path)} for t in targets}
    writer = _Writer(mem, run, progress, past_deadline)
    writer.start()
    batch: list[storage.SourceWrite] = []
    batch_chunks = 0
    sent = False  # whether a batch went to the writer
    touched: list[tuple[int, int, int]] = []
    dropped: list[storage.Source] = []
    try:
        with entry_text_limit(mem.settings.limits.max_entry_chars):
            for target, f in _files(targets, skips, past_deadline):
                if only is not None and f.path not in only:
                    continue
                if past_deadline():
                    break
                if target.is_dir:
                    seen[target.path].add(f.path)
                run.files_done += 1
                known = catalogs[target.path].get(f.path)
                n_skips = len(skips)
                w = _plan_file(mem, run, target, f, known, count, skips, touched)
                if w is None:
                    if known is not None and len(skips) > n_skips:
                        dropped.append(known)  # indexed before, skipped now (binary, too large…): its chunks go
                    continue
                if batch and batch_chunks + len(w.entries) > BATCH_CHUNKS:  # what was read so far is written apart
                    writer.put(batch)  # from a large file: stopping during that one keeps the files before it
                    batch, batch_chunks, sent = [], 0, True
                batch.append(w)
                batch_chunks += len(w.entries)
                # with a deadline, the first file to write goes alone: the one batch written whatever the deadline
                first = deadline is not None and not sent
                if first or batch_chunks >= BATCH_CHUNKS or len(batch) >= BATCH_FILES:
                    sent = True
                    writer.put(batch)
                    batch, batch_chunks = [], 0
                if progress:
                    progress({"stage": "read", "files": run.files_done, "path": f.path})
            if past_deadline():  # the walk or the reading was cut: what was not seen is not gone
                run.complete = False
            if batch:
                writer.put(batch)
        writer.join_checked()
    except BaseException:
        if writer.is_alive():  # the writer stops after the slice it is embedding (or the batch it is writing)
            writer.error = writer.error or MemlensError("stopped")
            while True:  # the batches waiting are dropped (their files are read again next run), so the stop fits in
                try:
                    writer.q.get_nowait()
                except queue.Empty:
                    break
            writer.q.put_nowait(None)
            writer.join(timeout=30)
        raise
    for source_id, size, mtime_ns in touched:
        storage.refresh_stat(mem, source_id, size, mtime_ns)
    gone = list(dropped)
    if run.complete:
        gone += [s for t in targets if t.is_dir for p, s in catalogs[t.path].items()
                 if p not in seen[t.path] and (only is None or p in only)]
    run.counts["removed"] += storage.remove_sources(mem, gone, action=run.mode)
    run.skipped = [s.to_dict() for s in skips]
    return summary(run, time.perf_counter() - t0)


def summary(run: Run, seconds: float) -> dict[str, Any]:
    c = run.counts
    return {"added": c["added"], "updated": c["updated"], "unchanged": c["unchanged"], "removed": c["removed"],
            "chunks": c["chunks"], "skipped": run.skipped, "seconds": round(seconds, 3), "complete": run.complete}


def _plan_file(mem: IngestContext, run: Run, target: Target, f: Found, known: storage.Source | None, count: TokenCounter,
               skips: list[Skip], touched: list[tuple[int, int, int]]) -> storage.SourceWrite | None:
    """What to write for one file: None when it is unchanged or skipped."""
    suffix = os.path.splitext(f.path)[1].lower()
    is_doc = run.mode == "ingest" and parser_for(f.path) is not None
    cap = MAX_DOC_BYTES if is_doc else MAX_CODE_BYTES
    if run.mode == "ingest" and not is_doc and suffix not in CODE_EXTENSIONS:  # the type first: no size makes it fit
        skips.append(Skip(f.path, f"unsupported file type {suffix or '(no extension)'!r}"))
        return None
    if f.size > cap:
        skips.append(Skip(f.path, f"larger than {cap // 1024} KB"))
        return None
    if known is not None and known.size == f.size and known.mtime_ns == f.mtime_ns and _current(known, count, run.room):
        run.counts["unchanged"] += 1
        return None
    try:
        data = _read(f.path, cap)
    except Unreadable as exc:
        skips.append(Skip(f.path, str(exc)))
        return None
    except OSError as exc:
        skips.append(Skip(f.path, f"cannot read: {exc.strerror or exc}"))
        return None
    sha = hashlib.sha256(data).hexdigest()
    if known is not None and known.sha256 == sha and _current(known, count, run.room):
        run.counts["unchanged"] += 1
        touched.append((known.id, len(data), f.mtime_ns))
        return None
    try:
        chunks, kind, parser, info = _chunks_for(run, target, f, data, count)
    except (Unreadable, ValidationError) as exc:
        skips.append(Skip(f.path, str(exc)))
        return None
    except Exception as exc:  # a parser's fault on this file (lxml, pypdf, tree-sitter): this file is skipped, not the run
        skips.append(Skip(f.path, f"cannot be parsed ({reason(exc)})"))
        return None
    del data
    if not chunks and kind == "document":
        skips.append(Skip(f.path, "no text to index"))
        return None
    base: dict[str, Any] = {"source": f.path, "source_sha256": sha, "parser": parser}
    if target.is_dir:
        base["root"] = target.path
        base["path"] = f.rel
    if info:
        base["document"] = info
    entries = []
    try:
        for i, c in enumerate(chunks):
            meta = {**base, **c.position, "chunk": i, "chunks": len(chunks)}
            entries.append(validate_entry({"wing": run.wing, "room": run.room, "kind": kind, "type": "note",
                                          "title": c.title, "text": c.text, "meta": meta}))
    except ValidationError as exc:
        skips.append(Skip(f.path, f"a chunk cannot be stored: {exc}"))
        return None
    return storage.SourceWrite(run.wing, f.path, kind, f.size, f.mtime_ns, sha, version_of(parser, count, run.room),
                               entries)


def _current(known: storage.Source, count: TokenCounter, room: str) -> bool:
    """Whether the catalog row was made by this parser and chunker version, into ``room`` (else the file is read
    again)."""
    parser = known.version.split(";", 1)[0].rsplit("/", 1)[0]
    return known.version == version_of(parser, count, room)
