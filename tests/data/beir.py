"""The question sets in BEIR layout (``tests/data/<set>/``): each corpus as store entries, and the quality figures
committed beside each set (``quality.json``), which the quality guard (tests/test_quality_guard.py) holds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent
SETS = ("docs_qa", "python_faq")  # the question sets with a corpus rebuilt on this machine and committed figures
WINGS = {"docs_qa": "nodejs", "python_faq": "python"}  # the wing each set's corpus is stored in
TOLERANCE = 0.005  # how far MRR@10 or R@1 may fall below the committed figure before the guard fails


class CorpusMismatch(Exception):
    """A set's corpus cannot be rebuilt as measured (its source is missing or different): one-line message."""


def corpus(name: str) -> list[dict[str, str]]:
    """The set's corpus rebuilt from its source on this machine, checked against its ``corpus.sha256``."""
    if name == "python_faq":
        from tests.data.python_faq import build_corpus as faq

        try:
            return faq.checked()
        except faq.CorpusMismatch as exc:
            raise CorpusMismatch(str(exc)) from None
    from tests.data.docs_qa import build_corpus as node

    if not node.SRC.is_dir():
        raise CorpusMismatch(f"docs_qa: {node.SRC} not found (Debian's nodejs package ships it)")
    docs = node.build()
    got = hashlib.sha256(encode(docs)).hexdigest()
    want = (DATA / name / "corpus.sha256").read_text().split()[0]
    if got != want:
        raise CorpusMismatch(f"docs_qa: the installed docs give a corpus with sha256 {got[:16]}…, not {want[:16]}…")
    return docs


def encode(docs: list[dict[str, str]]) -> bytes:
    return "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in docs).encode("utf-8")


def write_entries(docs: list[dict[str, str]], wing: str, path: Path) -> None:
    """The corpus as an import file: one document entry per BEIR document, id kept, room from the id's prefix."""
    with path.open("w", encoding="utf-8") as fh:
        for d in docs:
            room = d["_id"].split(":", 1)[0].replace(".", "-")
            rec = {"id": d["_id"], "wing": wing, "room": room, "kind": "document", "type": "note",
                   "title": d["title"][:500], "text": d["text"], "created_at": "2026-01-01T00:00:00Z"}
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def committed(name: str) -> dict[str, Any]:
    return json.loads((DATA / name / "quality.json").read_text(encoding="utf-8"))
