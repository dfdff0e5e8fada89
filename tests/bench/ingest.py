"""Ingestion and the code index: throughput, memory, incremental re-index, watch latency.

* **throughput**: ``ingest`` of installed packages' Markdown READMEs and the system's HTML
  manual pages with the real model (read, chunk, embed, write), against the raw model
  embedding the very same chunk texts (``embedder.embed`` in batches of 256) in the
  same process, before and after the pipeline run (their mean); both in chunks per second;
* **peak RSS**: ``index`` of a 1k-file and a 10k-file workspace (real Python files of the
  standard library, cycled; each file cut to its first 60 lines) in fresh processes, with
  a fixed stand-in embedder (a random unit vector per text, as the foundation suite uses)
  so that the pipeline's memory, not the model's speed, is measured;
* **unchanged re-index**: ``index`` of the same 10k-file workspace again, nothing changed
  (in-process call, and the ``memlens index`` command's wall time);
* **watch latency**: with a ``Watcher`` on a small workspace and the real model, the time
  from writing a new file until its chunk is in the store (searchable), over several saves.

    python -m tests.bench.ingest [--quick]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import ensure_readme_block, log, machine_info, publish, ratio, suite_main

NAME = "ingest"

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[4])
from memlens import Memory
from memlens.config import load_settings
from memlens.embed import make_embedder
from memlens.ingest import index
from tests.bench.foundation import FixedEmbedder
settings = load_settings()
model_id = make_embedder(settings.embedding, settings.cache_dir).model_id
with Memory.open(sys.argv[1], settings=settings, embedder=FixedEmbedder(model_id)) as mem:
    t = time.perf_counter(); out = index(mem, sys.argv[2], wing="bench"); first = time.perf_counter() - t
    # VmHWM: this process's own peak (ru_maxrss would carry the parent's peak over fork and exec)
    hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    if sys.argv[3] == "again":
        t = time.perf_counter(); again = index(mem, sys.argv[2], wing="bench"); second = time.perf_counter() - t
    else:
        again, second = None, None
print(json.dumps({"files": out["added"], "chunks": out["chunks"], "seconds": round(first, 3),
                  "again": again and {k: v for k, v in again.items() if k != "skipped"}, "again_s": second,
                  "peak_rss_mb": round(hwm / 1024, 1)}))
"""


def _workspace(folder: Path, n: int) -> Path:
    """``n`` real Python files (cut to 60 lines) from the standard library, cycled under distinct names."""
    import email
    import json as json_mod

    sources = []
    for pkg in (os.path.dirname(email.__file__), os.path.dirname(json_mod.__file__), os.path.dirname(os.__file__)):
        sources += sorted(Path(pkg).glob("*.py"))
    texts = []
    for p in sources:
        try:
            lines = p.read_text(encoding="utf-8").split("\n")[:60]
        except (OSError, UnicodeDecodeError):
            continue
        if sum(1 for x in lines if x.strip()) >= 10:
            texts.append((p.stem, "\n".join(lines) + "\n"))
    for i in range(n):
        stem, text = texts[i % len(texts)]
        d = folder / f"pkg{i // 500:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{stem}_{i}.py").write_text(f"# copy {i}\n{text}", encoding="utf-8")
    return folder


def _child(store: Path, ws: Path, again: bool) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(store), str(ws), "again" if again else "once",
                          str(Path(__file__).resolve().parents[2])], capture_output=True, text=True, timeout=7200)
    if out.returncode:
        raise SystemExit(f"child failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _throughput(scratch: Path, quick: bool) -> dict[str, Any]:
    from memlens import Memory
    from memlens.config import load_settings
    from memlens.embed import make_embedder
    from memlens.ingest import ingest
    from tests.ingest_material import HTML_DIR, readmes

    settings = load_settings()
    emb = make_embedder(settings.embedding, settings.cache_dir)
    emb.load()
    docs = scratch / "docs"
    readmes(docs, limit=8 if quick else 15)
    if HTML_DIR.is_dir():
        for p in sorted(HTML_DIR.glob("*.html"))[: 5 if quick else 20]:
            shutil.copy(p, docs / p.name)
    emb.embed(["warm up"] * 8)
    from memlens.embed import HashEmbedder

    class _Texts(HashEmbedder):  # the same chunks as the real run (same tokenizer), without the model
        spec = emb.spec
        count_tokens = staticmethod(emb.count_tokens)

    with Memory.open(scratch / "texts.db", settings=settings, embedder=_Texts()) as mem:
        ingest(mem, [docs], wing="docs")
        texts = [e.embed_text for e in mem.entries("docs")]

    def raw() -> float:
        t = time.perf_counter()
        for i in range(0, len(texts), 256):
            emb.embed(texts[i : i + 256])
        return time.perf_counter() - t

    raw_before = raw()  # the model alone, before and after the pipeline: a busy machine drifts
    with Memory.open(scratch / "tp.db", settings=settings, embedder=emb) as mem:
        t = time.perf_counter()
        out = ingest(mem, [docs], wing="docs")
        ingest_s = time.perf_counter() - t
    raw_after = raw()
    raw_s = (raw_before + raw_after) / 2
    assert out["chunks"] == len(texts), (out["chunks"], len(texts))
    tokens = sum(emb.count_tokens(x) for x in texts)
    return {"files": out["added"], "chunks": out["chunks"], "avg_tokens": round(tokens / len(texts), 1),
            "ingest_s": round(ingest_s, 2), "ingest_chunks_per_s": round(out["chunks"] / ingest_s, 2),
            "raw_model_s_before": round(raw_before, 2), "raw_model_s_after": round(raw_after, 2),
            "raw_model_chunks_per_s": round(len(texts) / raw_s, 2), "ratio_to_raw": ratio(raw_s, ingest_s)}


def _watch_latency(scratch: Path, saves: int) -> dict[str, Any]:
    from memlens import Memory
    from memlens.config import load_settings
    from memlens.embed import make_embedder
    from memlens.ingest import index
    from memlens.ingest.watch import Watcher
    from tests.ingest_material import code_workspace

    settings = load_settings()
    emb = make_embedder(settings.embedding, settings.cache_dir)
    emb.load()
    ws = code_workspace(scratch / "watch-ws", ("json",))
    lat = []
    with Memory.open(scratch / "watch.db", settings=settings, embedder=emb) as mem:
        index(mem, ws, wing="w")
        with Watcher(mem, str(ws), "w", debounce_ms=50):
            time.sleep(1.0)
            for i in range(saves):
                marker = f"saved_function_{i}"
                t = time.perf_counter()
                (ws / "json" / f"saved_{i}.py").write_text(f"def {marker}():\n    return {i}\n")
                while time.perf_counter() - t < 60:
                    row = mem.conn.execute("SELECT 1 FROM entries WHERE text LIKE ? LIMIT 1", (f"%{marker}%",)).fetchone()
                    if row:
                        break
                    time.sleep(0.01)
                lat.append(time.perf_counter() - t)
                time.sleep(0.3)
    lat.sort()
    return {"saves": saves, "p50_s": round(lat[len(lat) // 2], 3), "max_s": round(lat[-1], 3)}


def run(quick: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-ingest-"))
    try:
        res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                               "load_average_before": round(os.getloadavg()[0], 2)}
        log(f"[{NAME}] throughput ...")
        res["throughput"] = _throughput(scratch, quick)
        small, large = (200, 2000) if quick else (1000, 10_000)
        log(f"[{NAME}] peak RSS, {small:,} files ...")
        a = _child(scratch / "small.db", _workspace(scratch / "ws-small", small), again=False)
        log(f"[{NAME}] peak RSS and unchanged re-index, {large:,} files ...")
        ws_large = _workspace(scratch / "ws-large", large)
        b = _child(scratch / "large.db", ws_large, again=True)
        res["peak_rss"] = {f"{small}_files_mb": a["peak_rss_mb"], f"{large}_files_mb": b["peak_rss_mb"],
                           "ratio": ratio(b["peak_rss_mb"], a["peak_rss_mb"]), "chunks_small": a["chunks"],
                           "chunks_large": b["chunks"], "index_large_s": b["seconds"]}
        cli = subprocess.run([str(Path(sys.executable).parent / "memlens"), "--store", str(scratch / "large.db"), "index",
                              str(ws_large), "--wing", "bench", "--json"], capture_output=True, text=True, timeout=600)
        t = time.perf_counter()
        cli = subprocess.run([str(Path(sys.executable).parent / "memlens"), "--store", str(scratch / "large.db"), "index",
                              str(ws_large), "--wing", "bench", "--json"], capture_output=True, text=True, timeout=600)
        cli_s = time.perf_counter() - t
        cli_out = json.loads(cli.stdout) if cli.returncode == 0 else {"error": cli.stderr[-300:]}
        res["unchanged_reindex"] = {"files": large, "in_process_s": round(b["again_s"], 3),
                                    "unchanged": b["again"]["unchanged"], "cli_wall_s": round(cli_s, 3),
                                    "cli_reported_s": cli_out.get("seconds")}
        log(f"[{NAME}] watch latency ...")
        res["watch_latency"] = _watch_latency(scratch, 3 if quick else 8)
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        if not quick:
            ensure_readme_block(NAME, "imports")
        publish(NAME, res, table(res), official=not quick, target_lines=targets(res))
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def targets(res: dict[str, Any]) -> list[str]:
    tp, rss, re_, w = res["throughput"], res["peak_rss"], res["unchanged_reindex"], res["watch_latency"]

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    return [f"ingestion >= 90% of the raw model: {tp['ratio_to_raw']:.0%}, {met(tp['ratio_to_raw'] >= 0.9)}",
            f"peak RSS large/small within 1.2x: {rss['ratio']}x, {met(rss['ratio'] <= 1.2)}",
            f"unchanged re-index under 1 s: {re_['in_process_s']} s, {met(re_['in_process_s'] < 1)}",
            f"saved file searchable within 2 s: max {w['max_s']} s, {met(w['max_s'] < 2)}"]


def table(res: dict[str, Any]) -> str:
    tp, rss, re_, w = res["throughput"], res["peak_rss"], res["unchanged_reindex"], res["watch_latency"]
    sizes = [k for k in rss if k.endswith("_files_mb")]
    m = res["machine"]
    return "\n".join([
        f"Ingestion and the code index ({m.get('cpu_model', '?')}, {m.get('cores_usable', '?')} cores):",
        "",
        "| ingest, real model | raw model, same chunks | ratio | peak RSS " + " / ".join(s.split("_")[0] for s in sizes)
        + " files | ratio | unchanged re-index | saved file searchable (p50 / max) |",
        "|---|---|---|---|---|---|---|",
        f"| {tp['ingest_chunks_per_s']} chunks/s | {tp['raw_model_chunks_per_s']} chunks/s | {tp['ratio_to_raw']:.2f} "
        f"| {' / '.join(str(rss[s]) for s in sizes)} MB | {rss['ratio']} | {re_['in_process_s']} s ({re_['files']:,} files; "
        f"command {re_['cli_wall_s']} s) | {w['p50_s']} s / {w['max_s']} s |",
        "",
        f"`python -m tests.bench.ingest`: {tp['files']} files ({tp['chunks']} chunks, {tp['avg_tokens']} tokens on "
        "average) of installed packages' READMEs and the system's HTML manual, ingested with the real model; the raw model "
        "embeds the same chunk texts before and after (mean). Peak RSS (VmHWM) of `index` in fresh processes over real "
        "standard-library files with a stand-in embedder. Watch: a new file written until its chunk is stored. "
        f"1-min load average before the run {res.get('load_average_before', '?')}; {m.get('date', '')}.",
    ])


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.ingest", __doc__, run, "fewer files; results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
