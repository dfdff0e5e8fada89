"""Web context: how long a call takes against pages served on 127.0.0.1, and that a hanging URL ends at the deadline.

Every request goes to a server this benchmark starts on 127.0.0.1 (``tests/web_servers.py``);
``[web] allow_hosts = ["127.0.0.1"]``, robots.txt respected, everything else at its default.

* ``first call``: the process's first call, for one small article: it also starts the extraction
  worker (Python, lxml, trafilatura), which later calls reuse.
* ``one page``: later calls for one small article (fetch, robots.txt, extraction, cleaning).
* ``eight pages``: the small article, a page with hidden text, a plain-text page and a real HTML
  document shipped on this machine, twice each (distinct URLs).
* ``with a hanging URL``: the eight pages plus one URL that never answers, deadline 5 s: the call
  must return at the deadline with the eight pages' text.

    python -m tests.bench.web [--quick]

A full run writes ``tests/bench/results/web.json`` and its table in tests/bench/README.md; a
quick run (fewer repetitions) writes its JSON to the temp directory.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from .common import ensure_readme_block, machine_info, publish, suite_main, summary

NAME = "web"
DEADLINE_S = 5.0


def _time_calls(conf: Any, urls: list[str], n: int) -> tuple[list[float], Any]:
    from memlens.web.context import gather_sync

    samples, ctx = [], None
    for _ in range(n):
        t = time.perf_counter(); ctx = gather_sync(conf, urls=urls); samples.append(time.perf_counter() - t)
    return samples, ctx


def run(quick: bool = False) -> dict[str, Any]:
    from memlens.config import WebConfig
    from tests.web_servers import Site, real_html_file

    reps = 3 if quick else 10
    t_start = time.perf_counter()
    load = round(os.getloadavg()[0], 2)
    site = Site("127.0.0.1")
    try:
        conf = WebConfig(allow_hosts=["127.0.0.1"])
        one, ctx1 = _time_calls(conf, [site.url("/good")], reps + 1)
        first, one = one[0], one[1:]
        paths = ["/good", "/hidden", "/plain"] + (["/real"] if real_html_file() else ["/good"])
        eight = [site.url(f"{p}?{i}") for i in range(2) for p in paths]
        many, ctx8 = _time_calls(conf, eight, reps)
        hang_conf = WebConfig(allow_hosts=["127.0.0.1"], deadline_seconds=DEADLINE_S, read_timeout=600)
        hung, ctxh = _time_calls(hang_conf, [site.url("/hang"), *eight], max(2, reps // 3))
    finally:
        site.stop()
    res: dict[str, Any] = {
        "suite": NAME,
        "mode": "quick" if quick else "full",
        "machine": machine_info(),
        "first_call_ms": round(first * 1000, 1),
        "one_page": {**summary(one), "ok": sum(s["ok"] for s in ctx1.sources)},
        "eight_pages": {**summary(many), "ok": sum(s["ok"] for s in ctx8.sources), "chars": len(ctx8.context)},
        "with_hanging_url": {**summary(hung), "deadline_s": DEADLINE_S, "ok": sum(s["ok"] for s in ctxh.sources),
                             "hanging_status": ctxh.sources[0]["error"]},
        "real_html": bool(real_html_file()),
        "load_average_1m": load,
    }
    res["duration_s"] = round(time.perf_counter() - t_start, 1)
    table = render_table(res)
    if not quick:
        ensure_readme_block(NAME, "imports")
    h = res["with_hanging_url"]
    publish(NAME, res, table, official=not quick, target_lines=[
        f"a call with a hanging URL returns by the {DEADLINE_S:g} s deadline (+1 s): max {h['max_ms']:.0f} ms, "
        f"{h['ok']} of 8 other pages kept",
    ])
    return res


def render_table(res: dict[str, Any]) -> str:
    m, o, e, h = res["machine"], res["one_page"], res["eight_pages"], res["with_hanging_url"]
    met = "met" if h["max_ms"] <= (DEADLINE_S + 1) * 1000 and h["ok"] == 8 else "missed"
    return "\n".join([
        f"`memlens web` against pages served on 127.0.0.1 ({m['cpu_model']}, {m['cores_usable']} cores):",
        "",
        "| call | p50 | p95 | max | pages with text |",
        "|---|---|---|---|---|",
        f"| first call of a process, one page | {res['first_call_ms']:.0f} ms | | | {o['ok']} of 1 |",
        f"| one page | {o['p50_ms']:.0f} ms | {o['p95_ms']:.0f} ms | {o['max_ms']:.0f} ms | {o['ok']} of 1 |",
        f"| eight pages | {e['p50_ms']:.0f} ms | {e['p95_ms']:.0f} ms | {e['max_ms']:.0f} ms | {e['ok']} of 8 |",
        f"| eight pages + one that never answers | {h['p50_ms']:.0f} ms | {h['p95_ms']:.0f} ms | {h['max_ms']:.0f} ms "
        f"| {h['ok']} of 9 |",
        "",
        f"`python -m tests.bench.web`: every call reads robots.txt; the first call of a process also starts the "
        "extraction worker (Python, lxml, trafilatura), which later calls reuse. Each page gets a share of the "
        "deadline when it starts fetching (9 pages, 4 at a time: a third of the time left), so the URL that never "
        "answers is given up at its share, not at the deadline. Target: a call with a hanging URL "
        f"returns by its {DEADLINE_S:g} s deadline plus 1 s with every other page's text: {met}. "
        f"1-min load average before the run {res.get('load_average_1m', '?')}; {m['date']}.",
    ])


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.web", __doc__, run, "3 repetitions instead of 10", argv)


if __name__ == "__main__":
    sys.exit(main())
