"""The ``memlens`` command: a thin layer over ``memlens.Memory``.

Each command group lives in its own module (``entries``, ``retrieve``, ``tasks``, ``check``, ``copy``,
``serve``, ``ask``, ``web``, ``ingest``, ``replay``, ``review``) and registers its sub-parsers here, in the order ``--help``
lists them. User errors print one line on stderr and exit 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable

from memlens.cli import ask as cli_ask
from memlens.cli import check as cli_check
from memlens.cli import copy as cli_copy
from memlens.cli import entries as cli_entries
from memlens.cli import ingest as cli_ingest
from memlens.cli import replay as cli_replay
from memlens.cli import retrieve as cli_retrieve
from memlens.cli import review as cli_review
from memlens.cli import serve as cli_serve
from memlens.cli import tasks as cli_tasks
from memlens.cli import web as cli_web
from memlens.cli.args import PROG, Parser, check_text_args, parse
from memlens.cli.common import store_arg
from memlens.cli.output import for_people
from memlens.errors import MemlensError
from memlens.limits import check_query


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Agent memory on one SQLite file (or a PostgreSQL database), "
                                      "with every retrieval explained.")
    store_arg(p, default=None)
    from memlens import __version__

    p.add_argument("--version", action="version", version=f"memlens {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    cli_serve.register_tui(sub)  # tui
    cli_entries.register_writes(sub)  # add, import, export
    cli_retrieve.register(sub)  # search, context, explain, eval, profiles
    cli_entries.register_stats(sub)  # stats, demo
    cli_tasks.register(sub)  # task complete|block|unblock, tasks [import-state]
    cli_serve.register_mcp(sub)  # mcp
    cli_check.register(sub)  # check, salvage
    cli_copy.register(sub)  # copy
    cli_ask.register(sub)  # ask
    cli_web.register(sub)  # web
    cli_ingest.register(sub)  # ingest, index [status]
    COMMANDS.update(cli_replay.register(sub))  # replay, golden, access, reembed, deprecate/restore/delete/edit
    COMMANDS.update(cli_review.register(sub))  # review [show|accept|reject|merge|undo], lint
    return p


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "tui": cli_serve.cmd_tui,
    "add": cli_entries.cmd_add,
    "import": cli_entries.cmd_import,
    "export": cli_entries.cmd_export,
    "search": cli_retrieve.cmd_search,
    "stats": cli_entries.cmd_stats,
    "context": cli_retrieve.cmd_context,
    "explain": cli_retrieve.cmd_explain,
    "eval": cli_retrieve.cmd_eval,
    "profiles": cli_retrieve.cmd_profiles,
    "demo": cli_entries.cmd_demo,
    "task": cli_tasks.cmd_task,
    "tasks": cli_tasks.cmd_tasks,
    "mcp": cli_serve.cmd_mcp,
    "check": cli_check.cmd_check,
    "salvage": cli_check.cmd_salvage,
    "copy": cli_copy.cmd_copy,
    "ask": cli_ask.cmd_ask,
    "web": cli_web.cmd_web,
    "ingest": cli_ingest.cmd_ingest,
    "index": cli_ingest.cmd_index,
}


def main(argv: list[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    handler = COMMANDS.get(args.command or "tui", cli_serve.cmd_tui)
    with for_people(args):  # what a person reads carries no terminal control sequence
        return _handle(args, handler)


def runs_once(args: argparse.Namespace) -> bool:
    """Whether the command runs once and ends: not the app, the MCP server or ``index --watch``, which keep their
    store open and meet a lost connection again on their next call."""
    return args.command not in (None, "tui", "mcp") and not (args.command == "index" and getattr(args, "watch", False))


def _handle(args: argparse.Namespace, handler: Callable[[argparse.Namespace], int]) -> int:
    from memlens.store.postgres.connect import one_shot

    try:
        if args.command != "mcp":  # the server warns once it has answered initialize (pydantic is heavy to import)
            _warn_stray_variables()
        check_text_args(args)
        if args.command in ("search", "context", "explain") and isinstance(getattr(args, "query", None), str):
            check_query(args.query)  # before the store opens
        if runs_once(args):
            with one_shot():  # a lost connection's message: run the command again (there is no next call)
                return handler(args)
        return handler(args)
    except MemlensError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        from memlens.sigterm import Terminated

        print(f"{PROG}: interrupted", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except BrokenPipeError:
        # `memlens export | head`: the reader left before the end. Silent, and the status a program stopped by
        # SIGPIPE has (128 + 13), not 0: the command did not finish, so a `check` or `lint` piped into `head` must
        # not pass a CI step as if its verdict were clean
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            raise
        # the output cannot be written (`export > file` on a full disk, /dev/full): one line, not a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere at exit
        print(f"{PROG}: error: cannot write the output: {exc.strerror}", file=sys.stderr)
        return 2


def _warn_stray_variables() -> None:
    """One line for each ``MEMLENS_*`` variable memlens does not read (a mistyped setting would otherwise be ignored
    without a word); one naming a table that does not exist is the settings' error when they load."""
    from memlens.config import Settings
    from memlens.config_source import stray_warnings

    for line in stray_warnings(Settings):
        print(f"{PROG}: {line}", file=sys.stderr)


_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EIO, getattr(errno, "EDQUOT", errno.ENOSPC)}


if __name__ == "__main__":
    sys.exit(main())
