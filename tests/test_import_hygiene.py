"""The engine never drags the UI toolkit in (checked by a test, not hoped for)."""

import subprocess
import sys

CODE = """
import sys
import memlens
from memlens import Memory, Entry, parse_query
import memlens.cli.main, memlens.memory, memlens.retrieval.search, memlens.io.jsonl, memlens.embed, memlens.store.db
from memlens.embed import HashEmbedder
with Memory.open(sys.argv[1], embedder=HashEmbedder()) as mem:
    mem.add("Callbacks must not block.", wing="w")
    assert mem.search("callbacks block", active_wing="w").results
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))
print(','.join(bad))
"""


def test_engine_imports_neither_textual_nor_rich(tmp_path):
    out = subprocess.run([sys.executable, "-c", CODE, str(tmp_path / "s.db")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"engine imported: {out.stdout.strip()}"


def test_plain_import_is_light():
    code = ("import sys, memlens; "
            "print(','.join(m for m in ('numpy','pydantic','torch','onnxruntime','sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
