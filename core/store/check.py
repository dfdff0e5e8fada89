"""``memlens check``: is a store intact? Read-only; the store is never modified.

Checks, each reported as findings rather than stopping at the first error:
SQLite's own ``PRAGMA integrity_check`` (which also runs FTS5's check of its
index), the schema version, every entry row (kinds, types, statuses,
timestamps, ``meta`` JSON, salience), that FTS5 and the vec0 vector table hold
exactly the entries' rowids, with the same wing, room, kind, type and status,
that every vector is readable, of the store's size and finite, that a KNN
query runs in every wing, FTS5's ``integrity-check`` command against the
entries' text (on a private copy: the command needs a writable database),
and that audit and working-memory rows decode.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from memlens.errors import StoreError, StoreLockedError
from memlens.store import corruption, db
from memlens.store.rows import COLUMN_LIST, json_object, row_problem, rule_problem, ts_problem

COLUMNS = COLUMN_LIST  # the one entry row mapping (memlens.store.rows)
CHUNK = 256
SHOWN = 50  # findings listed per area; the rest are counted


@dataclass
class Finding:
    area: str
    problem: str
    rowid: int | None = None
    id: str | None = None

    def line(self) -> str:
        where = "".join(
            [f" rowid {self.rowid}" if self.rowid is not None else "", f" ({self.id})" if self.id else ""]
        )
        return f"{self.area}{where}: {self.problem}"


def open_read_only(path: Path) -> Any:
    """A connection that cannot change the store: ``mode=ro``, or ``immutable`` when no other process has it open.

    A read-only open of a WAL store would create ``-wal``/``-shm`` files and
    leave them behind; a store without them (closed cleanly) is read as the
    immutable file it then is.
    """
    if not path.exists():
        raise StoreError(f"no store at {path}")
    if path.is_dir():
        raise StoreError(f"store path is a directory: {path}")
    if not os.access(path, os.R_OK):
        raise StoreError(f"cannot read store {path}: permission denied")
    if path.stat().st_size and not corruption.header_damaged(path):  # (a damaged header still shows it is SQLite)
        raise StoreError(f"{path} is not a memlens store (not a SQLite database)")
    sq = db.driver()
    busy = any(Path(f"{path}{s}").exists() for s in ("-wal", "-journal"))
    uri = f"file:{quote(str(path.absolute()))}?{'mode=ro' if busy else 'immutable=1'}"
    try:
        conn = sq.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=5)
        import sqlite_vec

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute("PRAGMA query_only = ON")
    except Exception as exc:
        raise StoreError(f"cannot open store {path} read-only: {exc}") from None
    try:  # another program's database has none of a store's own tables (a store's schema version may be damaged)
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except Exception as exc:  # a damaged schema is for the checks to find and name; a lock stops them all
        names = set(STORE_TABLES)
        if lock_error(exc):
            conn.close()
            raise _locked(path) from None
    if names and not names & set(STORE_TABLES):
        conn.close()
        raise StoreError(f"{path} is a SQLite database but not a memlens store")
    return conn


STORE_TABLES = ("entries", "store_meta", "entries_fts", "entries_vec")  # (not "audit": a common name)


def lock_error(exc: BaseException) -> bool:
    """Whether SQLite refused for a lock another connection holds (SQLITE_BUSY or SQLITE_LOCKED), by its code where
    the driver gives one, else by SQLite's own words (not any message naming, say, the column ``blocked_at``)."""
    if isinstance(exc, StoreLockedError):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)
    return str(exc).lower().startswith(("database is locked", "database table is locked", "database schema is locked"))


def _locked(path: Path) -> StoreLockedError:
    """Another process holds the store's lock: the checks cannot read it now (what failed is not damage)."""
    return StoreLockedError(f"store {path} is locked by another process (waited 5 s); the check stopped, try again")


def safe(conn: Any, sql: str, args: tuple[Any, ...] = ()) -> tuple[list[Any] | None, str | None]:
    """All rows of a statement, or the error that stopped it."""
    try:
        return conn.execute(sql, args).fetchall(), None
    except Exception as exc:
        if lock_error(exc):  # another process took the store's lock meanwhile: not damage, the check stops
            raise StoreLockedError(f"another process holds the store's lock ({' '.join(str(exc).split())}); "
                                   "try again") from None
        return None, " ".join(str(exc).split()) or type(exc).__name__


def rowid_bound(conn: Any) -> int:
    """The largest rowid any readable source knows of: entries, the FTS5 index, vec0, the audit's ids."""
    best = 0
    for sql in (
        "SELECT max(rowid) FROM entries",
        # an index holds every rowid too, and may survive a damaged table (a covering scan reads only the index)
        "SELECT max(rowid) FROM entries INDEXED BY entries_hash",
        "SELECT max(rowid) FROM entries INDEXED BY entries_scope",
        "SELECT max(id) FROM entries_fts_docsize",
        "SELECT max(rowid) FROM entries_vec_rowids",
    ):
        rows, _ = safe(conn, sql)
        if rows and rows[0][0] is not None:
            best = max(best, int(rows[0][0]))
    return best


def read_entries(conn: Any) -> Iterator[tuple[int, tuple[Any, ...] | None, str | None]]:
    """Every readable entry row as (rowid, row, None); a rowid that cannot be read as (rowid, None, error)."""
    return read_by_key(conn, "entries", "rowid", COLUMNS, rowid_bound(conn))


def read_by_key(conn: Any, table: str, key: str, cols: str, top: int) -> Iterator[tuple[int, tuple[Any, ...] | None, str | None]]:
    """The readable rows of ``table`` in ``key`` order up to ``top``, reading around damaged pages.

    Reads ``CHUNK`` rows at a time from the last key read. Where that fails,
    the next ``CHUNK`` keys are read one by one, so a damaged page costs the
    rows on it, not the rest of the table. Stretches with nothing readable
    are skipped in steps that double, so a bound read from a damaged page (a
    huge ``top``) costs a few dozen steps, never a scan of every key up to it.
    Keys with no row at all (deleted ones) are not reported.
    """
    scan = f"SELECT {key}, {cols} FROM {table} WHERE {key} >= ? ORDER BY {key} LIMIT {CHUNK}"
    point = f"SELECT {key}, {cols} FROM {table} WHERE {key} = ?"
    lo, gap = 1, CHUNK
    while lo <= top:
        rows, _ = safe(conn, scan, (lo,))
        if rows:
            for r in rows:
                yield int(r[0]), tuple(r[1:]), None
            lo, gap = int(rows[-1][0]) + 1, CHUNK
            continue
        if rows is not None:  # nothing from lo on, as far as the table can tell: look further, ever faster
            lo, gap = lo + gap, gap * 2
            continue
        found = False
        for k in range(lo, min(lo + CHUNK, top + 1)):
            one, err = safe(conn, point, (k,))
            if one:
                found = True
                yield k, tuple(one[0][1:]), None
            elif err is not None:
                yield k, None, err
        lo, gap = (lo + CHUNK, CHUNK) if found else (lo + gap, gap * 2)


class Checker:
    def __init__(self, path: Path, progress: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.findings: list[Finding] = []
        self.counts: Counter[str] = Counter()
        self.checks: list[str] = []
        self.progress = progress or (lambda stage: None)
        self.info: dict[str, Any] = {}
        self.rows: dict[int, tuple[Any, ...]] = {}
        self.unreadable: set[int] = set()

    def add(self, area: str, problem: str, rowid: int | None = None, id: str | None = None) -> None:
        self.counts[area] += 1
        if self.counts[area] <= SHOWN:
            self.findings.append(Finding(area, problem, rowid, id))

    def run(self) -> dict[str, Any]:
        conn = open_read_only(self.path)
        try:
            for name, step in (
                ("sqlite", self.sqlite),
                ("schema", self.schema),
                ("entries", self.entries),
                ("fts", self.fts),
                ("vectors", self.vectors),
                ("audit", self.audit),
                ("working memory", self.working_memory),
            ):
                self.progress(name)
                try:
                    step(conn)
                except Exception as exc:  # a check that cannot run is itself a finding; a lock is not damage
                    if lock_error(exc):
                        raise _locked(self.path) from None
                    self.add(name, f"check stopped: {' '.join(str(exc).split())}")
                self.checks.append(name)
        finally:
            conn.close()
        problems = sum(self.counts.values())
        return {
            "store": str(self.path),
            "ok": problems == 0,
            "problems": problems,
            "problems_per_area": dict(self.counts),
            "findings": [asdict(f) for f in self.findings],
            "checks": self.checks,
            **self.info,
        }

    # -- the checks ------------------------------------------------------------------------

    def sqlite(self, conn: Any) -> None:
        rows, err = safe(conn, "PRAGMA integrity_check")
        if rows is not None:
            lines = [ln for r in rows for ln in str(r[0]).splitlines() if ln.strip() and not ln.startswith("***")]
            for ln in lines if lines != ["ok"] else []:
                self.add("sqlite", ln)
            return
        # the whole-file check itself failed: check table by table to say where
        self.add("sqlite", f"integrity_check stopped: {err}")
        tables, _ = safe(conn, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        for (name,) in tables or []:
            quoted = name.replace('"', '""')
            rows, err = safe(conn, f'PRAGMA integrity_check("{quoted}")')
            if rows is None:
                self.add("sqlite", f"table {name}: {err}")
            elif [r[0] for r in rows] != ["ok"]:
                self.add("sqlite", f"table {name}: {' '.join(str(rows[0][0]).split())[:200]}")

    def schema(self, conn: Any) -> None:
        version = db.schema_version(conn)
        self.info["schema_version"] = version
        if not 1 <= version <= db.SCHEMA_VERSION:
            self.add("schema", f"schema version {version} is not one this memlens knows (1..{db.SCHEMA_VERSION})")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        for need in ("entries", "entries_fts", "entries_vec", "audit", "wings", "store_meta"):
            if need not in names:
                self.add("schema", f"table {need} is missing")
        meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
        self.info["model"] = meta.get("model")
        try:
            self.info["dim"] = int(meta["dim"])
        except (KeyError, ValueError, TypeError):
            self.add("schema", f"store_meta holds no valid vector size (dim = {meta.get('dim')!r})")

    def entries(self, conn: Any) -> None:
        ids: dict[str, int] = {}
        for rowid, row, err in read_entries(conn):
            if row is None:
                self.unreadable.add(rowid)
                self.add("entries", f"unreadable: {err}", rowid)
                continue
            self.rows[rowid] = row
            problem = row_problem(row) or rule_problem(row)
            if problem is not None:
                self.add("entries", problem, rowid, str(row[0]))
            if isinstance(row[0], str):
                ids[row[0]] = rowid
        for rowid, row in self.rows.items():
            target = row[10]
            if isinstance(target, str) and target not in ids:
                self.add("entries", f"overrides {target!r}, which is not in the store", rowid, str(row[0]))
        self.info["entries"] = len(self.rows)
        self.info["unreadable_rows"] = len(self.unreadable)
        wings = Counter(str(r[1]) for r in self.rows.values())
        self.info["entries_per_wing"] = dict(sorted(wings.items()))

    def fts(self, conn: Any) -> None:
        rows, err = safe(conn, "SELECT id FROM entries_fts_docsize")
        if rows is None:
            self.add("fts", f"the FTS5 index cannot be read: {err}")
        else:
            self._same_rowids("fts", {int(r[0]) for r in rows}, "in the FTS5 index")
        from memlens.store.staging import scratch

        with scratch("memlens-check-") as tmp:  # removed however check ends (a killed one's, by the next run)
            copy = db.driver().connect(os.path.join(tmp, "copy.db"), isolation_level=None)
            try:
                conn.backup(copy)
            except Exception as exc:
                copy.close()
                if lock_error(exc):  # not damage: the check stops (``run``)
                    raise
                self.add("fts", f"cannot copy the store to run FTS5's integrity-check: {' '.join(str(exc).split())}")
                return
            try:
                copy.execute("INSERT INTO entries_fts(entries_fts, rank) VALUES ('integrity-check', 1)")
            except Exception as exc:
                self.add("fts", f"FTS5 integrity-check: {' '.join(str(exc).split())} (the index does not match the entries)")
            finally:
                copy.close()

    def vectors(self, conn: Any) -> None:
        rows, err = safe(conn, "SELECT rowid, wing, room, kind, type, status FROM entries_vec")
        if rows is None:
            self.add("vectors", f"the vector table cannot be read: {err}")
        else:
            self._same_rowids("vectors", {int(r[0]) for r in rows}, "in the vector table")
            per_wing = Counter(str(r[1]) for r in rows)
            if dict(per_wing) != self.info.get("entries_per_wing"):
                self.add("vectors", f"vectors per wing {dict(sorted(per_wing.items()))} differ from entries per wing "
                                    f"{self.info.get('entries_per_wing')}")
            for r in rows:
                row = self.rows.get(int(r[0]))
                if row is not None and tuple(r[1:]) != (row[1], row[2], row[3], row[4], row[5]):
                    self.add("vectors", f"filter columns {tuple(r[1:])} differ from the entry's "
                                        f"{(row[1], row[2], row[3], row[4], row[5])}", int(r[0]), str(row[0]))
        dim = self.info.get("dim")
        size = dim * 4 if isinstance(dim, int) else None
        bad = 0
        try:
            for rowid, blob in conn.execute("SELECT rowid, embedding FROM entries_vec"):
                if size is not None and len(blob) != size:
                    bad += 1
                    self.add("vectors", f"vector of {len(blob)} bytes, expected {size}", rowid)
                elif not np.isfinite(np.frombuffer(blob, dtype="<f4")).all():
                    bad += 1
                    self.add("vectors", "vector holds NaN or infinite values", rowid)
                elif not np.frombuffer(blob, dtype="<f4").any():
                    bad += 1
                    self.add("vectors", "vector is all zeros (no direction: search never finds the entry by meaning)", rowid)
        except Exception as exc:
            if lock_error(exc):  # not damage: the check stops (``run``)
                raise
            self.add("vectors", f"vectors cannot be read: {' '.join(str(exc).split())}")
        if isinstance(dim, int):  # the same test as ``size is not None``, and it tells the checker ``dim`` is an int
            probe = np.full(dim, 1.0 / np.sqrt(dim), dtype="<f4").tobytes()
            for wing in sorted(set(self.info.get("entries_per_wing", {}))):
                _, err = safe(conn, "SELECT rowid FROM entries_vec WHERE embedding MATCH ? AND k = 1 AND wing = ?",
                              (probe, wing))
                if err is not None:
                    self.add("vectors", f"a nearest-neighbour query in wing {wing!r} fails: {err}")

    def audit(self, conn: Any) -> None:
        rows, err = safe(conn, "SELECT count(*) FROM audit")
        if rows is None:
            self.add("audit", f"the audit table cannot be read: {err}")
            return
        try:
            for seq, before, after, detail in conn.execute("SELECT seq, before, after, detail FROM audit"):
                for name, value in (("before", before), ("after", after), ("detail", detail)):
                    if value is not None and json_object(value) is None:
                        self.add("audit", f"{name} is not a JSON object", seq)
        except Exception as exc:
            if lock_error(exc):  # not damage: the check stops (``run``)
                raise
            self.add("audit", f"audit rows cannot be read: {' '.join(str(exc).split())}")

    def working_memory(self, conn: Any) -> None:
        for table, cols in (("tasks", "rowid, task_id, validation_report, completed_at"),
                            ("blockers", "id, task_id, '{}', blocked_at")):
            rows, err = safe(conn, f"SELECT {cols} FROM {table}")
            if rows is None:
                self.add("working memory", f"table {table} cannot be read: {err}")
                continue
            for rowid, task_id, report, ts in rows:
                if json_object(report) is None:
                    self.add("working memory", f"{table}: validation_report is not a JSON object", rowid, str(task_id))
                bad = ts_problem(ts)
                if bad:
                    self.add("working memory", f"{table}: {bad}", rowid, str(task_id))

    def _same_rowids(self, area: str, found: set[int], where: str) -> None:
        have = set(self.rows)
        missing, extra = sorted(have - found), sorted(found - have - self.unreadable)
        for rowid in missing:
            self.add(area, f"entry is not {where}", rowid, str(self.rows[rowid][0]))
        for rowid in extra:
            self.add(area, f"{where} but there is no entry with this rowid", rowid)


def check_store(path: Path, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    return Checker(path, progress).run()
