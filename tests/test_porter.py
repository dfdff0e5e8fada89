"""memlens.store.speed.porter against SQLite's own ``porter unicode61`` tokenizer, and its use by the lexical index.

The reference is SQLite itself: words are inserted into an in-memory FTS5 table with that tokenizer and read
back through fts5vocab, so every expectation here is what the running SQLite makes of the word.
"""

from __future__ import annotations

import random
import re
import sysconfig
from pathlib import Path

import pytest

from memlens.store import db
from memlens.store.speed import lexindex
from memlens.store.speed.lexindex import PROBE, LexIndex
from memlens.store.speed.porter import stem
from memlens.store.speed.stamps import Stamps

NODE_DOCS = Path("/usr/share/doc/nodejs/api")


def sqlite_tokens(words: list[str]) -> dict[str, tuple[str, ...]]:
    conn = db.driver().connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(w, tokenize='porter unicode61')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    conn.executemany("INSERT INTO t(rowid, w) VALUES (?, ?)", list(enumerate(words, 1)))
    got: dict[int, list[tuple[int, str]]] = {}
    for doc, off, term in conn.execute("SELECT doc, offset, term FROM v"):
        got.setdefault(doc, []).append((off, term))
    conn.close()
    return {w: tuple(t for _, t in sorted(got.get(i, []))) for i, w in enumerate(words, 1)}


def compare(words: list[str]) -> tuple[list[tuple[str, str, tuple[str, ...]]], int]:
    """The words where the port and SQLite differ, and how many the port left to SQLite."""
    want = sqlite_tokens(words)
    diff, unsure = [], 0
    for w in words:
        got = stem(w)
        if got is None:
            unsure += 1
        elif (got,) != want[w]:
            diff.append((w, got, want[w]))
    return diff, unsure


def real_words() -> list[str]:
    """Every ASCII word of the Python standard library's modules and packages (not its tests) and of the Node.js
    docs when installed: about 28k words, 45k with the docs."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for f in [*root.glob("*.py"), *root.glob("*/*.py")]
                   if f.parts[len(root.parts)] not in ("site-packages", "test", "idlelib"))
    files += sorted(NODE_DOCS.glob("*.md")) if NODE_DOCS.is_dir() else []
    words: set[str] = set()
    for f in files:
        try:
            words.update(re.findall(r"[a-z0-9]+", f.read_text(encoding="utf-8", errors="ignore").lower()))
        except OSError:
            continue
    return sorted(words)


def test_the_port_stems_every_word_of_real_text_as_sqlite_does():
    words = real_words()
    assert len(words) > 20_000
    diff, unsure = compare(words)
    assert diff == []
    assert unsure < 10  # the port hands back only the rare stems SQLite's C code cannot handle either


def test_the_port_matches_sqlite_on_words_built_to_take_every_rule():
    rng = random.Random(7)
    letters = "aeiouybcdlnstzgxwrm1"
    suffixes = """
        ational tional enci anci izer logi bli alli entli eli ousli ization ation ator alism iveness fulness ousness
        aliti iviti biliti ical ness icate iciti ful ative alize al ance ence er ic able ible ant ement ment ent ion ou
        ism ate iti ous ive ize eed ed ing ies sses ss s y e ll at bl iz""".split()
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(1, 9))) for _ in range(40_000)}
    words |= {"".join(rng.choice(letters) for _ in range(rng.randint(0, 5))) + rng.choice(suffixes)
              + (rng.choice(suffixes) if rng.random() < 0.3 else "") for _ in range(40_000)}
    words |= {"x" * 62 + "ing", "x" * 61 + "ing", "b" * 80}  # either side of the 64-byte bound
    diff, unsure = compare(sorted(words))
    assert diff == []
    assert unsure < len(words) / 1000


def test_words_the_port_leaves_to_sqlite():
    assert stem("oing") is None and stem("aed") is None  # a one-letter stem: the C code reads before its buffer
    for word in ("café", "read_file", "Buffer", "utf-8", ""):
        assert stem(word) is None  # not one lower-case ASCII token
    assert stem("is") == "is" and stem("x" * 70 + "ing") == "x" * 70 + "ing"  # too short or too long to stem
    assert stem("encodings") == "encod" and stem("readable") == "readabl"


@pytest.fixture
def conn(tmp_path):
    from memlens import Memory
    from memlens.embed import HashEmbedder

    with Memory.open(tmp_path / "m.db", embedder=HashEmbedder()) as mem:
        mem.add("Buffers hold bytes; a string is decoded with an encoding.", title="Buffers", wing="w")
        yield mem.conn


def test_the_lexical_index_stems_ascii_words_itself_once_the_port_is_checked(conn, monkeypatch):
    calls: list[list[str]] = []
    real = LexIndex._tokenize
    monkeypatch.setattr(LexIndex, "_tokenize", lambda self, c, words: calls.append(list(words)) or real(self, c, words))
    lex = LexIndex(Stamps())
    words = ["encodings", "buffers", "decoded", "café", "read_file"]
    got = lex._words_tokens(conn, words)
    assert calls == [list(PROBE), ["café", "read_file"]]  # the check once; then only what the port cannot do
    assert got == {w: t for w, t in sqlite_tokens(words).items()}
    lex._words_tokens(conn, ["relational", "hopefulness"])
    assert len(calls) == 2


def test_a_port_that_disagrees_with_sqlite_is_not_used(conn, monkeypatch):
    monkeypatch.setattr(lexindex, "stem", lambda w: w)  # a "stemmer" that stems nothing
    calls: list[list[str]] = []
    real = LexIndex._tokenize
    monkeypatch.setattr(LexIndex, "_tokenize", lambda self, c, words: calls.append(list(words)) or real(self, c, words))
    lex = LexIndex(Stamps())
    got = lex._words_tokens(conn, ["encodings", "buffers"])
    assert got == {"encodings": ("encod",), "buffers": ("buffer",)}
    assert calls == [list(PROBE), ["encodings", "buffers"]]
    assert lex._stemmer is False


def test_a_store_with_another_tokenizer_is_tokenized_by_sqlite(tmp_path):
    conn = db.driver().connect(str(tmp_path / "x.db"))
    conn.execute("CREATE VIRTUAL TABLE entries_fts USING fts5(title, text, tokenize='unicode61')")
    lex = LexIndex(Stamps())
    assert lex._words_tokens(conn, ["encodings"]) == {"encodings": ("encodings",)}
    assert lex._stemmer is False
    conn.close()
