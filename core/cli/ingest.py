"""``memlens ingest`` and ``memlens index``: documents and code into memory.

    memlens ingest PATH… --wing W [--room R] [--json]
    memlens index WORKSPACE --wing W [--room R] [--watch] [--deadline S] [--json]
    memlens index status [--wing W] [--json]

Paths and names are checked before the store is opened; every user error is
one line on stderr with exit status 2 (``memlens.cli.main``). The engine loads
inside the handlers, so this module stays cheap to import.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from memlens.cli.common import store_arg
from memlens.cli.output import progress_stream
from memlens.errors import ValidationError

if TYPE_CHECKING:
    from memlens.memory import Memory

SKIPS_SHOWN = 20


def _store_arg(p: argparse.ArgumentParser) -> None:
    store_arg(p)


def register(sub: Any) -> None:
    s = sub.add_parser("ingest", help="ingest documents (Markdown, HTML, PDF, text) and source files into a wing")
    _store_arg(s)
    s.add_argument("paths", nargs="+", metavar="PATH", help="files and folders (folders are walked, .gitignore honoured)")
    s.add_argument("--wing", required=True)
    s.add_argument("--room", default="")
    s.add_argument("--json", action="store_true",
                   help='print {"added", "updated", "unchanged", "removed", "chunks", "skipped", "seconds", "complete"} '
                        "(exit status 1 when every file was skipped)")

    s = sub.add_parser("index", help="index a workspace's code (incremental; --watch keeps it fresh); 'index status'")
    _store_arg(s)
    s.add_argument("workspace", metavar="WORKSPACE", help="the folder to index, or 'status' for the index's state")
    s.add_argument("--wing", help="the wing the code goes into (required unless 'status', where it picks one index)")
    s.add_argument("--room", default="")
    s.add_argument("--watch", action="store_true", help="keep re-indexing saved files until interrupted")
    s.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                   help="stop reading and embedding after this long (the next run goes on from there; the first "
                        "file that needs indexing is always finished, so every run gets further); "
                        "default: none, 60 with --watch")
    s.add_argument("--rescan", type=float, default=300.0, metavar="SECONDS", help="--watch: full rescan period (300)")
    s.add_argument("--json", action="store_true",
                   help="print the summary (or the status) as JSON; with --watch a line per run, each after the "
                        'first with "run": "changes" or "rescan" and the files that run looked at (its "skipped" '
                        "lists only those)")


class _Bar:
    """A progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, label: str, total: int | None) -> None:
        self.label, self.total, self.last = label, total, 0.0

    def __call__(self, event: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - self.last < 0.1:
            return
        self.last = now
        files, chunks = event.get("files", 0), event.get("chunks")
        if self.total:
            filled = int(30 * min(files, self.total) / self.total)
            head = f"[{'#' * filled}{'.' * (30 - filled)}] {files}/{self.total} files"
        else:
            head = f"{files} files"
        tail = f" · {chunks} chunks written" if chunks is not None else ""
        print(f"\r{self.label}: {head}{tail}\033[K", end="", file=progress_stream(), flush=True)

    def done(self) -> None:
        print("\r\033[K", end="", file=progress_stream(), flush=True)


def _progress(label: str, targets: list[Any]) -> _Bar | None:
    if not sys.stderr.isatty():
        return None
    from memlens.ingest.walker import count_files

    return _Bar(label, sum(count_files(t.path) if t.is_dir else 1 for t in targets))


def _print_summary(verb: str, out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(out, ensure_ascii=False))
        return
    print(f"{verb}: {out['added']} added, {out['updated']} updated, {out['unchanged']} unchanged, {out['removed']} removed, "
          f"{out['chunks']} chunks written, {len(out['skipped'])} skipped in {out['seconds']:.2f} s"
          + ("" if out["complete"] else "; stopped at the deadline, the next run goes on from there"))
    for s in out["skipped"][:SKIPS_SHOWN]:
        print(f"  skipped {s['path']}: {s['reason']}", file=sys.stderr)
    if len(out["skipped"]) > SKIPS_SHOWN:
        print(f"  … and {len(out['skipped']) - SKIPS_SHOWN} more (--json lists every skip)", file=sys.stderr)


def cmd_ingest(args: argparse.Namespace) -> int:
    from memlens.cli.common import open_store as _open
    from memlens.ingest import pipeline
    from memlens.sigterm import terminate_as_exit

    wing = pipeline.check_name("--wing", args.wing, True)
    room = pipeline.check_name("--room", args.room, False)
    targets = pipeline.resolve_targets(args.paths)  # before the store opens: a bad path leaves nothing behind
    bar = _progress("ingest", targets)
    from memlens.ingest import ingest

    with terminate_as_exit(), _open(args, create=True) as mem:
        try:
            out = ingest(mem, [t.path for t in targets], wing=wing, room=room, progress=bar)
        finally:
            if bar:
                bar.done()
    _print_summary("ingest", out, args.json)
    if out["skipped"] and not (out["added"] or out["updated"] or out["unchanged"]):
        print("memlens: nothing ingested: every file was skipped", file=sys.stderr)
        return 1
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    if args.workspace == "status":
        return _status(args)
    from memlens.cli.common import open_store as _open
    from memlens.ingest import pipeline
    from memlens.sigterm import terminate_as_exit

    if not args.wing:
        raise ValidationError("index needs --wing W (the wing the code goes into)")
    wing = pipeline.check_name("--wing", args.wing, True)
    room = pipeline.check_name("--room", args.room, False)
    if args.deadline is not None and not 0 < args.deadline <= 86400:
        raise ValidationError(f"--deadline must be more than 0 and at most 86400 seconds, got {args.deadline:g}")
    if not 1 <= args.rescan <= 86400:
        raise ValidationError(f"--rescan must be from 1 to 86400 seconds, got {args.rescan}")
    target = pipeline.resolve_targets([args.workspace], want_dir=True)[0]
    bar = _progress("index", [target])
    from memlens.ingest import index

    with terminate_as_exit(), _open(args, create=True) as mem:
        try:
            out = index(mem, target.path, wing=wing, room=room, progress=bar, deadline_s=args.deadline)
        finally:
            if bar:
                bar.done()
        _print_summary("index", out, args.json)
        if args.watch:
            return _watch(mem, target.path, wing, room, args)
    return 0


def _watch(mem: Memory, root: str, wing: str, room: str, args: argparse.Namespace) -> int:
    from memlens.ingest.watch import Watcher

    def on_run(kind: str, out: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps({"run": kind, **out}, ensure_ascii=False), flush=True)
        elif out["added"] or out["updated"] or out["removed"]:
            print(f"{time.strftime('%H:%M:%S')} {kind}: {out['added']} added, {out['updated']} updated, "
                  f"{out['removed']} removed, {out['chunks']} chunks in {out['seconds']:.2f} s", flush=True)

    def on_error(exc: BaseException) -> None:
        print(f"memlens: warning: index run failed: {exc}", file=sys.stderr, flush=True)

    print(f"watching {root} (Ctrl-C stops)", file=sys.stderr, flush=True)
    watcher = Watcher(mem, root, wing, room, rescan_s=args.rescan, deadline_s=args.deadline or 60.0, on_run=on_run,
                      on_error=on_error).start()
    try:
        while True:
            time.sleep(0.5)
    finally:
        watcher.stop()


def _status(args: argparse.Namespace) -> int:
    from memlens.cli.common import open_store as _open
    from memlens.ingest import index_status

    with _open(args) as mem:
        st = index_status(mem)
    if args.wing:  # one wing's index
        wings = [ix["wing"] for ix in st["indexes"]]
        if args.wing not in wings:
            raise ValidationError(f"no code index in wing {args.wing!r} (indexed wings: {', '.join(wings) or 'none'})")
        st["indexes"] = [ix for ix in st["indexes"] if ix["wing"] == args.wing]
    if args.json:
        print(json.dumps(st, ensure_ascii=False))
        return 0
    if not st["indexes"]:
        print("no code index in this store (memlens index WORKSPACE --wing W makes one)")
        return 0
    for ix in st["indexes"]:
        print(f"{ix['wing']:<20} {ix['workspace']}")
        print(f"  {ix['files']} files, {ix['chunks']} chunks, indexed at {ix['indexed_at']}, "
              f"stale {ix['stale_files']} ({ix['stale_ratio']:.1%})")
        lr = ix["last_run"]
        if lr:
            print(f"  last run {lr['finished_at']} ({lr['status']}) in {lr['seconds']:.2f} s: {lr['added']} added, "
                  f"{lr['updated']} updated, {lr['unchanged']} unchanged, {lr['removed']} removed, "
                  f"{lr['skipped_count']} skipped")
    rate = "n/a" if st["code_hit_rate"] is None else f"{st['code_hit_rate']:.1%}"
    fb = "n/a" if st["fallback_rate"] is None else f"{st['fallback_rate']:.1%}"
    print(f"queue depth {st['queue_depth']} · code hit rate {rate} ({st['code_recalls']} recalls) · "
          f"fallback rate {fb} ({st['retrievals']} retrievals)")
    return 0

