"""FTS5's bm25 ranking computed in process from postings read once per state of the text index.

FTS5 answers an OR-query by walking every term's segments and, for each matching row,
reading that row's size from ``entries_fts_docsize``: hundreds of statements a search.
This index keeps what that work reads, per state of the text index: every row's size
(all columns), the "averages" record (row count, tokens per column) and, per token, the
rows holding it with their column-weighted frequency. A search then scores the matching
rows with FTS5's own formula, in the same float64 operations in the same order, so the
hits, their order and their scores are those of ``bm25(entries_fts, 2.0, 1.0)``.

The formula (FTS5's ``fts5Bm25Function``): ``avgdl`` = tokens of all columns / rows;
per phrase ``idf = log((rows - hits + 0.5) / (hits + 0.5))`` (1e-6 when <= 0), with
``hits`` the rows of the whole index holding it; per row, ``f`` = the phrase's instances
weighted by column, ``D`` = the row's tokens, and
``score += idf * (f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)))`` phrase after
phrase, k1 = 1.2, b = 0.75. Ties go by rowid, as ``ORDER BY bm25, rowid`` does.

Any change to the text index (FTS5 rewrites its records 1 and 10 in every transaction that changes
it) discards what is held. The first search in a new state runs FTS5's SQL; the second reads the
sizes (~4 ms at 2,800 rows). A token's postings (~2 µs per instance) are read the second time a
search in that state asks for it; a search with a token asked for the first time runs FTS5's SQL.
So a store written between every two searches never pays for reading, a word asked once costs what
it always did (reading its postings costs more than ranking it once), and words asked again are
ranked here.

Words are turned into tokens by SQLite itself (a temp FTS5 table with the index's own
tokenizer), except plain ASCII words under the default ``porter unicode61`` tokenizer: those
are stemmed by ``memlens.store.speed.porter``, a port of SQLite's stemmer (about 1 µs a word, where
the temp table cost ~0.35 ms a search). Before it is trusted, the port is compared with the
running SQLite on a probe vocabulary; one difference and SQLite tokenizes every word, as
before. A quoted word that becomes zero or several tokens
is a phrase query in FTS5 (adjacent tokens); such queries are not served here: the caller
runs the SQL. Everything lives in the connection's temp schema; the store file is never
written. ``search`` returns None whenever it cannot answer exactly (the caller then runs
the SQL): inside a transaction, on a read-only connection, on any SQLite error.
"""

from __future__ import annotations

import math
import re
import threading
from typing import Any

import numpy as np

from memlens.store import db
from memlens.store.speed.porter import stem
from memlens.store.speed.stamps import Stamps
from memlens.store.textindex import varints

K1 = 1.2
B = 0.75
WEIGHTS = {"title": 2.0, "text": 1.0}  # the column weights the lexical stage passes to bm25
TERMS_KEPT = 20_000  # tokens whose postings a snapshot keeps (then it starts over)
WARM_INSTANCES = 4_000_000  # a text index up to this many token instances is read whole when the store warms
# with text=True: ~0.5 s at 400k instances (2,800 documentation sections), ~4.5 s for 100k short entries of
# 8-16 words, on the warming thread; ~16 bytes held per (token, row) pair
WORDS_KEPT = 50_000  # word -> tokens kept (the tokenizer never changes, so neither does the answer)

# words that take every rule of the Porter stemmer, for the check of memlens.store.speed.porter against SQLite
PROBE = tuple("""
caresses ponies ties caress cats feed agreed plastered bled motoring sing conflated troubled sized hopping tanned
falling hissing fizzed failing filing happy sky relational conditional rational valenci hesitanci digitizer
conformabli radicalli differentli vileli analogousli vietnamization predication operator feudalism decisiveness
hopefulness callousness formaliti sensitiviti sensibiliti triplicate formative formalize electriciti electrical
hopeful goodness revival allowance inference airliner gyroscopic adjustable defensible irritant replacement
adjustment dependent adoption homologou communism activate angulariti homologous effective bowdlerize probate rate
cease controll roll generalizations oscillators analogi abli encoding buffers utf8 readable streams 2x a1b2c3
""".split())

_VOCAB = "memlens_lex_vocab"  # fts5vocab(instance) over the store's entries_fts
_VOCAB_ROWS = "memlens_lex_vocab_rows"  # fts5vocab(row) over it: per token, rows and instances
_TOK = "memlens_lex_tok"  # a scratch FTS5 table with the index's tokenizer
_TOKV = "memlens_lex_tokv"  # fts5vocab(instance) over the scratch table


def _read_state_records(conn: Any) -> dict[int, bytes]:
    return dict(conn.execute("SELECT id, block FROM entries_fts_data WHERE id IN (1, 10)").fetchall())


def _tokenizer(conn: Any) -> str | None:
    """The ``tokenize`` option the store's ``entries_fts`` was made with (None when it cannot be read)."""
    row = conn.execute("SELECT sql FROM main.sqlite_master WHERE name = 'entries_fts'").fetchone()
    m = re.search(r"tokenize\s*=\s*'([^']*)'", row[0] if row else "")
    return m.group(1) if m else None


class _Inexact(Exception):
    """This index cannot answer exactly as FTS5 would: the caller runs the SQL."""


class _Snapshot:
    """What one state of the text index holds: row sizes, averages, postings read so far."""

    __slots__ = ("state", "nrow", "ids", "norm", "postings", "masks", "complete")

    def __init__(self, state: tuple[Any, Any], nrow: int, ids: np.ndarray, norm: np.ndarray) -> None:
        self.state = state
        self.nrow = nrow
        self.ids = ids  # rowids of the index, ascending
        self.norm = norm  # per row: k1 * (1 - b + b * D / avgdl), as FTS5 computes it
        # token -> (positions in ids of the rows holding it, ascending; its bm25 term in each of them)
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.masks: list[tuple[frozenset[int], np.ndarray | None]] = []  # (scope set, rows inside it; None: all)
        self.complete = False  # every token of the index is in ``postings`` (a token missing there is in no row)


def _entry(snap: _Snapshot, rows_at: np.ndarray, fs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A token's postings as held: the positions of the rows holding it and its bm25 term in each, from its
    column-weighted frequency ``fs`` in each (``hits``: the rows of the whole index holding it, in any scope)."""
    hits = len(rows_at)
    idf = math.log((snap.nrow - hits + 0.5) / (hits + 0.5))
    if idf <= 0.0:
        idf = 1e-6
    return rows_at, idf * ((fs * (K1 + 1.0)) / (fs + snap.norm[rows_at]))


class LexIndex:
    """One store's in-process postings; thread-safe (a lock around every change, snapshots read whole)."""

    def __init__(self, stamps: Stamps) -> None:
        self._stamps = stamps
        self._lock = threading.Lock()
        self._snap: _Snapshot | None = None
        self._pending: tuple[Any, Any] | None = None  # a state seen once, not yet held
        self._seen: set[str] = set()  # tokens searches asked for in ``_seen_state``
        self._seen_state: tuple[Any, Any] | None = None
        self._words: dict[str, tuple[str, ...]] = {}
        self._stemmer: bool | None = None  # memlens.store.speed.porter agrees with this store's tokenizer (None: not checked)
        self.served = 0  # searches answered here (the rest ran FTS5's SQL)

    def search(self, conn: Any, terms: list[str], allowed: frozenset[int] | None, n: int) -> list[tuple[int, float]] | None:
        """The ``n`` best rows for the OR of ``terms`` (each a quoted FTS5 phrase), inside ``allowed`` (None:
        every row), as (rowid, bm25 negated); None when this index cannot answer exactly."""
        if conn.in_transaction or not terms:
            return None
        try:
            return self._search(conn, terms, allowed, n)
        except (db.driver().Error, _Inexact, KeyError, ValueError):  # any doubt (a damaged index): FTS5's SQL answers
            return None

    def _search(self, conn: Any, terms: list[str], allowed: frozenset[int] | None, n: int) -> list[tuple[int, float]] | None:
        tokens = self._tokens(conn, terms)
        if tokens is None:
            return None
        snap = self._snap
        blocks = self.state_records(conn)
        state = (blocks.get(1), blocks.get(10))
        if snap is not None and snap.state == state and snap.complete:  # every token held: nothing to read
            return self._rank(snap, [t for t in tokens if t in snap.postings], allowed, n)
        held = snap.postings if snap is not None and snap.state == state else {}
        missing = [t for t in dict.fromkeys(tokens) if t not in held]
        with self._lock:  # which tokens searches in this state have asked for before
            if self._seen_state != state or len(self._seen) + len(missing) > TERMS_KEPT:
                self._seen, self._seen_state = set(), state
            new = [t for t in missing if t not in self._seen]
            self._seen.update(missing)
        if snap is None or snap.state != state:
            with self._lock:
                first, self._pending = self._pending != state, state
            if first:  # the first search in a new state: FTS5's SQL answers (a store written between searches
                return None  # never pays for reading sizes and postings it would use once)
        if new:  # a token asked for the first time in this state: FTS5's SQL answers, and its postings are read
            return None  # the next time (a word asked once costs what it always did; reading it costs more)
        if snap is None or snap.state != state or missing:
            conn.execute("BEGIN")  # one read snapshot for the state, the sizes and the postings
            try:
                snap = self._snapshot(conn)
                for t in tokens:
                    self._postings(conn, snap, t)
            finally:
                conn.execute("COMMIT")
        return self._rank(snap, tokens, allowed, n)

    def _rank(self, snap: _Snapshot, tokens: list[str], allowed: frozenset[int] | None, n: int) -> list[tuple[int, float]]:
        if snap.nrow <= 0 or n <= 0:
            return []
        # Phrase after phrase, in the query's order: a row a phrase misses gains idf * 0 / (...) = +0.0 in
        # FTS5, which leaves its sum as it was, so adding the contributions of the rows holding it is the same sum.
        # bincount adds its weights in input order, so each row's sum is made in that order too, from 0.0.
        found = [snap.postings[t] for t in tokens]
        if found:
            score = np.bincount(np.concatenate([rows for rows, _ in found]), np.concatenate([c for _, c in found]),
                                len(snap.ids))
        else:
            score = np.zeros(len(snap.ids), np.float64)
        hit = score > 0.0  # every contribution is > 0 (idf >= 1e-6, f >= 1): a row scores iff a phrase matches
        if allowed is not None:
            mask = self._mask(snap, allowed)
            if mask is not None:
                hit &= mask
        cand = np.flatnonzero(hit)
        s = score[cand]
        if len(cand) > 4 * n:  # many: keep the n best and every row tied with the n-th, then sort those
            kth = np.partition(-s, n - 1)[n - 1]
            keep = -s <= kth
            cand, s = cand[keep], s[keep]
        order = np.lexsort((cand, -s))[:n]  # positions ascend with rowids: ties by rowid
        with self._lock:
            self.served += 1
        return list(zip(snap.ids[cand[order]].tolist(), s[order].tolist(), strict=True))

    def load_all(self, conn: Any, max_instances: int) -> int:
        """Read the postings of every token now, when the index holds at most ``max_instances`` token
        instances (a long-lived process warming up: its first questions are then ranked here too). Returns
        the tokens held, 0 when the index is larger, or this connection cannot (a transaction, read-only)."""
        if conn.in_transaction:
            return 0
        try:
            conn.execute("BEGIN")
            try:
                total = self._vocab(conn, f"SELECT coalesce(sum(cnt), 0) FROM temp.{_VOCAB_ROWS}")[0][0]
                if total > max_instances:
                    return 0
                snap = self._snapshot(conn)
                rows = [(_term(t), d, c, n) for t, d, c, n in self._vocab(
                    conn, f"SELECT CAST(term AS BLOB), doc, col, count(*) FROM temp.{_VOCAB} GROUP BY term, doc, col")]
            finally:
                conn.execute("COMMIT")
            postings = self._all_postings(snap, rows)
        except (db.driver().Error, _Inexact, KeyError, ValueError):
            return 0
        with self._lock:  # the snapshot held now, if of the same state (a search on another thread may have
            cur = self._snap  # built its own meanwhile: same rows, same positions), gets every posting
            if cur is None or cur.state != snap.state:
                return 0  # the index changed while it was read: searches read it word by word
            cur.postings, cur.complete = postings, True
        return len(postings)

    def _all_postings(self, snap: _Snapshot, rows: list[Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Every token's entry from (term, doc, col, instances) rows sorted by term, doc: the entries
        ``_postings`` makes one token at a time (column-weighted frequencies are sums of small integers,
        exact in any order)."""
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if not rows:
            return out
        terms = [r[0] for r in rows]
        docs = np.fromiter((r[1] for r in rows), np.int64, len(rows))
        weights = np.fromiter((WEIGHTS[r[2]] * r[3] for r in rows), np.float64, len(rows))
        # one (term, doc) per run of equal pairs: the two columns of a row are added together
        cut = np.ones(len(rows), bool)
        cut[1:] = (docs[1:] != docs[:-1]) | np.fromiter((a != b for a, b in zip(terms[1:], terms[:-1], strict=True)),
                                                        bool, len(rows) - 1)
        starts = np.flatnonzero(cut)
        f = np.add.reduceat(weights, starts)
        docs, pair_terms = docs[starts], [terms[i] for i in starts.tolist()]
        at = np.searchsorted(snap.ids, docs)
        if len(docs) and (at.max() >= len(snap.ids) or not np.array_equal(snap.ids[at], docs)):
            raise _Inexact("a posting without a size row")
        bounds = [0, *(i for i in range(1, len(pair_terms)) if pair_terms[i] != pair_terms[i - 1]), len(pair_terms)]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            out[pair_terms[a]] = _entry(snap, at[a:b], f[a:b])
        return out

    # --- the data, per state of the text index

    def state_records(self, conn: Any) -> dict[int, bytes]:
        """FTS5's "averages" record (id 1) and structure record (id 10): rewritten by every change to the index.
        Kept under the connection's stamp (``memlens.store.speed.stamps``): inside a ``settled()`` block, read
        again only when another connection committed or this one wrote; elsewhere read every time."""
        return self._stamps.kept(conn, "fts_state", _read_state_records)

    def _snapshot(self, conn: Any) -> _Snapshot:
        blocks = self.state_records(conn)
        state = (blocks.get(1), blocks.get(10))
        snap = self._snap
        if snap is not None and snap.state == state:
            return snap
        avg = varints(blocks[1]) if blocks.get(1) else [0]
        nrow, total = avg[0], sum(avg[1:])
        rows = conn.execute("SELECT id, sz FROM entries_fts_docsize ORDER BY id").fetchall()
        ids = np.fromiter((r for r, _ in rows), np.int64, len(rows))
        sizes = np.fromiter((sum(varints(sz)) if sz else 0 for _, sz in rows), np.float64, len(rows))
        avgdl = float(total) / float(nrow) if nrow else 1.0
        norm = K1 * ((1 - B) + (B * sizes) / avgdl)
        snap = _Snapshot(state, nrow, ids, norm)
        with self._lock:
            self._snap = snap
        return snap

    def _postings(self, conn: Any, snap: _Snapshot, token: str) -> tuple[np.ndarray, np.ndarray]:
        hit = snap.postings.get(token)
        if hit is not None:
            return hit
        rows = self._vocab(conn, f"SELECT doc, col, count(*) FROM temp.{_VOCAB} WHERE term = ? GROUP BY doc, col", token)
        freq: dict[int, float] = {}
        for doc, col, count in rows:
            w = WEIGHTS[col]
            f = freq.get(doc, 0.0)
            for _ in range(count):  # FTS5 adds the column's weight once per instance
                f += w
            freq[doc] = f
        docs = np.fromiter(freq, np.int64, len(freq))
        at = np.searchsorted(snap.ids, docs)
        if len(docs) and (at.max() >= len(snap.ids) or not np.array_equal(snap.ids[at], docs)):
            raise _Inexact("a posting without a size row")
        order = np.argsort(at, kind="stable")
        rows_at = at[order].astype(np.int64)
        fs = np.fromiter(freq.values(), np.float64, len(freq))[order]
        entry = _entry(snap, rows_at, fs)
        with self._lock:
            if len(snap.postings) >= TERMS_KEPT:
                snap.postings.clear()
            snap.postings[token] = entry
        return entry

    def _mask(self, snap: _Snapshot, allowed: frozenset[int]) -> np.ndarray | None:
        """Which rows of the index are in ``allowed`` (None: all of them)."""
        for held, kept in snap.masks:
            if held is allowed:
                return kept
        want = np.fromiter(allowed, np.int64, len(allowed))
        at = np.searchsorted(snap.ids, want)
        ok = at < len(snap.ids)
        ok[ok] = snap.ids[at[ok]] == want[ok]
        inside = np.zeros(len(snap.ids), bool)
        inside[at[ok]] = True
        mask = None if inside.all() else inside
        with self._lock:
            snap.masks = [(allowed, mask), *snap.masks[:3]]
        return mask

    # --- SQLite's own tokenizer, through temp tables on this connection

    def _words_tokens(self, conn: Any, terms: list[str]) -> dict[str, tuple[str, ...]]:
        """The tokens of each term (SQLite's tokenizer), remembered."""
        words = self._words
        unknown = [t for t in dict.fromkeys(terms) if t not in words]
        if unknown:
            found: dict[str, tuple[str, ...]] = {}
            if self._stems(conn):
                for w in unknown:
                    token = stem(w)
                    if token is not None:
                        found[w] = (token,)
            rest = [w for w in unknown if w not in found]
            if rest:
                found.update(self._tokenize(conn, rest))
            with self._lock:
                if len(self._words) + len(found) > WORDS_KEPT:
                    self._words = {}
                self._words.update(found)
                words = {**self._words, **found}
        return words

    def _tokens(self, conn: Any, terms: list[str]) -> list[str] | None:
        """Each term's single token; None when a term is not exactly one token (a phrase in FTS5)."""
        words = self._words_tokens(conn, terms)
        out = []
        for t in terms:
            toks = words[t]
            if len(toks) != 1:
                return None
            out.append(toks[0])
        return out

    def _stems(self, conn: Any) -> bool:
        """Whether ``memlens.store.speed.porter`` makes this store's tokens: the index's tokenizer is ``porter unicode61``
        (or ``porter``, which wraps it) and the port gives what SQLite gives on ``PROBE`` (checked once)."""
        if self._stemmer is None:
            spec = _tokenizer(conn)
            ok = spec is not None and spec.split() in (["porter", "unicode61"], ["porter"])
            if ok:
                sql = self._tokenize(conn, list(PROBE))
                ok = all(sql[w] == (stem(w),) for w in PROBE)
            self._stemmer = ok
        return self._stemmer

    def _tokenize(self, conn: Any, words: list[str]) -> dict[str, tuple[str, ...]]:
        self._ensure(conn)
        conn.execute(f"DELETE FROM temp.{_TOK}")
        try:
            conn.executemany(f"INSERT INTO temp.{_TOK}(rowid, w) VALUES (?, ?)", list(enumerate(words, 1)))
            got: dict[int, list[tuple[int, str]]] = {}
            for doc, off, term in conn.execute(f"SELECT doc, offset, CAST(term AS BLOB) FROM temp.{_TOKV}"):
                got.setdefault(doc, []).append((off, _term(term)))
        finally:
            conn.execute(f"DELETE FROM temp.{_TOK}")
        return {w: tuple(t for _, t in sorted(got.get(i, []))) for i, w in enumerate(words, 1)}

    def _vocab(self, conn: Any, sql: str, *args: Any) -> list[Any]:
        try:
            return list(conn.execute(sql, args).fetchall())
        except Exception as exc:  # the temp tables are per connection: made on first use
            if "no such table" not in str(exc):
                raise
        self._ensure(conn)
        return list(conn.execute(sql, args).fetchall())

    @staticmethod
    def _ensure(conn: Any) -> None:
        spec = _tokenizer(conn)
        if spec is None:
            raise _Inexact("entries_fts tokenizer unknown")
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCAB} USING fts5vocab(main, entries_fts, instance)")
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCAB_ROWS} USING fts5vocab(main, entries_fts, row)")
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_TOK} USING fts5(w, tokenize='{spec}')")
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_TOKV} USING fts5vocab(temp, {_TOK}, instance)")


def _term(raw: bytes) -> str:
    """A token as FTS5 stores it, read as bytes: FTS5 cuts a token at 32 KiB, inside a character when it must (a run of
    10,923 CJK characters), and the bytes of that character left are dropped here (as text the row would not decode,
    and the store would be taken for damaged)."""
    return bytes(raw).decode("utf-8", "ignore")


__all__ = ["WARM_INSTANCES", "LexIndex"]
