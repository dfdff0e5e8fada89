"""Chunks sized with the model's own tokenizer.

all-MiniLM-L6-v2 reads the first 256 word pieces of a text (its [CLS] and [SEP]
included) and ignores the rest, so a chunk longer than that would be stored
whole but found only by its beginning. Every chunk here is packed so that its
title line plus its text fit in the model's window.

Counting is additive: the model's tokenizer splits on whitespace before it
splits into word pieces, so a text's count is the sum of its whitespace-separated
words' counts. Each distinct word is counted once (``TokenCounter`` keeps a
bounded cache), which makes counting a whole corpus cheap.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

CHUNKER_VERSION = 1
SPECIAL_TOKENS = 2  # [CLS] and [SEP]
_WORD_CACHE_MAX = 20_000  # distinct words remembered (~4 MB); cleared when full, so memory stays flat
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+")
_PARA = re.compile(r"\n\s*\n")


class TokenCounter:
    """Counts word pieces with the embedder's ``count_tokens``, one call per distinct word."""

    def __init__(self, count: Callable[[str], int], max_tokens: int) -> None:
        self._count = count
        self.max_tokens = max_tokens
        self._cache: dict[str, int] = {}

    def word(self, w: str) -> int:
        n = self._cache.get(w)
        if n is None:
            n = self._count(w) if len(w) < 200 else self._count(w[:200]) + len(w) // 4
            if len(self._cache) >= _WORD_CACHE_MAX:
                self._cache.clear()
            self._cache[w] = n
        return n

    def __call__(self, text: str) -> int:
        return sum(self.word(w) for w in text.split())


def counter_for(embedder: Any) -> TokenCounter:
    max_tokens = getattr(getattr(embedder, "spec", None), "max_tokens", None) or 256
    return TokenCounter(embedder.count_tokens, int(max_tokens))


@dataclass
class Chunk:
    """One piece of a source, ready to become an entry."""

    title: str
    text: str
    position: dict[str, Any] = field(default_factory=dict)


def text_budget(count: TokenCounter, title: str) -> int:
    """Tokens left for the text once the title and the special tokens are counted (at least 32)."""
    return max(32, count.max_tokens - SPECIAL_TOKENS - count(title))


def _split_words(text: str, budget: int, count: TokenCounter) -> Iterator[str]:
    words: list[str] = []
    used = 0
    for w in text.split():
        n = count.word(w)
        if n > budget:  # one enormous "word" (a URL, a base64 blob): cut it by characters
            if words:
                yield " ".join(words)
                words, used = [], 0
            step = max(8, len(w) * budget // max(n, 1) - 1)
            for i in range(0, len(w), step):
                yield w[i : i + step]
            continue
        if used + n > budget and words:
            yield " ".join(words)
            words, used = [], 0
        words.append(w)
        used += n
    if words:
        yield " ".join(words)


def _units(text: str, budget: int, count: TokenCounter) -> Iterator[tuple[str, int]]:
    """Paragraphs, or sentences of a paragraph too long, or words of a sentence too long: each within ``budget``."""
    for para in _PARA.split(text):
        para = para.strip()
        if not para:
            continue
        n = count(para)
        if n <= budget:
            yield para, n
            continue
        for sent in _SENTENCE.split(para):
            sn = count(sent)
            if sn <= budget:
                yield sent, sn
            else:
                for piece in _split_words(sent, budget, count):
                    yield piece, count(piece)


def line_windows(lines: list[str], first_line: int, title_for: Callable[[int, int], str], count: TokenCounter,
                 max_lines: int = 80) -> list[Chunk]:
    """Consecutive lines packed into chunks that fit the model (and at most ``max_lines`` lines each).

    ``first_line`` is the 1-based number of ``lines[0]``; each chunk's position is its line range, and its text is
    exactly those lines (what the retrieval gate compares with the file later). A single line longer than the
    window (minified code, a data literal) is cut into pieces that fit, each with its line and its character
    range in that line (``cols``, end excluded), so no part of it is left unread.
    """
    out: list[Chunk] = []
    budget = text_budget(count, title_for(first_line, first_line + len(lines)))
    start, used = 0, 0
    for i, line in enumerate(lines):
        n = count(line)
        if n > budget:
            if i > start:
                out.append(_window(lines, start, i, first_line, title_for))
            no = first_line + i
            out += [Chunk(title_for(no, no), line[a:b], {"lines": [no, no], "cols": [a, b]})
                    for a, b in cut_line(line, budget, count)]
            start, used = i + 1, 0
            continue
        if i > start and (used + n > budget or i - start >= max_lines):
            out.append(_window(lines, start, i, first_line, title_for))
            start, used = i, 0
        used += n
    if start < len(lines):
        out.append(_window(lines, start, len(lines), first_line, title_for))
    return [c for c in out if c.text.strip()]


def cut_line(line: str, budget: int, count: TokenCounter) -> list[tuple[int, int]]:
    """Character ranges ``(start, end)`` that cut ``line`` into consecutive pieces of at most ``budget`` tokens.

    Cuts fall before a word where they can; a word longer than the budget (a base64 blob) is cut by characters.
    The pieces cover the line exactly, so each is a verbatim slice of it.
    """
    out: list[tuple[int, int]] = []
    start, used = 0, 0
    for m in re.finditer(r"\S+", line):
        n = count.word(m.group())
        if n > budget:
            if used:
                out.append((start, m.start()))
                start = m.start()
            step = max(8, len(m.group()) * budget // max(n, 1) - 1)
            while m.end() - start > step:
                out.append((start, start + step))
                start += step
            used = count.word(line[start : m.end()])
            continue
        if used and used + n > budget:
            out.append((start, m.start()))
            start, used = m.start(), 0
        used += n
    if start < len(line):
        out.append((start, len(line)))
    return out


def _window(lines: list[str], a: int, b: int, first_line: int, title_for: Callable[[int, int], str]) -> Chunk:
    lo, hi = first_line + a, first_line + b - 1
    return Chunk(title_for(lo, hi), "\n".join(lines[a:b]), {"lines": [lo, hi]})


def pack_blocks(blocks: list[tuple[str, int, int]], budget: int, count: TokenCounter) -> list[tuple[str, int, int]]:
    """Like ``pack`` over blocks that carry their line range ``(text, first, last)``: pieces keep the range they span."""
    out: list[tuple[str, int, int]] = []
    cur: list[str] = []
    lo = hi = 0
    used = 0
    for text, a, b in blocks:
        for unit, n in _units(text, budget, count):
            if cur and used + n > budget:
                out.append(("\n\n".join(cur), lo, hi))
                cur, used = [], 0
            if not cur:
                lo = a
            cur.append(unit)
            used += n
            hi = b
    if cur:
        out.append(("\n\n".join(cur), lo, hi))
    return out


def blocks_of(lines: list[str], first_line: int = 1) -> list[tuple[str, int, int]]:
    """Paragraphs (runs of non-blank lines) with their 1-based line ranges."""
    out: list[tuple[str, int, int]] = []
    start = None
    for i, line in enumerate(lines):
        if line.strip():
            if start is None:
                start = i
        elif start is not None:
            out.append(("\n".join(lines[start:i]), first_line + start, first_line + i - 1))
            start = None
    if start is not None:
        out.append(("\n".join(lines[start:]), first_line + start, first_line + len(lines) - 1))
    return out
