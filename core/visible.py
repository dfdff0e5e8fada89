"""Text from outside (web pages, files, stored entries, a model's answer) made safe to show.

One definition, used by the web sanitiser and by every human-readable output:

- :func:`clean_line` drops what a reader cannot see: control characters
  (among them ESC, which starts every terminal control sequence: clearing the
  screen, setting the window title, moving the cursor; and carriage return,
  which can overwrite a line already shown), zero-width and other format
  characters, bidirectional overrides and isolates, tag characters, variation
  selectors, private-use, surrogate and unassigned code points, invisible
  fillers; odd spaces become plain ones.
- :func:`for_terminal` is that, line by line, for text printed to a terminal
  (tabs and newlines kept, ``\\r\\n`` read as a newline, the bytes of a file
  name that is not UTF-8 kept but for those a terminal could read as controls).
- :func:`one_line` puts a field shown inside a line (a title, a source) on that
  line: its line breaks and runs of spaces become one space, so a stored title
  cannot open a line or a section of its own in what is printed or handed to an
  agent (a "## Invariants" heading in a title, say).
- :func:`strip_controls` drops the control characters alone: for text whose
  layout is already measured (the app's rendered lines), where removing only
  zero-width characters keeps every column in place.

JSON output needs none of this: JSON escapes control characters itself.
"""

from __future__ import annotations

import re
import unicodedata

_INVISIBLE_EXTRA = {0x115F, 0x1160, 0x3164, 0xFFA0, 0x180B, 0x180C, 0x180D, 0x180F, 0x034F}
_ODD_PRINTABLE = re.compile(
    "[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000\ufe00-\ufe0f\U000e0100-\U000e01ef"
    "\u115f\u1160\u3164\uffa0\u180b-\u180f\u034f]"
)
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1 (0x9b is a one-byte CSI)


def invisible(cp: int, cat: str) -> bool:
    """Whether code point ``cp`` (of Unicode category ``cat``) is one a reader cannot see."""
    if cat in ("Cf", "Co", "Cs", "Cn"):
        return True  # format (zero-width, bidi, tags, soft hyphen, BOM), private use, surrogates, unassigned
    if cat == "Cc":
        return True  # control characters; callers keep the newlines and tabs they want before this test
    if 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
        return True  # variation selectors
    return cp in _INVISIBLE_EXTRA


def clean_line(line: str, *, raw_bytes: bool = False) -> tuple[str, int]:
    """``line`` without invisible characters (odd spaces made plain), and how many were removed.

    ``raw_bytes``: keep the bytes 0xA0-0xFF of a file name that is not UTF-8, which Python holds as lone
    surrogates (U+DCA0-U+DCFF) and prints as those bytes again; 0x80-0x9F go, a Latin-1 terminal reads
    them as control characters."""
    if line.isprintable() and not _ODD_PRINTABLE.search(line):
        return line, 0  # the common case, checked in C: nothing invisible on this line
    out: list[str] = []
    removed = 0
    for ch in line:
        cat = unicodedata.category(ch)
        if invisible(ord(ch), cat) and not (raw_bytes and 0xDCA0 <= ord(ch) <= 0xDCFF):
            removed += 1
        elif cat == "Zs":
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out), removed


def for_terminal(text: str) -> str:
    """``text`` as a terminal may show it: no control sequence, nothing invisible; newlines and tabs kept."""
    if text.isprintable() and not _ODD_PRINTABLE.search(text):
        return text
    return "\n".join("\t".join(clean_line(part, raw_bytes=True)[0] for part in line.split("\t"))
                     for line in text.replace("\r\n", "\n").split("\n"))


def strip_controls(text: str) -> str:
    """``text`` without control characters (tab and newline kept): nothing a terminal would act on."""
    return text if text.isprintable() else _CONTROLS.sub("", text)


def one_line(text: str) -> str:
    """``text`` on one line: every run of white space (line breaks included) one space, none at either end."""
    return " ".join(text.split())
