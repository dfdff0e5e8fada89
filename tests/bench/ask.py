"""Answers: what memlens adds around the chat model (the model's own time is not memlens's to measure).

On the demo memory with the real all-MiniLM-L6-v2 model, and a fake
OpenAI-compatible server on 127.0.0.1 (``tests/fake_llm.py``) standing in for
the model:

* ``prepare``: search (cache off) + the context markdown + the prompt, per question;
* ``first_token``: from the request to the first token, the server answering at once
  (connection, request, response headers, the first event parsed);
* ``stream_2000``: a 2,000-token answer streamed through the client: total and per token;
* ``citations``: parsing and checking the citations of that answer;
* ``log``: writing one answer row with its citations.

    python -m tests.bench.ask [--quick]

A full run writes ``tests/bench/results/ask.json`` and its table in tests/bench/README.md.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import ROOT, ensure_readme_block, log, machine_info, publish, suite_main, summary

NAME = "ask"
QUESTIONS = ["why do callbacks block", "lifecycle transitions publish", "publisher QoS depth",
             "watchdog timers under sim time", "which executor should nodes spin with", "sleep in callbacks"]
TOKENS = 2000


def _timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def render_table(res: dict[str, Any]) -> str:
    r = res["results"]
    rows = [("prepare (search + context + prompt)", r["prepare"]), ("first token (fake model, local)", r["first_token"]),
            (f"stream {TOKENS} tokens", r["stream_2000"]), (f"citations of a {TOKENS}-token answer", r["citations"]),
            ("log one answer", r["log"])]
    m = res["machine"]
    lines = ["| `memlens ask` around the model (demo memory) | p50 ms | p95 ms | n |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {s['p50_ms']:.2f} | {s['p95_ms']:.2f} | {s['n']} |" for name, s in rows]
    lines.append(f"\n`python -m tests.bench.ask`: the model is a fake OpenAI-compatible server on 127.0.0.1, so these are "
                 f"memlens's own costs; streaming costs {res['per_token_us']:.0f} µs per token in the client and the fake "
                 f"server together. {m['cpu_model']} Processor, {m['cores']} cores, Python {m['python']}; {m['date']}.")
    return "\n".join(lines)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    from memlens import Memory
    from memlens.assist import citations
    from memlens.assist import log as answer_log
    from memlens.assist.ask import finish, prepare
    from memlens.assist.llm import Endpoint, stream_chat
    from memlens.config import load_settings
    from memlens.embed import make_embedder

    from ..fake_llm import FakeLLM, ids_in_prompt

    t0 = time.perf_counter()
    reps = 3 if quick else 20
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-ask-"))
    try:
        settings = load_settings()
        embedder = make_embedder(settings.embedding, settings.cache_dir)
        embedder.load()
        res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                               "plan": {"reps": reps, "questions": len(QUESTIONS), "tokens": TOKENS}}
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")
        with Memory.open(scratch / "demo.db", settings=settings, embedder=embedder) as mem:
            mem.import_jsonl(ROOT / "data" / "demo.jsonl")
            prepared = [prepare(mem, q, active_wing="lifecore_ros2", use_cache=False) for q in QUESTIONS]  # warm-up
            qs = iter(QUESTIONS * reps)
            prep = _timed(lambda: prepare(mem, next(qs), active_wing="lifecore_ros2", use_cache=False),
                          len(QUESTIONS) * reps)
            p = prepared[0]
            ids = ids_in_prompt({"messages": p.messages})
            tokens = [f"word{i} " if i % 50 else f"[{ids[i % len(ids)]}] " for i in range(TOKENS)]
            with FakeLLM("stream", tokens) as fake:
                ep = Endpoint(fake.base_url, "fake", timeout=60, read_timeout=60)

                def first() -> None:
                    next(iter(stream_chat(ep, p.messages)))

                first_s = _timed(first, reps * 3)
                text: list[str] = []

                def whole() -> None:
                    text[:] = list(stream_chat(ep, p.messages))

                stream_s = _timed(whole, reps)
            answer = "".join(text)
            cite_s = _timed(lambda: citations.parse(answer, p.sent_ids), reps * 5)
            done = finish(p, answer, model="fake", complete=True, error=None)
            log_s = _timed(lambda: answer_log.record(
                mem, question=p.question, model="fake", complete=True, error=None, retrieval_seq=p.retrieval_seq,
                bundle=p.bundle, cited=done.citations.valid, invented=done.citations.invented), reps * 3)
        res["results"] = {"prepare": summary(prep), "first_token": summary(first_s), "stream_2000": summary(stream_s),
                          "citations": summary(cite_s), "log": summary(log_s)}
        res["per_token_us"] = round(res["results"]["stream_2000"]["p50_ms"] * 1000 / TOKENS, 1)
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        if write and not quick:
            ensure_readme_block(NAME, "tui")
        publish(NAME, res, render_table(res), official=write and not quick,
                target_lines=[f"per-token client cost {res['per_token_us']} µs"])
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.ask", __doc__, run, "fewer repetitions; README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
