"""Rebuild ``corpus.jsonl`` of the docs_qa question set from the Node.js API documentation on this machine.

The corpus is the Markdown of the Node.js API reference that Debian's ``nodejs``
package ships in ``/usr/share/doc/nodejs/api/*.md`` (Node.js 20.x, MIT licence),
split at its headings: one BEIR document per section, ``_id`` = ``<file stem>:<slug>``
(``-2``, ``-3`` … for repeated headings in one file), ``title`` = the heading,
``text`` = the section's body up to the next heading, HTML comments (the docs'
YAML history blocks) removed. Sections with fewer than ``MIN_WORDS`` words are
left out. The files are read in name order, so the output is deterministic; its
SHA-256 is in ``corpus.sha256`` (a different Node.js doc version gives a
different corpus: the benchmark says so rather than comparing unlike numbers).
The text is not stored in the repository (3 MB); only this script, the
questions and their judgements are.

    python -m tests.data.docs_qa.build_corpus [--src DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

SRC = Path("/usr/share/doc/nodejs/api")
HERE = Path(__file__).resolve().parent
MIN_WORDS = 25
MAX_CHARS = 20_000  # a few reference tables are longer; the model reads only the start anyway
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def slug(heading: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")
    return s[:80] or "section"


def sections(path: Path) -> list[dict[str, str]]:
    """The sections of one Markdown file: heading and body, code fences respected."""
    text = _COMMENT.sub("", path.read_text(encoding="utf-8"))
    out: list[dict[str, str]] = []
    seen: dict[str, int] = {}
    title, body, fence = None, [], False

    def flush() -> None:
        if title is None:
            return
        content = "\n".join(body).strip()
        content = re.sub(r"\n{3,}", "\n\n", content)
        if len(content.split()) < MIN_WORDS:
            return
        base = f"{path.stem}:{slug(title)}"
        seen[base] = seen.get(base, 0) + 1
        doc_id = base if seen[base] == 1 else f"{base}-{seen[base]}"
        out.append({"_id": doc_id, "title": title.replace("`", ""), "text": content[:MAX_CHARS]})

    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else _HEADING.match(line)
        if m:
            flush()
            title, body = m.group(2), []
        else:
            body.append(line)
    flush()
    return out


def build(src: Path = SRC) -> list[dict[str, str]]:
    docs: list[dict[str, str]] = []
    for path in sorted(src.glob("*.md")):
        if path.stem in ("all", "index", "documentation"):
            continue  # all.md repeats every other file; index and documentation are about the docs themselves
        docs.extend(sections(path))
    return docs


def write(docs: list[dict[str, str]], out: Path) -> str:
    data = "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in docs).encode("utf-8")
    out.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", type=Path, default=SRC)
    p.add_argument("--out", type=Path, default=HERE / "corpus.jsonl")
    args = p.parse_args(argv)
    if not args.src.is_dir():
        print(f"build_corpus: {args.src} not found (Debian's nodejs package ships it)", file=sys.stderr)
        return 2
    docs = build(args.src)
    digest = write(docs, args.out)
    expected = (HERE / "corpus.sha256").read_text().split()[0] if (HERE / "corpus.sha256").exists() else None
    state = "matches corpus.sha256" if digest == expected else f"differs from corpus.sha256 ({expected})"
    print(f"{len(docs)} sections -> {args.out} (sha256 {digest}, {state})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
