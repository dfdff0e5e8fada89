"""The python_faq question set: rebuild its corpus from Python's own documentation sources.

The source is the reStructuredText of the Python 3.11 documentation that
Debian's ``python3.11-doc`` package ships in ``/usr/share/doc/python3.11/html/_sources``
(PSF licence). When that package is not installed, ``--fetch`` (run by ``make test``)
downloads it with ``apt-get download`` and keeps only the folders used here under
``<venv>/python-doc/_sources``.

* **Questions**: the question headings of the Python FAQ (``faq/*.rst.txt``: the
  headings underlined with ``-``; page titles and categories use ``=``), as their
  authors wrote them, inline markup removed. A question asked by two pages ("What is
  Python?") is left out (either answer would do), and so is one whose answer has
  fewer than ``MIN_ANSWER_WORDS`` words. ``--questions`` writes ``queries.jsonl``,
  ``qrels/test.tsv`` and ``corpus.sha256``.
* **Corpus**: each FAQ answer WITHOUT its question (title: the page and category
  it sits in, text: the answer's body), and as distractors every section of the
  tutorial, the HOWTOs, the language reference, "Python Setup and Usage" and
  "Extending and Embedding" with at least ``MIN_WORDS`` words (title: its heading).
  reST markup is reduced to its text (roles, links, directive lines). Files are
  read in name order, so the output is deterministic; ``corpus.sha256`` is the
  digest of the build the committed figures were measured on.

    python -m tests.data.python_faq.build_corpus [--fetch] [--questions] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "python3.11-doc"
SYSTEM = Path("/usr/share/doc/python3.11/html/_sources")
FETCHED = Path(sys.prefix) / "python-doc" / "_sources"
FAQ = "faq"
DISTRACTORS = ("tutorial", "howto", "reference", "using", "extending")
MIN_WORDS = 25  # a distractor section shorter than this is left out (an answer needs MIN_ANSWER_WORDS)
MIN_ANSWER_WORDS = 10
MAX_CHARS = 20_000
_UNDERLINE = re.compile(r"([=\-~^*\"#+`'.:_])\1{2,}")
_DIRECTIVE = re.compile(r"^\s*\.\.\s+(?:[\w:-]+::.*|_[^:]*:.*|\|.*|\[#?\w*\].*)?$")
_ROLE = re.compile(r":[\w:.-]+:`([^`]*)`")
_LINK = re.compile(r"`([^`<]*?)\s*(?:<[^>]*>)?`__?")
_LITERAL = re.compile(r"``([^`]*)``")
_EMPHASIS = re.compile(r"(?<![\w*])\*(\w[^*]*?)\*(?![\w*])")  # *is* in a heading


class CorpusMismatch(Exception):
    """The documentation found is not the one the question set was built from (one-line message)."""


@dataclass(frozen=True)
class Section:
    path: str  # "<folder>/<stem>"
    heads: tuple[str, ...]  # the heading path, page title first
    body: str
    underline: str = ""  # the character under its heading

    @property
    def title(self) -> str:
        return self.heads[-1] if self.heads else self.path


def source() -> Path | None:
    """The installed documentation sources, else the fetched copy, else None."""
    return next((p for p in (SYSTEM, FETCHED) if (p / FAQ).is_dir()), None)


def _role_text(m: re.Match[str]) -> str:
    inner = m.group(1)
    label = re.match(r"(.*?)\s*<[^>]*>$", inner, re.S)
    return (label.group(1) if label else inner).lstrip("~!")


def plain(text: str) -> str:
    """reST reduced to its text: directive and target lines dropped, roles, links and literals to their words."""
    lines = [ln for ln in text.split("\n") if not _DIRECTIVE.match(ln) and not _UNDERLINE.fullmatch(ln.strip())]
    out = "\n".join(lines)
    out = _ROLE.sub(_role_text, out)
    out = _LITERAL.sub(r"\1", out)
    out = _LINK.sub(r"\1", out)
    out = re.sub(r"[ \t]+\n", "\n", out)
    return re.sub(r"\n{3,}", "\n\n", out).strip()


def sections(root: Path, rel: str) -> list[Section]:
    """The sections of one reST file: each heading's body up to the next heading, with its heading path
    (levels in the order their underline styles first appear, an overlined style apart from the plain one)."""
    lines = (root / f"{rel}.rst.txt").read_text(encoding="utf-8").split("\n")
    heads: list[tuple[int, int, str, str]] = []  # (line of the title, level, title, underline character)
    styles: list[tuple[str, bool]] = []
    for i in range(1, len(lines)):
        title, under = lines[i - 1].rstrip(), lines[i]
        if not title or title[0].isspace() or not _UNDERLINE.fullmatch(under) or len(under) < len(title):
            continue
        if _UNDERLINE.fullmatch(title):
            continue  # an overline above its title
        over = i >= 2 and lines[i - 2].startswith(under[0] * len(title))
        style = (under[0], over)
        if style not in styles:
            styles.append(style)
        heads.append((i - 1, styles.index(style), _EMPHASIS.sub(r"\1", plain(title.strip())), under[0]))
    out: list[Section] = []
    path: list[tuple[int, str]] = []
    for n, (line, level, title, char) in enumerate(heads):
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        out.append(Section(rel, tuple(t for _, t in path), plain("\n".join(lines[line + 2 : end])), char))
    return out


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "section"


def _files(root: Path, folder: str) -> list[str]:
    return [f"{folder}/{p.name.removesuffix('.rst.txt')}" for p in sorted((root / folder).glob("*.rst.txt"))
            if p.name != "index.rst.txt"]


def _ids(secs: list[Section]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for s in secs:
        base = f"{s.path.replace('/', '.')}:{slug(s.title)}"  # an entry id: letters, digits and _ . : - only
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def faq_answers(root: Path) -> list[tuple[str, Section]]:
    """(corpus id, section) of every FAQ question with an answer of at least ``MIN_ANSWER_WORDS`` words. The FAQ
    underlines its questions with ``-`` (its page titles and categories with ``=``)."""
    secs = [s for rel in _files(root, FAQ) for s in sections(root, rel)]
    return [(i, s) for i, s in zip(_ids(secs), secs) if s.underline == "-" and len(s.body.split()) >= MIN_ANSWER_WORDS]


def build(root: Path) -> list[dict[str, str]]:
    docs: list[dict[str, str]] = []
    for doc_id, s in faq_answers(root):
        docs.append({"_id": doc_id, "title": " > ".join(s.heads[:-1]), "text": s.body[:MAX_CHARS]})
    for folder in DISTRACTORS:
        secs = [s for rel in _files(root, folder) for s in sections(root, rel)]
        for doc_id, s in zip(_ids(secs), secs):
            if len(s.body.split()) >= MIN_WORDS:
                docs.append({"_id": doc_id, "title": s.title, "text": s.body[:MAX_CHARS]})
    return docs


def questions(root: Path) -> tuple[list[dict[str, str]], list[tuple[str, str]]]:
    """The queries (BEIR) and qrels (query id, corpus id): one per FAQ question asked once in the FAQ."""
    answers = faq_answers(root)
    count: dict[str, int] = {}
    for _, s in answers:
        count[s.title.lower()] = count.get(s.title.lower(), 0) + 1
    queries, qrels = [], []
    for doc_id, s in answers:
        if count[s.title.lower()] > 1:
            continue
        qid = f"q{len(queries) + 1:03d}"
        queries.append({"_id": qid, "text": s.title})
        qrels.append((qid, doc_id))
    return queries, qrels


def encode(docs: list[dict[str, str]]) -> bytes:
    return "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in docs).encode("utf-8")


def digest(docs: list[dict[str, str]]) -> str:
    return hashlib.sha256(encode(docs)).hexdigest()


def expected_digest() -> str:
    return (HERE / "corpus.sha256").read_text().split()[0]


def checked() -> list[dict[str, str]]:
    """The corpus, rebuilt and compared with ``corpus.sha256``; ``CorpusMismatch`` when the sources are missing or
    give another corpus."""
    root = source()
    if root is None:
        raise CorpusMismatch(f"python_faq: no Python documentation sources ({SYSTEM} or {FETCHED}); "
                             "`python -m tests.data.python_faq.build_corpus --fetch` (run by make test) gets them")
    docs = build(root)
    got, want = digest(docs), expected_digest()
    if got != want:
        raise CorpusMismatch(f"python_faq: the sources in {root} give a corpus with sha256 {got[:16]}…, "
                             f"not {want[:16]}… as measured")
    return docs


def fetch() -> Path:
    """``python3.11-doc`` downloaded with apt and its sources kept under ``FETCHED``; nothing when installed."""
    root = source()
    if root is not None:
        return root
    with tempfile.TemporaryDirectory(prefix="python-doc-") as tmp:
        got = subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp, capture_output=True, text=True)
        if got.returncode != 0 and os.geteuid() == 0:  # the package lists may be missing on a new machine
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
            got = subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob("*.deb"))
        if got.returncode != 0 or not debs:
            last = (got.stderr.strip().splitlines() or ["no package file"])[-1]
            raise CorpusMismatch(f"python_faq: apt-get download {PACKAGE} failed: {last}")
        unpacked = Path(tmp) / "x"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], check=True, capture_output=True)
        src = unpacked / SYSTEM.relative_to("/")
        shutil.rmtree(FETCHED, ignore_errors=True)
        for folder in (FAQ, *DISTRACTORS):
            shutil.copytree(src / folder, FETCHED / folder)
    return FETCHED


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fetch", action="store_true", help=f"download {PACKAGE} when its sources are not on the machine")
    p.add_argument("--questions", action="store_true", help="write queries.jsonl and qrels/test.tsv from the FAQ")
    p.add_argument("--out", type=Path, help="write the corpus (BEIR corpus.jsonl) here")
    args = p.parse_args(argv)
    try:
        root = fetch() if args.fetch else source()
    except CorpusMismatch as exc:
        print(exc, file=sys.stderr)
        return 2
    if root is None:
        print(f"python_faq: {SYSTEM} not found; run with --fetch", file=sys.stderr)
        return 2
    docs = build(root)
    got = digest(docs)
    if args.out:
        args.out.write_bytes(encode(docs))
    if args.questions:
        queries, qrels = questions(root)
        (HERE / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
        (HERE / "qrels").mkdir(exist_ok=True)
        (HERE / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                 + "".join(f"{q}\t{d}\t1\n" for q, d in qrels))
        (HERE / "corpus.sha256").write_text(f"{got}  corpus.jsonl\n")
    state = "matches" if got == expected_digest() else "DIFFERS from"
    print(f"python_faq: {len(docs)} documents from {root} (sha256 {got[:16]}…, {state} corpus.sha256)", file=sys.stderr)
    return 0 if got == expected_digest() else 1


if __name__ == "__main__":
    sys.exit(main())
