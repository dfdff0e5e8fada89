"""``python -m tests.bench [--quick] [--only NAME]`` (``make bench`` runs it without flags).

Runs the suites in order: ``foundation``, ``retrieval``, ``tasks``, ``tui``, ``limits``, ``mcp``, ``imports``,
``integrity``, ``conflicts``, ``web``, ``ask``, ``postgres``, ``team``, ``ingest``, ``replay``, ``pipeline_cost``,
``chunking``, ``embedder``, ``install``, ``review``. NAME
is one suite or one part of the foundation suite (``foundation.search``,
``foundation.embed``, ``foundation.import``, ``foundation.cold``). Only a full
run of a whole suite writes ``tests/bench/results/<suite>.json`` and its table in
tests/bench/README.md; quick and partial runs write their JSON to the temp directory.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .common import setup_environment

SUITES = (
    "foundation",
    "retrieval",
    "tasks",
    "tui",
    "limits",
    "mcp",
    "imports",
    "integrity",
    "conflicts",
    "web",
    "ask",
    "postgres",
    "team",
    "ingest",
    "replay",
    "pipeline_cost",
    "chunking",
    "embedder",
    "install",
    "review",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="reduced sizes (10k entries, fewer queries): a smoke run")
    p.add_argument(
        "--only", metavar="NAME", help="a suite (" + ", ".join(SUITES) + ") or foundation.PART (search, embed, import, cold)"
    )
    args = p.parse_args(argv)

    env = setup_environment()  # before memlens or any Hugging Face import: offline, engine defaults
    print(f"environment: {env}", file=sys.stderr)

    from . import foundation

    parts_of: dict[str, tuple[str, ...]] = {s: () for s in SUITES}
    parts_of["foundation"] = foundation.PARTS
    selected: dict[str, tuple[str, ...]] = {}
    if args.only:
        suite, _, part = args.only.partition(".")
        if suite not in SUITES or (part and part not in parts_of[suite]):
            choices = ", ".join([*SUITES, *(f"{s}.{x}" for s in SUITES for x in parts_of[s])])
            p.error(f"unknown benchmark {args.only!r} (choices: {choices})")
        selected[suite] = (part,) if part else parts_of[suite]
    else:
        selected = {s: parts_of[s] for s in SUITES}

    for suite, parts in selected.items():
        if suite == "foundation":
            foundation.run(quick=args.quick, parts=parts)
        else:  # every other suite is a module of this package with run(quick=...)
            importlib.import_module(f".{suite}", __package__).run(quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
