"""Which words of a free-text query the lexical generator looks for: every distinct one, up to a cap.

Every term of the question is searched, function words included: questions and
their answers are worded differently, and words like "why", "how", "between",
"each" or "other" often carry what the question asks. Leaving English function
words out of the text search, and then the words found in more than a tenth of
a large store's entries, cost MRR@10 .729 → .701 (R@1 .627 → .580) on 169 FAQ
questions over 2.7k documentation sections, for a faster lexical stage; the
speed is found where the ranking is untouched instead (``memlens.store.speed.lexindex``).

Only the first ``MAX_QUERY_TERMS`` distinct terms are used: an OR-query costs time
in proportion to its terms, and the trace notes the cut. The vector generator
always embeds the query as written.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlens.limits import MAX_QUERY_TERMS
from memlens.store.scope import query_terms


@dataclass(frozen=True)
class LexicalTerms:
    """The terms the lexical search uses, and how many distinct terms the query had."""

    terms: list[str]
    distinct: int = 0

    @property
    def text(self) -> str:
        """The terms as free text: what ``Reads.lexical`` is given (it builds the backend's own query)."""
        return " ".join(self.terms)

    @property
    def cut(self) -> bool:
        """More distinct terms than the cap: only the first ``MAX_QUERY_TERMS`` were used."""
        return self.distinct > MAX_QUERY_TERMS


def lexical_terms(text: str) -> LexicalTerms:
    """The distinct terms of ``text``, at most ``MAX_QUERY_TERMS``, in order of appearance."""
    terms = query_terms(text)
    return LexicalTerms(terms[:MAX_QUERY_TERMS], len(terms))
