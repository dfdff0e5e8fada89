"""Which words of a free-text query the lexical generator looks for.

A question asked in plain language ("how do I read a file one line at a
time?") is mostly common words. Each term of an FTS5 OR-query makes SQLite
walk that term's whole posting list and score every row it lists: "how",
"do", "a", "the" are in most documentation sections, so they cost the most
and rank nothing (BM25 gives them almost no weight). The lexical stage leaves
them out, says which in the trace, and keeps at most ``MAX_QUERY_TERMS`` of
the rest. A query made only of such words keeps them (bounded by the same cap):
the text search then still has something to look for.

In a store of at least ``COMMON_MIN_ENTRIES`` entries, a term found in more than
``COMMON_SHARE`` of them is left out too (``drop_common``): BM25 weighs it
little (its idf is under ln 9 where a rare term's is 5 to 7) and it is the most
expensive to rank by, since every entry holding it is scored. If every term is
that common, all are kept.

The vector generator always embeds the query as written; only the lexical
search is affected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from memlens.limits import MAX_QUERY_TERMS
from memlens.store.scope import query_terms

COMMON_SHARE = 0.1  # a term in more than this share of the entries is left out (measured: tests/bench/pipeline_cost.py)
COMMON_MIN_ENTRIES = 1000  # below this, every entry is cheap to rank: nothing is left out for being common

# English function words: articles, pronouns, auxiliaries, prepositions, conjunctions, question words.
# No content word is here (not "use", "file", "error", "new", "not"...): a word that can
# carry a question's meaning is looked for.
STOP_WORDS = frozenset("""
a about above after again all also am an and any are as at be because been before being below between both but by
can could did do does doing done during each few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just me might more most my myself nor of off on once only or other our
ours ourselves out over own same shall she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which while who whom whose why
will with would you your yours yourself yourselves
""".split())


@dataclass(frozen=True)
class LexicalTerms:
    """The terms the lexical search uses, the common words left out, and how many distinct terms the query had."""

    terms: list[str]
    dropped: list[str] = field(default_factory=list)
    distinct: int = 0
    common: list[str] = field(default_factory=list)  # content terms left out for being in too many entries

    @property
    def text(self) -> str:
        """The kept terms as free text: what ``Reads.lexical`` is given (it builds the backend's own query)."""
        return " ".join(self.terms)

    @property
    def cut(self) -> bool:
        """More content terms than the cap: only the first ``MAX_QUERY_TERMS`` were used."""
        return self.distinct - len(self.dropped) > MAX_QUERY_TERMS


def drop_common(sel: LexicalTerms, term_counts: Callable[[list[str]], tuple[int, dict[str, int]]]) -> LexicalTerms:
    """``sel`` less the terms found in more than ``COMMON_SHARE`` of the entries (``Reads.term_counts``)."""
    if len(sel.terms) < 2 or all(t in STOP_WORDS for t in sel.terms):  # one term, or only stop words: kept
        return sel
    total, counts = term_counts(sel.terms)
    if total < COMMON_MIN_ENTRIES:
        return sel
    common = [t for t in sel.terms if counts.get(t, 0) > COMMON_SHARE * total]
    if not common or len(common) == len(sel.terms):
        return sel
    return replace(sel, terms=[t for t in sel.terms if t not in common], common=common)


def lexical_terms(text: str) -> LexicalTerms:
    """The distinct terms of ``text`` minus stop words, at most ``MAX_QUERY_TERMS``, in order of appearance."""
    terms = query_terms(text)
    content = [t for t in terms if t not in STOP_WORDS]
    if not content:  # only common words: look for them rather than for nothing
        return LexicalTerms(terms[:MAX_QUERY_TERMS], [], len(terms))
    dropped = [t for t in terms if t in STOP_WORDS]
    return LexicalTerms(content[:MAX_QUERY_TERMS], dropped, len(terms))
