"""FTS5's bm25 on PostgreSQL: the SQLite store's tokens, statistics in tables, the same formula in SQL.

The SQLite store ranks text matches with ``bm25(entries_fts, 2.0, 1.0)`` over
FTS5's ``porter unicode61`` tokens. The PostgreSQL store ranks them the same way:

- **Tokens**: an entry's title and text become tokens as FTS5 makes them. A text
  of plain ASCII is cut here (unicode61 yields its lower-cased runs of letters
  and digits; ``memlens.store.speed.porter`` stems them, once checked against SQLite
  on a probe vocabulary); any other text goes through SQLite's own tokenizer (a
  temp FTS5 table in memory), so every text gets exactly FTS5's tokens.
- **Postings**: each ``entries`` row holds its distinct tokens (``lex_terms``),
  each one's frequency weighted by column as the lexical stage asks (title 2,
  text 1: ``lex_freqs``) and its token count (``lex_len``); ``lex_postings``
  holds the same per (token, row), read by its index.
- **Statistics**: ``lex_df`` holds per token the rows holding it, and under the
  token '' the row count and the total token count (the rows of an import in
  progress count, as they do in FTS5's index).
- **Folding**: the postings and ``lex_df`` cover the rows up to
  ``lex_state.folded_upto``; newer rows are *pending* and read from their own
  ``lex_terms`` by every search, beside the tables. A statement that stores a row
  folds the pending rows into the tables once there are ``FOLD_EVERY`` of them
  (``fold_parts``, under the write lock), so a write pays the statistics' upkeep in
  bulk: each token's count is updated once per fold instead of once per row.
  Statement triggers keep the folded rows in step with every update and delete.
  Rowids are drawn under the write lock, so every row at or below the mark is
  folded and every row above it is pending.
- **Score**: a search reads its tokens' counts, computes each idf and the
  average row length in Python as FTS5 does, and scores the matching rows in
  SQL with FTS5's expression, term after term in the query's order: the same
  float operations, so the same scores, rows and order (ties by rowid).
- **Phrases**: a query word that FTS5 cuts into several tokens (``child_process``,
  ``PyErr_Print``) is a phrase there: its tokens side by side, in order. Rows keep
  no positions, so the rows holding all of its tokens are read and their title and
  text cut again here; a phrase's count per row (overlaps count, as in FTS5), its
  idf (the rows holding it, in the whole table) and its terms are computed in
  Python with the same float operations, and summed in SQL at the phrase's place.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from memlens.store.speed.lexindex import K1, PROBE, WEIGHTS, B
from memlens.store.speed.porter import stem

_RUN = re.compile(r"[A-Za-z0-9]+")
_LOCAL = threading.local()
_STEMS: dict[str, str | None] = {}  # word -> its token (None: the port is unsure, SQLite tokenizes the text)
_STEMS_MAX = 200_000
_PORT_OK: list[bool] = []  # [whether memlens.store.speed.porter agrees with this SQLite], once checked
_TOKENIZER = "porter unicode61"  # the SQLite store's entries_fts tokenizer
# characters outside ASCII that unicode61 always cuts at (punctuation and spaces; checked once with ``PROBE``): a
# text whose only other characters are ASCII is cut here too (an automatic title ends with "…")
_SEPARATORS = "\u00a0\u2013\u2014\u2018\u2019\u201c\u201d\u2022\u2026"
_AS_SPACE = str.maketrans(_SEPARATORS, " " * len(_SEPARATORS))
LEX_COLUMNS = "lex_terms, lex_freqs, lex_len"  # what ``postings`` gives for a row, in this order
# the values of LEX_COLUMNS in a statement, from ``packed``: the arrays split by the server
LEX_VALUES = ("string_to_array(%s::text, ' ')", "string_to_array(%s::text, ' ')::real[]", "%s::integer")

_CHANGED = "(n.lex_terms, n.lex_freqs, n.lex_len) IS DISTINCT FROM (o.lex_terms, o.lex_freqs, o.lex_len)"
SCHEMA = [
    "ALTER TABLE entries ADD COLUMN lex_terms text[] NOT NULL DEFAULT '{}', "
    "ADD COLUMN lex_freqs real[] NOT NULL DEFAULT '{}', ADD COLUMN lex_len integer NOT NULL DEFAULT 0",
    "DROP INDEX IF EXISTS entries_tsv",
    "ALTER TABLE entries DROP COLUMN IF EXISTS tsv",
    # per (token, row): the row's weighted frequency of the token and its length, read by index only
    "CREATE TABLE lex_postings (term text NOT NULL, rowid bigint NOT NULL, freq real NOT NULL, len integer NOT NULL, "
    "PRIMARY KEY (term, rowid) INCLUDE (freq, len))",
    "CREATE TABLE lex_df (term text PRIMARY KEY, docs bigint NOT NULL, tokens bigint NOT NULL DEFAULT 0)",
    # one function for the three triggers: the rows' postings, and the change of each token's row count (and of the
    # '' row's totals); an update that leaves a row's tokens as they were changes neither
    """CREATE FUNCTION memlens_lex() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO lex_postings(term, rowid, freq, len)
            SELECT u.t, n.rowid, u.f, n.lex_len FROM new_rows n, unnest(n.lex_terms, n.lex_freqs) AS u(t, f);
            INSERT INTO lex_df(term, docs, tokens)
            SELECT t, sum(d), sum(n) FROM (SELECT unnest(lex_terms) AS t, 1 AS d, 0 AS n FROM new_rows
                                           UNION ALL SELECT '', 1, lex_len FROM new_rows) x GROUP BY t
            ON CONFLICT (term) DO UPDATE SET docs = lex_df.docs + excluded.docs, tokens = lex_df.tokens + excluded.tokens;
        ELSIF TG_OP = 'DELETE' THEN
            DELETE FROM lex_postings p USING (SELECT unnest(lex_terms) AS t, rowid FROM old_rows) o
            WHERE p.term = o.t AND p.rowid = o.rowid;
            UPDATE lex_df SET docs = lex_df.docs - x.d, tokens = lex_df.tokens - x.n
            FROM (SELECT t, sum(d) AS d, sum(n) AS n FROM (SELECT unnest(lex_terms) AS t, 1 AS d, 0 AS n FROM old_rows
                  UNION ALL SELECT '', 1, lex_len FROM old_rows) y GROUP BY t) x WHERE lex_df.term = x.t;
        ELSE
            IF NOT EXISTS (SELECT 1 FROM new_rows n JOIN old_rows o USING (rowid) WHERE {changed}) THEN
                RETURN NULL;
            END IF;
            DELETE FROM lex_postings p USING (SELECT unnest(o.lex_terms) AS t, o.rowid FROM old_rows o
                                              JOIN new_rows n USING (rowid) WHERE {changed}) x
            WHERE p.term = x.t AND p.rowid = x.rowid;
            INSERT INTO lex_postings(term, rowid, freq, len)
            SELECT u.t, n.rowid, u.f, n.lex_len FROM new_rows n JOIN old_rows o USING (rowid),
                   unnest(n.lex_terms, n.lex_freqs) AS u(t, f) WHERE {changed};
            INSERT INTO lex_df(term, docs, tokens)
            SELECT t, sum(d), sum(n) FROM (SELECT unnest(lex_terms) AS t, 1 AS d, 0 AS n FROM new_rows
                                           UNION ALL SELECT '', 1, lex_len FROM new_rows
                                           UNION ALL SELECT unnest(lex_terms), -1, 0 FROM old_rows
                                           UNION ALL SELECT '', -1, -lex_len FROM old_rows) x
            GROUP BY t HAVING sum(d) <> 0 OR sum(n) <> 0
            ON CONFLICT (term) DO UPDATE SET docs = lex_df.docs + excluded.docs, tokens = lex_df.tokens + excluded.tokens;
        END IF;
        RETURN NULL;
    END $$""".replace("{changed}", _CHANGED),
    "CREATE TRIGGER entries_lex_ins AFTER INSERT ON entries REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION memlens_lex()",
    "CREATE TRIGGER entries_lex_del AFTER DELETE ON entries REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION memlens_lex()",
    "CREATE TRIGGER entries_lex_upd AFTER UPDATE ON entries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION memlens_lex()",
]

FOLD_EVERY = 128  # pending rows a storing statement folds at once (each search reads up to this many rows' tokens)
_MARK = "(SELECT folded_upto FROM lex_state)"
PENDING = f"SELECT rowid, lex_terms, lex_freqs, lex_len FROM entries WHERE rowid > {_MARK}"  # rows the tables lack
_COUNTED = ("SELECT t, sum(d), sum(n) FROM (SELECT unnest(lex_terms) AS t, 1 AS d, 0 AS n FROM {rows} "
            "UNION ALL SELECT '', 1, lex_len FROM {rows}) x GROUP BY t")
_ADD_COUNTS = "ON CONFLICT (term) DO UPDATE SET docs = lex_df.docs + excluded.docs, tokens = lex_df.tokens + excluded.tokens"


def fold_parts(newest: str) -> str:
    """WITH parts of a statement that stores the row ``newest`` (an expression of its rowid): when ``FOLD_EVERY`` rows
    are pending, their postings and counts go into the tables and the mark moves past them (rows this statement
    stores stay pending: they are not in its snapshot). The statement runs under the write lock, so the rows it
    folds are every row from the mark up to the newest it sees: a row stored after its snapshot was taken has a
    higher rowid than those."""
    return (f"fp AS (SELECT rowid, lex_terms, lex_freqs, lex_len FROM entries WHERE {newest} - {_MARK} >= {FOLD_EVERY} "
            # the mark as it is now: the statement's snapshot may predate the lock, and a fold committed meanwhile
            "AND rowid > (SELECT folded_upto FROM lex_state FOR UPDATE)), "
            "fi AS (INSERT INTO lex_postings(term, rowid, freq, len) "
            "SELECT u.t, fp.rowid, u.f, fp.lex_len FROM fp, unnest(fp.lex_terms, fp.lex_freqs) AS u(t, f)), "
            f"fd AS (INSERT INTO lex_df(term, docs, tokens) {_COUNTED.format(rows='fp')} {_ADD_COUNTS}), "
            "fm AS (UPDATE lex_state SET folded_upto = m.top FROM (SELECT max(rowid) AS top FROM fp) m "
            "WHERE m.top IS NOT NULL)")


# migration 6: pending rows (see Folding above); the triggers keep only the folded rows' postings and counts
FOLD_SCHEMA = [
    "CREATE TABLE lex_state (folded_upto bigint NOT NULL)",
    "INSERT INTO lex_state SELECT coalesce(max(rowid), 0) FROM entries",  # the triggers have counted every row
    "DROP TRIGGER entries_lex_ins ON entries",
    """CREATE OR REPLACE FUNCTION memlens_lex() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        w bigint := (SELECT folded_upto FROM lex_state);
    BEGIN
        IF TG_OP = 'DELETE' THEN
            DELETE FROM lex_postings p USING (SELECT unnest(lex_terms) AS t, rowid FROM old_rows WHERE rowid <= w) o
            WHERE p.term = o.t AND p.rowid = o.rowid;
            UPDATE lex_df SET docs = lex_df.docs - x.d, tokens = lex_df.tokens - x.n
            FROM (SELECT t, sum(d) AS d, sum(n) AS n FROM (SELECT unnest(lex_terms) AS t, 1 AS d, 0 AS n FROM old_rows
                  WHERE rowid <= w UNION ALL SELECT '', 1, lex_len FROM old_rows WHERE rowid <= w) y GROUP BY t) x
            WHERE lex_df.term = x.t;
        ELSE
            IF NOT EXISTS (SELECT 1 FROM new_rows n JOIN old_rows o USING (rowid) WHERE n.rowid <= w AND {changed}) THEN
                RETURN NULL;
            END IF;
            DELETE FROM lex_postings p USING (SELECT unnest(o.lex_terms) AS t, o.rowid FROM old_rows o
                                              JOIN new_rows n USING (rowid) WHERE o.rowid <= w AND {changed}) x
            WHERE p.term = x.t AND p.rowid = x.rowid;
            INSERT INTO lex_postings(term, rowid, freq, len)
            SELECT u.t, n.rowid, u.f, n.lex_len FROM new_rows n JOIN old_rows o USING (rowid),
                   unnest(n.lex_terms, n.lex_freqs) AS u(t, f) WHERE n.rowid <= w AND {changed};
            INSERT INTO lex_df(term, docs, tokens)
            SELECT t, sum(d), sum(n) FROM (SELECT unnest(lex_terms) AS t, 1 AS d, 0 AS n FROM new_rows WHERE rowid <= w
                                           UNION ALL SELECT '', 1, lex_len FROM new_rows WHERE rowid <= w
                                           UNION ALL SELECT unnest(lex_terms), -1, 0 FROM old_rows WHERE rowid <= w
                                           UNION ALL SELECT '', -1, -lex_len FROM old_rows WHERE rowid <= w) x
            GROUP BY t HAVING sum(d) <> 0 OR sum(n) <> 0
            ON CONFLICT (term) DO UPDATE SET docs = lex_df.docs + excluded.docs, tokens = lex_df.tokens + excluded.tokens;
        END IF;
        RETURN NULL;
    END $$""".replace("{changed}", _CHANGED),
]


def _sqlite() -> Any:
    """This thread's in-memory SQLite with a scratch FTS5 table of the store's tokenizer and its instance vocabulary."""
    conn = getattr(_LOCAL, "conn", None)
    if conn is None:
        from memlens.store import db

        conn = db.driver().connect(":memory:", isolation_level=None, check_same_thread=False)
        # FTS5 cuts a token at 32 KiB, inside a character if it must (a run of 10,923 CJK characters): the bytes of
        # that character left are dropped, so the token is text PostgreSQL stores (the query's is cut the same way)
        conn.text_factory = lambda b: b.decode("utf-8", "ignore")
        conn.execute(f"CREATE VIRTUAL TABLE temp.tok USING fts5(title, text, tokenize='{_TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE temp.tokv USING fts5vocab(temp, tok, instance)")
        _LOCAL.conn = conn
    return conn


def _by_sqlite(fields: Sequence[str]) -> list[list[str]]:
    """Each field's tokens, in order, as SQLite's FTS5 makes them (the field as one column of one row)."""
    conn = _sqlite()
    conn.execute("DELETE FROM tok")
    try:
        conn.executemany("INSERT INTO tok(rowid, title, text) VALUES (?, ?, '')", list(enumerate(fields, 1)))
        got: dict[int, list[tuple[int, str]]] = {}
        for doc, off, term in conn.execute("SELECT doc, offset, term FROM tokv"):
            got.setdefault(doc, []).append((off, term))
    finally:
        conn.execute("DELETE FROM tok")
    return [[t for _, t in sorted(got.get(i, []))] for i in range(1, len(fields) + 1)]


def _port_ok() -> bool:
    """Whether ``memlens.store.speed.porter`` stems as this SQLite does (checked once per process on ``PROBE``)."""
    if not _PORT_OK:
        words = list(PROBE) + [f"a{c}b" for c in _SEPARATORS]
        want = [[stem(w)] for w in PROBE] + [["a", "b"]] * len(_SEPARATORS)
        _PORT_OK.append(_by_sqlite(words) == want)
    return _PORT_OK[0]


def _ascii_tokens(text: str) -> list[str] | None:
    """unicode61 + porter on a plain-ASCII text, here; None when a word needs SQLite."""
    out = []
    for run in _RUN.findall(text):
        word = run.lower()
        tok = _STEMS.get(word, "")
        if tok == "":
            if len(_STEMS) >= _STEMS_MAX:
                _STEMS.clear()
            tok = _STEMS[word] = stem(word)
        if tok is None:
            return None
        out.append(tok)
    return out


def field_tokens(fields: Sequence[str]) -> list[list[str]]:
    """Each text's tokens, in order, exactly as FTS5's ``porter unicode61`` makes them."""
    out: list[list[str] | None] = [_ascii_tokens(f if f.isascii() else f.translate(_AS_SPACE))
                                   if (f.isascii() or f.translate(_AS_SPACE).isascii()) and _port_ok() else None
                                   for f in fields]
    rest = [i for i, toks in enumerate(out) if toks is None]
    if rest:
        for i, toks in zip(rest, _by_sqlite([fields[i] for i in rest])):
            out[i] = toks
    return [toks or [] for toks in out]


def postings(rows: Sequence[tuple[str, str]]) -> list[tuple[list[str], list[float], int]]:
    """Per (title, text): its distinct tokens, each one's frequency weighted by column, its token count."""
    toks = field_tokens([f for title, text in rows for f in (title, text)])
    out = []
    for i in range(len(rows)):
        freqs: dict[str, float] = {}
        for col, weight in ((toks[2 * i], WEIGHTS["title"]), (toks[2 * i + 1], WEIGHTS["text"])):
            for t in col:
                freqs[t] = freqs.get(t, 0.0) + weight
        terms = sorted(freqs)
        out.append((terms, [freqs[t] for t in terms], len(toks[2 * i]) + len(toks[2 * i + 1])))
    return out


def packed(title: str, text: str) -> tuple[str, str, int]:
    """A row's ``postings`` as a writer sends them (``LEX_VALUES``): its tokens, and their weights, each as one text
    split at spaces by the server. psycopg dumps a list element by element in Python: two lists of ~40 took
    ~0.2 ms of each add, two texts ~0.02 ms. No token holds a space (unicode61 cuts at every one)."""
    terms, freqs, n = postings([(title, text)])[0]
    return " ".join(terms), " ".join(map(repr, freqs)), n


def query_phrases(terms: Iterable[str]) -> list[tuple[str, ...]]:
    """Each query term's tokens, in order: a phrase of several tokens, or one; a term of none gives nothing (an
    empty phrase in FTS5 matches no row and adds nothing to a score)."""
    return [tuple(toks) for toks in field_tokens(list(terms)) if toks]


def idf(rows: int, hits: int) -> float:
    """FTS5's idf of a token held by ``hits`` of ``rows`` rows."""
    v = math.log((rows - hits + 0.5) / (hits + 0.5))
    return v if v > 0.0 else 1e-6


def _occurrences(tokens: list[str], phrase: tuple[str, ...]) -> int:
    """How many times ``phrase`` stands in ``tokens``: its tokens side by side, in order (overlaps count, as in FTS5)."""
    n, first = len(phrase), phrase[0]
    return sum(1 for i in range(len(tokens) - n + 1) if tokens[i] == first and tuple(tokens[i:i + n]) == phrase)


def phrase_rows(conn: Any, phrase: tuple[str, ...]) -> dict[int, tuple[float, int]]:
    """The rows holding ``phrase`` (every row of the table, as FTS5's idf counts them): rowid -> (its occurrences
    weighted by column, the row's token count). Read: the rows holding all of its tokens; cut here again."""
    distinct = sorted(set(phrase))
    rows = conn.execute("SELECT rowid, title, text, lex_len FROM entries WHERE rowid IN (SELECT rowid FROM lex_postings "
                        "WHERE term = ANY(%s) GROUP BY rowid HAVING count(*) = %s "
                        f"UNION ALL SELECT rowid FROM ({PENDING}) p WHERE lex_terms @> %s)",
                        (distinct, len(distinct), distinct)).fetchall()
    toks = field_tokens([f for _, title, text, _ in rows for f in (title, text)])
    out = {}
    for i, (rowid, _, _, length) in enumerate(rows):
        f = (WEIGHTS["title"] * _occurrences(toks[2 * i], phrase)
             + WEIGHTS["text"] * _occurrences(toks[2 * i + 1], phrase))  # sums of small integers: exact
        if f > 0.0:
            out[int(rowid)] = (f, int(length))
    return out


def scored(conn: Any, phrases: list[tuple[str, ...]]) -> tuple[str, list[Any]]:
    """A statement giving the rows that match any of ``phrases`` with FTS5's bm25 score ``s`` (higher is better),
    and its parameters. A phrase of one token is scored in SQL from the postings; one of several, here
    (``phrase_rows``). Each (phrase, row) contributes FTS5's term; a row's terms are summed in the query's order,
    as FTS5 sums them (a phrase the row lacks adds +0.0 there, which changes no sum)."""
    words = [(i, p[0]) for i, p in enumerate(phrases) if len(p) == 1]
    found = {i: phrase_rows(conn, p) for i, p in enumerate(phrases) if len(p) > 1}
    wanted = ["", *dict.fromkeys(t for _, t in words)]
    got = {t: (int(d), int(n)) for t, d, n in conn.execute(  # the tables' counts and the pending rows'
        "SELECT term, sum(docs), sum(tokens) FROM (SELECT term, docs, tokens FROM lex_df WHERE term = ANY(%s) "
        f"UNION ALL SELECT u.t, 1, 0 FROM ({PENDING}) p, unnest(p.lex_terms) AS u(t) WHERE u.t = ANY(%s) "
        f"UNION ALL SELECT '', count(*), coalesce(sum(lex_len), 0) FROM ({PENDING}) p) c GROUP BY term", (wanted, wanted))}
    rows, total = got.get("", (0, 0))
    avgdl = float(total) / float(rows) if rows else 1.0
    k1, b = f"{K1!r}::float8", f"{B!r}::float8"
    term = (f"q.idf * ((p.freq::float8 * {K1 + 1.0!r}::float8) / "
            f"(p.freq::float8 + {k1} * ((1.0::float8 - {b}) + ({b} * p.len) / %s::float8)))")
    query = "unnest(%s::text[], %s::float8[], %s::int[]) AS q(t, idf, i)"
    sql = (f"SELECT p.rowid, q.i, {term} AS c FROM {query} JOIN lex_postings p ON p.term = q.t UNION ALL "
           f"SELECT p.rowid, q.i, {term} FROM {query} JOIN (SELECT u.t AS term, e.rowid, u.f AS freq, e.lex_len AS len "
           f"FROM ({PENDING}) e, unnest(e.lex_terms, e.lex_freqs) AS u(t, f)) p ON p.term = q.t")
    one = [[t for _, t in words], [idf(rows, got.get(t, (0, 0))[0]) for _, t in words], [i for i, _ in words]]
    params: list[Any] = [avgdl, *one, avgdl, *one]
    if found:  # the phrases' terms, as the SQL computes a word's
        hits = [(r, i, idf(rows, len(m)), f, n) for i, m in found.items() for r, (f, n) in m.items()]
        sql += " UNION ALL SELECT * FROM unnest(%s::bigint[], %s::int[], %s::float8[])"
        params += [[h[0] for h in hits], [h[1] for h in hits],
                   [v * ((f * (K1 + 1.0)) / (f + K1 * ((1.0 - B) + (B * n) / avgdl))) for _, _, v, f, n in hits]]
    return f"SELECT rowid, sum(c ORDER BY i) AS s FROM ({sql}) x GROUP BY rowid", params


def rebuild(conn: Any, *, mark: bool = True) -> None:
    """``lex_postings`` and ``lex_df`` made again from the rows (after rows were written with the triggers off),
    every row folded (``mark``: a store of schema 6 or later, which has ``lex_state``)."""
    conn.execute("DELETE FROM lex_postings")
    conn.execute("INSERT INTO lex_postings(term, rowid, freq, len) SELECT u.t, e.rowid, u.f, e.lex_len FROM entries e, "
                 "unnest(e.lex_terms, e.lex_freqs) AS u(t, f)")
    conn.execute("DELETE FROM lex_df")
    conn.execute("INSERT INTO lex_df(term, docs, tokens) SELECT t, count(*), 0 FROM entries, unnest(lex_terms) AS t "
                 "GROUP BY t UNION ALL SELECT '', count(*), coalesce(sum(lex_len), 0) FROM entries")
    if mark:
        conn.execute("UPDATE lex_state SET folded_upto = (SELECT coalesce(max(rowid), 0) FROM entries)")


def backfill(conn: Any, batch: int = 1000) -> None:
    """Give every row its postings (a store made before they existed), then count ``lex_df``; inside the
    migration's transaction."""
    conn.execute("ALTER TABLE entries DISABLE TRIGGER entries_lex_upd")
    last = 0
    while True:
        rows = conn.execute("SELECT rowid, title, text FROM entries WHERE rowid > %s ORDER BY rowid LIMIT %s",
                            (last, batch)).fetchall()
        if not rows:
            break
        with conn.cursor() as cur:
            cur.executemany("UPDATE entries SET lex_terms = %s, lex_freqs = %s, lex_len = %s WHERE rowid = %s",
                            [(*p, r[0]) for r, p in zip(rows, postings([(r[1], r[2]) for r in rows]))])
        last = rows[-1][0]
    conn.execute("ALTER TABLE entries ENABLE TRIGGER entries_lex_upd")
    rebuild(conn, mark=False)  # migration 6 marks every row folded
