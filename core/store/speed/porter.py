"""FTS5's ``porter`` tokenizer over ``unicode61``, in Python, for plain ASCII words.

Turning a query's new words into index tokens through SQLite (a temp FTS5 table:
insert, read back, delete) cost ~0.35 ms a search with any word not seen before.
For a word of ASCII letters and digits, unicode61 yields the word itself, lower-cased,
as one token; ``porter`` then stems it. This module follows SQLite's stemmer
(``fts5PorterCb`` in ext/fts5/fts5_tokenize.c) step for step, on the same byte
positions.

``stem`` returns None where the C code would read before the start of its buffer
(stems cut to one letter, as in "oing"): such a word, and any word with another
character, is left for SQLite to tokenize. ``memlens.store.speed.lexindex`` compares this
module with the running SQLite on a probe vocabulary before trusting it, and
tests/test_porter.py compares them on every word of the Python standard library's modules
and of the Node.js docs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Rules = dict[str, list[tuple[str, Callable[[str, int], bool], str]]]

MAX_TOKEN = 64  # FTS5_PORTER_MAX_TOKEN: longer tokens (and shorter than 3) pass through unstemmed
ASCII_WORD = re.compile(r"[a-z0-9]+")


class _Unsure(Exception):
    """The C code would read outside its buffer here: let SQLite answer."""


def _vowel(c: str, y_is_vowel: bool) -> bool:
    return c in "aeiou" or (y_is_vowel and c == "y")


def _gobble_vc(s: str, start: int, n: int, prev_cons: bool) -> int:
    """``fts5PorterGobbleVC`` on ``s[start:n]``: the position (relative to ``start``) after the first VC, or 0."""
    cons = prev_cons
    i = start
    while i < n:
        cons = not _vowel(s[i], cons)
        if not cons:
            break
        i += 1
    i += 1
    while i < n:
        cons = not _vowel(s[i], cons)
        if cons:
            return i - start + 1
        i += 1
    return 0


def _m_gt0(s: str, n: int) -> bool:
    return _gobble_vc(s, 0, n, False) != 0


def _m_gt1(s: str, n: int) -> bool:
    k = _gobble_vc(s, 0, n, False)
    return bool(k) and _gobble_vc(s, k, n, True) != 0


def _m_eq1(s: str, n: int) -> bool:
    k = _gobble_vc(s, 0, n, False)
    return bool(k) and _gobble_vc(s, k, n, True) == 0


def _ostar(s: str, n: int) -> bool:
    if s[n - 1] in "wxy":
        return False
    mask, cons = 0, False
    for i in range(n):
        cons = not _vowel(s[i], cons)
        mask = (mask << 1) + cons
    return (mask & 7) == 5


def _m_gt1_s_or_t(s: str, n: int) -> bool:
    return s[n - 1] in "st" and _m_gt1(s, n)


def _has_vowel(s: str, n: int) -> bool:
    return any(_vowel(s[i], i > 0) for i in range(n))


# (suffix, condition, replacement) per step, grouped by the suffix's second-to-last letter as the C code's
# switch is: within a group the first suffix that matches decides, whether or not its condition holds.
_STEP2: Rules = {
    "a": [("ational", _m_gt0, "ate"), ("tional", _m_gt0, "tion")],
    "c": [("enci", _m_gt0, "ence"), ("anci", _m_gt0, "ance")],
    "e": [("izer", _m_gt0, "ize")],
    "g": [("logi", _m_gt0, "log")],
    "l": [("bli", _m_gt0, "ble"), ("alli", _m_gt0, "al"), ("entli", _m_gt0, "ent"), ("eli", _m_gt0, "e"),
          ("ousli", _m_gt0, "ous")],
    "o": [("ization", _m_gt0, "ize"), ("ation", _m_gt0, "ate"), ("ator", _m_gt0, "ate")],
    "s": [("alism", _m_gt0, "al"), ("iveness", _m_gt0, "ive"), ("fulness", _m_gt0, "ful"), ("ousness", _m_gt0, "ous")],
    "t": [("aliti", _m_gt0, "al"), ("iviti", _m_gt0, "ive"), ("biliti", _m_gt0, "ble")],
}
_STEP3: Rules = {
    "a": [("ical", _m_gt0, "ic")],
    "s": [("ness", _m_gt0, "")],
    "t": [("icate", _m_gt0, "ic"), ("iciti", _m_gt0, "ic")],
    "u": [("ful", _m_gt0, "")],
    "v": [("ative", _m_gt0, "")],
    "z": [("alize", _m_gt0, "al")],
}
_STEP4: Rules = {
    "a": [("al", _m_gt1, "")],
    "c": [("ance", _m_gt1, ""), ("ence", _m_gt1, "")],
    "e": [("er", _m_gt1, "")],
    "i": [("ic", _m_gt1, "")],
    "l": [("able", _m_gt1, ""), ("ible", _m_gt1, "")],
    "n": [("ant", _m_gt1, ""), ("ement", _m_gt1, ""), ("ment", _m_gt1, ""), ("ent", _m_gt1, "")],
    "o": [("ion", _m_gt1_s_or_t, ""), ("ou", _m_gt1, "")],
    "s": [("ism", _m_gt1, "")],
    "t": [("ate", _m_gt1, ""), ("iti", _m_gt1, "")],
    "u": [("ous", _m_gt1, "")],
    "v": [("ive", _m_gt1, "")],
    "z": [("ize", _m_gt1, "")],
}


def _second_last(s: str) -> str:
    if len(s) < 2:
        raise _Unsure
    return s[-2]


def _apply(s: str, table: Rules) -> str:
    for suffix, cond, out in table.get(_second_last(s), ()):
        # the C code tests nBuf > len(suffix): the suffix alone, with no stem before it, never matches
        if len(s) > len(suffix) and s.endswith(suffix):
            stem = len(s) - len(suffix)
            return s[:stem] + out if cond(s, stem) else s
    return s


def _step1a(s: str) -> str:
    n = len(s)
    if s[n - 1] == "s":
        if s[n - 2] == "e":
            if (n > 4 and s[n - 4] == "s" and s[n - 3] == "s") or (n > 3 and s[n - 3] == "i"):
                return s[: n - 2]
            return s[: n - 1]
        if s[n - 2] != "s":
            return s[: n - 1]
    return s


def _step1b(s: str) -> tuple[str, bool]:
    """Step 1b; True when it removed "ed" or "ing" (the C code's return value)."""
    n, c = len(s), _second_last(s)
    if c == "e":
        if n > 3 and s.endswith("eed"):
            return (s[: n - 3] + "ee", False) if _m_gt0(s, n - 3) else (s, False)
        if n > 2 and s.endswith("ed"):
            return (s[: n - 2], True) if _has_vowel(s, n - 2) else (s, False)
    elif c == "n" and n > 3 and s.endswith("ing"):
        return (s[: n - 3], True) if _has_vowel(s, n - 3) else (s, False)
    return s, False


def _step1b2(s: str) -> tuple[str, bool]:
    c = _second_last(s)
    for suffix, out in (("at", "ate"), ("bl", "ble"), ("iz", "ize")):
        if c == suffix[0] and len(s) > 2 and s.endswith(suffix):
            return s[:-2] + out, True
    return s, False


def _porter(s: str) -> str:
    s = _step1a(s)
    s, removed = _step1b(s)
    if removed:
        s, grown = _step1b2(s)
        if not grown:
            c = s[-1]
            if not _vowel(c, False) and c not in "lsz" and c == _second_last(s):
                s = s[:-1]
            elif _m_eq1(s, len(s)) and _ostar(s, len(s)):
                s += "e"
    if s[-1] == "y" and _has_vowel(s, len(s) - 1):  # step 1c
        s = s[:-1] + "i"
    s = _apply(s, _STEP2)
    s = _apply(s, _STEP3)
    s = _apply(s, _STEP4)
    n = len(s)
    if s[-1] == "e" and (_m_gt1(s, n - 1) or (_m_eq1(s, n - 1) and not _ostar(s, n - 1))):  # step 5a
        s = s[:-1]
        n -= 1
    if n > 1 and s[-1] == "l" and s[-2] == "l" and _m_gt1(s, n - 1):  # step 5b
        s = s[:-1]
    return s


def stem(word: str) -> str | None:
    """The token FTS5's ``porter unicode61`` makes of ``word`` (lower-case ASCII letters and digits), or None
    when this module cannot be sure (any other character, or a stem the C code would read past)."""
    if not ASCII_WORD.fullmatch(word):
        return None
    if len(word) > MAX_TOKEN or len(word) < 3:
        return word
    try:
        return _porter(word)
    except _Unsure:
        return None


__all__ = ["stem"]
