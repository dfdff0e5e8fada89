"""The schema of a store, as migrations: version N's statements bring a version N-1 store to N.

``SCHEMA_VERSION`` is the newest; ``memlens.store.db.migrate`` applies what a store lacks, in one transaction.
A new migration is the next version here (and in ``MIGRATIONS``).
"""

from __future__ import annotations

SCHEMA_VERSION = 7


def _migration_1(dim: int) -> list[str]:
    return [
        """CREATE TABLE entries (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            wing TEXT NOT NULL,
            room TEXT NOT NULL DEFAULT '',
            kind TEXT NOT NULL,
            type TEXT NOT NULL,
            status TEXT NOT NULL,
            title TEXT NOT NULL,
            text TEXT NOT NULL,
            key TEXT,
            salience REAL NOT NULL,
            overrides TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}',
            content_hash TEXT NOT NULL,
            model TEXT
        )""",
        "CREATE INDEX entries_scope ON entries(wing, room, kind, type, status)",
        "CREATE INDEX entries_hash ON entries(content_hash, model)",
        "CREATE INDEX entries_key ON entries(key, kind) WHERE key IS NOT NULL",
        """CREATE VIRTUAL TABLE entries_fts USING fts5(
            title, text, content='entries', content_rowid='rowid', tokenize='porter unicode61'
        )""",
        """CREATE TRIGGER entries_ai AFTER INSERT ON entries BEGIN
            INSERT INTO entries_fts(rowid, title, text) VALUES (new.rowid, new.title, new.text);
        END""",
        """CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN
            INSERT INTO entries_fts(entries_fts, rowid, title, text) VALUES ('delete', old.rowid, old.title, old.text);
        END""",
        """CREATE TRIGGER entries_au AFTER UPDATE OF title, text ON entries BEGIN
            INSERT INTO entries_fts(entries_fts, rowid, title, text) VALUES ('delete', old.rowid, old.title, old.text);
            INSERT INTO entries_fts(rowid, title, text) VALUES (new.rowid, new.title, new.text);
        END""",
        # wing is a partition key: a scoped KNN scans only that wing's chunks.
        # room/kind/type/status are metadata columns: filtered inside the KNN.
        f"""CREATE VIRTUAL TABLE entries_vec USING vec0(
            embedding float[{dim}] distance_metric=cosine,
            wing text partition key,
            room text,
            kind text,
            type text,
            status text
        )""",
        """CREATE TABLE wings (
            wing TEXT PRIMARY KEY,
            generation INTEGER NOT NULL DEFAULT 0,
            last_write_seq INTEGER
        )""",
        """CREATE TABLE audit (
            seq INTEGER PRIMARY KEY,
            ts TEXT NOT NULL,
            action TEXT NOT NULL,
            entry_id TEXT,
            wing TEXT,
            before TEXT,
            after TEXT,
            detail TEXT
        )""",
        "CREATE INDEX audit_entry ON audit(entry_id)",
        "CREATE INDEX audit_action ON audit(action, seq)",
        "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ]


def _migration_2(dim: int) -> list[str]:
    """Working memory: completed tasks and blockers (see ``memlens.working.tasks``).

    Timestamps are fixed-width UTC text (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) so that
    text order is time order; ``seq`` is the audit sequence of the write that
    stored the row and breaks ties between equal timestamps.
    """
    return [
        """CREATE TABLE tasks (
            task_id TEXT PRIMARY KEY,
            intent TEXT,
            summary TEXT,
            outcome TEXT NOT NULL CHECK (outcome IN ('success', 'failure')),
            completed_at TEXT NOT NULL,
            requires_context INTEGER NOT NULL DEFAULT 0,
            validation_report TEXT NOT NULL DEFAULT '{}',
            seq INTEGER NOT NULL
        )""",
        "CREATE INDEX tasks_recent ON tasks(completed_at, seq)",
        """CREATE TABLE blockers (
            id INTEGER PRIMARY KEY,
            task_id TEXT NOT NULL,
            reason TEXT NOT NULL,
            blocked_at TEXT NOT NULL,
            resolved_at TEXT,
            resolution TEXT
        )""",
        # at most one active blocker per task; the window reads active ones in time order
        "CREATE UNIQUE INDEX blockers_active ON blockers(task_id) WHERE resolved_at IS NULL",
        "CREATE INDEX blockers_open ON blockers(blocked_at, id) WHERE resolved_at IS NULL",
        "CREATE INDEX blockers_task ON blockers(task_id, blocked_at)",
    ]


def _migration_3(dim: int) -> list[str]:
    """Retrieval pulls in the entries that override a candidate: look them up by index, not by scan."""
    return ["CREATE INDEX IF NOT EXISTS entries_overrides ON entries(overrides) WHERE overrides IS NOT NULL"]


def _migration_4(dim: int) -> list[str]:
    """Imports in progress (``memlens.store.staging``): their rows are written in short transactions but stay
    invisible to every reader until one short transaction deletes the import's ``imports`` row."""
    return [
        """CREATE TABLE imports (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            owner TEXT NOT NULL,
            started_at TEXT NOT NULL,
            heartbeat TEXT NOT NULL,
            source TEXT
        )""",
        "ALTER TABLE entries ADD COLUMN import_id INTEGER",
        "ALTER TABLE audit ADD COLUMN import_id INTEGER",
        "CREATE INDEX entries_import ON entries(import_id, wing) WHERE import_id IS NOT NULL",
        "CREATE INDEX audit_import ON audit(import_id) WHERE import_id IS NOT NULL",
    ]


def _migration_5(dim: int) -> list[str]:
    """Answers (``memlens ask``, the app's assistant shell), each with the retrieval it used and the entries it cited
    (see ``memlens.assist.log``)."""
    return [
        """CREATE TABLE answers (
            id INTEGER PRIMARY KEY,
            ts TEXT NOT NULL,
            question TEXT NOT NULL,
            model TEXT NOT NULL,
            complete INTEGER NOT NULL,
            error TEXT,
            retrieval_seq INTEGER,
            retrieval TEXT NOT NULL DEFAULT '{}'
        )""",
        """CREATE TABLE answer_citations (
            answer_id INTEGER NOT NULL,
            entry_id TEXT NOT NULL,
            valid INTEGER NOT NULL,
            PRIMARY KEY (answer_id, entry_id)
        )""",
        "CREATE INDEX answer_citations_entry ON answer_citations(entry_id, valid)",
    ]


def _migration_6(dim: int) -> list[str]:
    """Ingested documents and indexed code (``memlens.ingest``): the catalog of sources, which entries
    each source produced, and the runs of ``ingest``/``index`` (the code index's ``indexed_at``)."""
    return [
        """CREATE TABLE sources (
            id INTEGER PRIMARY KEY,
            wing TEXT NOT NULL,
            path TEXT NOT NULL,
            kind TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            version TEXT NOT NULL,
            chunks INTEGER NOT NULL,
            indexed_at TEXT NOT NULL,
            UNIQUE (wing, path)
        )""",
        "CREATE TABLE source_entries (source_id INTEGER NOT NULL, entry_id TEXT NOT NULL, PRIMARY KEY (source_id, entry_id))",
        """CREATE TABLE ingest_runs (
            id INTEGER PRIMARY KEY,
            mode TEXT NOT NULL,
            wing TEXT NOT NULL,
            root TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            seconds REAL,
            status TEXT NOT NULL,
            summary TEXT NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX ingest_runs_scope ON ingest_runs(mode, wing, root, id)",
    ]



def _migration_7(dim: int) -> list[str]:
    """What replay, golden queries and the access log need (``memlens.replay``; its SQL is in ``replay/storage.py``).

    ``retrieval_log`` adds to each ``retrieval`` audit row (same ``seq``) the request as it was made, the client,
    whether it built a context, and its ranked hits (ids, scores, score components) as one compact JSON array:
    one row per search, appended at the end of its table. A trigger deletes it with its audit row, so it lives
    exactly as long as the retrieval records (``memlens.store.retention``).
    """
    return [
        """CREATE TABLE retrieval_log (
            seq INTEGER PRIMARY KEY,
            request TEXT NOT NULL,
            client TEXT NOT NULL DEFAULT '',
            context INTEGER NOT NULL DEFAULT 0,
            hits TEXT NOT NULL DEFAULT '[]'
        )""",
        """CREATE TRIGGER audit_retrieval_pruned AFTER DELETE ON audit WHEN old.action = 'retrieval' BEGIN
            DELETE FROM retrieval_log WHERE seq = old.seq;
        END""",
        """CREATE TABLE golden (
            id INTEGER PRIMARY KEY,
            query TEXT NOT NULL,
            expect TEXT NOT NULL,
            active_wing TEXT NOT NULL DEFAULT '',
            within INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            UNIQUE (query, expect, active_wing)
        )""",
    ]


MIGRATIONS = {
    1: _migration_1,
    2: _migration_2,
    3: _migration_3,
    4: _migration_4,
    5: _migration_5,
    6: _migration_6,
    7: _migration_7,
}
