"""Embedder benchmark: memlens's torch-free embedder, sentence-transformers and chromadb on the same real texts.

**Texts**: sections of the Node.js API reference installed on this machine (the
docs_qa corpus, most of them longer than the model's 256-token window), or, where
those docs are missing, the chunking_qa corpus (installed packages' documentation).

**Side by side** (one process, same texts, rounds interleaved and rotated so
background load hits each alike): ``memlens.embed.OnnxEmbedder`` (ONNX Runtime
over the graph memlens builds), ``SentenceTransformer.encode`` on torch (the
reference; mcp-memory-service embeds with it), and chromadb's default embedding
function (``ONNXMiniLM_L6_V2``: ONNX Runtime, every text padded to 256 tokens,
batches of 32; given the same model exported to ONNX, since nothing is downloaded
here). Texts per second (median of the rounds), CPU seconds per text, and each
vector's cosine to sentence-transformers' (the minimum over all texts).

**Whole ingest in fresh processes**: each stores the same sections with their
vectors, peak RSS (the child's own VmHWM: ru_maxrss would carry the bench process's peak over fork and
exec) and entries per second: memlens (``Memory.import_jsonl``
into a new store), chromadb (``collection.add`` with its embedding function, a new
persistent client), and sentence-transformers' encode alone (the embedding an
mcp-memory-service-like server does; its storage is not counted).

The CPU, its vector extensions, the runtime versions and their settings (threads,
spinning, graph optimisation, torch threads) and the 1-min load average before and
after each round are recorded.

    python -m tests.bench.embedder [--quick]

``EMBEDDER_PARTS=ingest`` runs the fresh-process ingests only and keeps the last
full run's side-by-side rounds (the table says which run each column is from).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import RESULTS, ROOT, ensure_readme_block, log, machine_info, publish, suite_main

NAME = "embedder"
THREADS = 2


def corpus(n: int) -> tuple[list[str], str]:
    docs_qa = ROOT / "tests" / "data" / "docs_qa"
    if Path("/usr/share/doc/nodejs/api").is_dir():
        sys.path.insert(0, str(docs_qa))
        try:
            import build_corpus  # type: ignore[import-not-found]
        finally:
            sys.path.pop(0)
        texts = [f"{d['title']}\n{d['text']}" for d in build_corpus.build()]
        return texts[:n], "docs_qa (Node.js API reference sections)"
    from . import chunking_data

    out = Path(tempfile.mkdtemp(prefix="memlens-embedder-corpus-"))
    chunking_data.build(out)
    with (out / "corpus.jsonl").open(encoding="utf-8") as fh:
        texts = [f"{d['title']}\n{d['text']}" for d in map(json.loads, fh) if d["text"].strip()]
    return texts[:n], "chunking_qa (installed packages' documentation sections)"


def cpu_flags() -> list[str]:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c")))


def chroma_model_dir(scratch: Path) -> Path:
    """chromadb's model folder, filled from the bundled weights (the ONNX file exported with torch, as chromadb's is)."""
    import torch
    from transformers import AutoModel

    from memlens.config import load_settings
    from memlens.embed import resolve_model

    spec = resolve_model(load_settings().embedding)
    folder = scratch / "chroma-model"
    onnx_dir = folder / "onnx"
    onnx_dir.mkdir(parents=True)
    for name in ("config.json", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt"):
        (onnx_dir / name).write_bytes((spec.path / name).read_bytes())
    model = AutoModel.from_pretrained(str(spec.path), local_files_only=True).eval()

    class ByName(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    dummy = torch.ones((1, 8), dtype=torch.int64)
    axes = {0: "batch", 1: "seq"}
    with torch.no_grad():
        torch.onnx.export(ByName(), (dummy, dummy, torch.zeros_like(dummy)), str(onnx_dir / "model.onnx"),
                          input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
                          dynamic_axes={k: axes for k in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")},
                          opset_version=17, dynamo=False)
    return folder


def engines(scratch: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    import onnxruntime as ort
    import torch

    try:
        from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2
    except ImportError:
        raise SystemExit("the embedder suite compares with chromadb: pip install chromadb into the bench venv") from None

    from memlens.config import load_settings
    from memlens.embed import make_embedder, spin_entries
    from memlens.embed_st import SentenceTransformerEmbedder

    settings = load_settings()
    ours = make_embedder(settings.embedding, scratch / "cache")
    ours.load()  # type: ignore[attr-defined]
    torch.set_num_threads(THREADS)
    st = SentenceTransformerEmbedder(ours.spec, ours.sha)  # type: ignore[attr-defined]
    st.load()
    ONNXMiniLM_L6_V2.DOWNLOAD_PATH = chroma_model_dir(scratch)  # type: ignore[misc]
    chroma = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
    settings_doc = {
        "memlens": {"runtime": f"onnxruntime {ort.__version__}", "intra_op_threads": ours.threads or "ORT default (cores)",  # type: ignore[attr-defined]
                    **spin_entries(ort.__version__), "graph_optimization": "ORT_ENABLE_ALL",
                    "batch_size": ours.batch_size,  # type: ignore[attr-defined]
                    "graph": ours.onnx_path.name, "batching": "texts of one token length per run"},  # type: ignore[attr-defined]
        "sentence-transformers": {"runtime": f"torch {torch.__version__}", "threads": torch.get_num_threads(), "batch_size": 64},
        "chromadb": {"runtime": f"onnxruntime {ort.__version__}", "threads": "ORT default (cores)", "batch_size": 32,
                     "padding": "every text to 256 tokens"},
    }
    return {"memlens": ours.embed, "sentence-transformers": st.embed,
            "chromadb": lambda texts: np.asarray(chroma(texts), dtype=np.float32)}, settings_doc


def side_by_side(texts: list[str], rounds: int, scratch: Path) -> dict[str, Any]:
    fns, settings_doc = engines(scratch)
    for fn in fns.values():
        fn(texts[:8])  # warm
    names = list(fns)
    rates: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    vecs: dict[str, np.ndarray] = {}
    loads = []
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        loads.append(round(os.getloadavg()[0], 2))
        for n in order:
            c, t = time.process_time(), time.perf_counter()
            vecs[n] = fns[n](texts)
            wall = time.perf_counter() - t
            rates[n].append(round(len(texts) / wall, 2))
            cpu[n].append(round((time.process_time() - c) / len(texts), 4))
            log(f"[{NAME}] round {r + 1} {n}: {rates[n][-1]} texts/s")
        loads.append(round(os.getloadavg()[0], 2))
    ref = vecs["sentence-transformers"]
    out = {n: {"texts_per_s": float(np.median(rates[n])), "samples": rates[n], "cpu_s_per_text": float(np.median(cpu[n])),
               "min_cosine_to_st": round(float((vecs[n] * ref).sum(axis=1).min()), 7)} for n in names}
    out["ratio_memlens_vs_st"] = round(out["memlens"]["texts_per_s"] / out["sentence-transformers"]["texts_per_s"], 3)
    return {"engines": out, "settings": settings_doc, "load_per_round": loads}


CHILD = r"""
import json, os, sys, time
kind, n, scratch = sys.argv[1], int(sys.argv[2]), sys.argv[3]
from tests.bench.embedder import corpus
texts, _ = corpus(n)
t = time.perf_counter()
if kind == "memlens":
    from memlens import Memory
    path = os.path.join(scratch, "ingest.jsonl")
    with open(path, "w") as fh:
        for i, x in enumerate(texts):
            fh.write(json.dumps({"id": f"d{i}", "wing": "docs", "kind": "document", "title": x.split("\n", 1)[0][:200],
                                 "text": x}) + "\n")
    t = time.perf_counter()
    with Memory.open(os.path.join(scratch, "memlens.db")) as mem:
        mem.import_jsonl(path)
elif kind == "chromadb":
    import chromadb
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2
    ONNXMiniLM_L6_V2.DOWNLOAD_PATH = __import__("pathlib").Path(scratch) / "chroma-model"
    if not (ONNXMiniLM_L6_V2.DOWNLOAD_PATH / "onnx" / "model.onnx").is_file():
        sys.exit("chromadb's model folder is missing: it would download one (nothing here may reach the network)")
    client = chromadb.PersistentClient(path=os.path.join(scratch, "chroma"),
                                       settings=chromadb.Settings(anonymized_telemetry=False))
    col = client.create_collection("docs", embedding_function=ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"]))
    for i in range(0, len(texts), 100):
        col.add(ids=[f"d{j}" for j in range(i, min(i + 100, len(texts)))], documents=texts[i : i + 100])
else:
    import torch
    torch.set_num_threads(2)
    from memlens.config import load_settings
    from memlens.embed_model import resolve_model, verified_sha256
    from memlens.embed_st import SentenceTransformerEmbedder
    s = load_settings(); spec = resolve_model(s.embedding)
    SentenceTransformerEmbedder(spec, verified_sha256(spec, s.cache_dir)).embed(texts)
dt = time.perf_counter() - t
print(json.dumps({"entries_per_s": round(len(texts) / dt, 2), "seconds": round(dt, 1),
                  "peak_rss_mb": next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) // 1024}))
"""


def ingest(n: int, scratch: Path) -> dict[str, Any]:
    out = {}
    for kind in ("memlens", "chromadb", "sentence-transformers"):
        proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(n), str(scratch)], capture_output=True, text=True,
                              cwd=ROOT, timeout=7200)
        if proc.returncode:
            raise SystemExit(f"{kind} ingest failed: {proc.stderr[-2000:]}")
        out[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
        out[kind]["load_after"] = round(os.getloadavg()[0], 2)
        log(f"[{NAME}] ingest {kind}: {out[kind]}")
    return out


def render_table(res: dict[str, Any]) -> str:
    e, ing = res["results"]["side_by_side"]["engines"], res["results"]["ingest"]
    lines = ["| | texts/s (median) | CPU s / text | min cosine to sentence-transformers | whole ingest, entries/s | peak RSS |",
             "|---|---|---|---|---|---|"]
    for n, label in (("memlens", "memlens (ONNX Runtime, graph built without torch)"),
                     ("sentence-transformers", "sentence-transformers on torch (mcp-memory-service's embedder)"),
                     ("chromadb", "chromadb's default embedding function")):
        lines.append(f"| {label} | {e[n]['texts_per_s']:.1f} | {e[n]['cpu_s_per_text']:.3f} | {e[n]['min_cosine_to_st']} | "
                     f"{ing[n]['entries_per_s']} | {ing[n]['peak_rss_mb']} MB |")
    m, s = res["machine"], res["results"]["side_by_side"]
    lines += ["", f"`python -m tests.bench.embedder`: {res['texts']} texts of {res['corpus']}, {res['rounds']} rounds; "
              f"memlens / sentence-transformers throughput {e['ratio_memlens_vs_st']}×. {m['cpu_model']}, {m['cores']} cores, "
              f"flags {' '.join(res['cpu_flags'])}. 1-min load average per round (before, after): {s['load_per_round']}; "
              "the machine was shared with other engineers' tests. Settings: "
              + "; ".join(f"{k}: " + ", ".join(f"{a} {b}" for a, b in v.items()) for k, v in s["settings"].items())
              + ". sentence-transformers' ingest figure is its embedding alone (no storage)."]
    if "side_by_side_run" in res:
        lines += ["", f"The texts/s, CPU and cosine columns are from the run of {res['side_by_side_run'][:16]}; the ingest "
                  f"columns (entries/s, peak RSS) from {m['date'][:16]} (`EMBEDDER_PARTS=ingest`: fresh processes only; 1-min "
                  f"load average {res['load_before']:.2f} before, after each ingest: "
                  f"{', '.join(str(ing[k]['load_after']) for k in ('memlens', 'chromadb', 'sentence-transformers'))})."]
    return "\n".join(lines)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    t0 = time.perf_counter()
    n, rounds = (120, 2) if quick else (1200, 3)
    texts, source = corpus(n)
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-embedder-"))
    res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                           "cpu_flags": cpu_flags(), "corpus": source, "texts": len(texts), "rounds": rounds,
                           "load_before": os.getloadavg()[0]}
    if os.environ.get("EMBEDDER_PARTS") == "ingest" and not quick:  # the side-by-side rounds of the last full run
        last = json.loads((RESULTS / f"{NAME}.json").read_text())
        res["side_by_side_run"] = last.get("side_by_side_run", last["machine"]["date"])
        side = last["results"]["side_by_side"]
        chroma_model_dir(scratch)  # chromadb's child reads its model from here (it would try to download one)
    else:
        side = side_by_side(texts, rounds, scratch)
    res["results"] = {"side_by_side": side, "ingest": ingest(n, scratch)}
    eng = res["results"]["side_by_side"]["engines"]
    ours, st = eng["memlens"], eng["sentence-transformers"]
    ing = res["results"]["ingest"]
    res["targets"] = {
        "throughput_vs_st": {"met": ours["texts_per_s"] >= st["texts_per_s"] and ours["min_cosine_to_st"] >= 0.99999},
        "ingest_ahead_at_no_more_rss": {"met": all(ing["memlens"]["entries_per_s"] > ing[k]["entries_per_s"]
                                                   and ing["memlens"]["peak_rss_mb"] <= ing[k]["peak_rss_mb"]
                                                   for k in ("chromadb", "sentence-transformers"))},
    }
    res["duration_s"] = round(time.perf_counter() - t0, 1)
    if write and not quick:
        ensure_readme_block(NAME, "pipeline_cost")
    publish(NAME, res, render_table(res), official=write and not quick,
            target_lines=[f"{k}: {'met' if v['met'] else 'MISSED'}" for k, v in res["targets"].items()])
    return res


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.embedder", __doc__, run, "120 texts, 2 rounds; README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
