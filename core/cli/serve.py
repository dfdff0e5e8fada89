"""``memlens tui`` and ``memlens mcp``: the long-running front ends, imported only by the command that starts one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memlens.cli.common import store_arg
from memlens.errors import MemlensError


def register_tui(sub: Any) -> None:
    s = sub.add_parser("tui", help="open the terminal app")
    store_arg(s)
    s.add_argument("--demo", action="store_true", help="load the demo memory if the store is empty")
    s.add_argument("--active-wing", metavar="W", help="the wing the app starts in (default: the largest project wing)")


def register_mcp(sub: Any) -> None:
    s = sub.add_parser("mcp", help="serve this store to agents over the Model Context Protocol")
    store_arg(s)
    s.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or streamable HTTP")
    s.add_argument("--host", default=None, help="HTTP: address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="HTTP: port (default 8765; 0 picks a free one)")
    s.add_argument("--read-only", action="store_true", help="serve only the tools that read")
    tokens = s.add_subparsers(dest="mcp_command", metavar="[token]")
    t = tokens.add_parser("token", help="the HTTP server's bearer tokens: add, list, remove")
    actions = t.add_subparsers(dest="token_action", metavar="add|list|remove", required=True)
    add = actions.add_parser("add", help="make a token for NAME, print it once and add its digest to the token file")
    add.add_argument("name", metavar="NAME", help="who uses it: the audit names this client for its writes")
    add.add_argument("--read-only", action="store_true", dest="token_read_only", help="the token may only read")
    for action in (add, actions.add_parser("list", help="the tokens' names and rights (never the tokens)"),
                   actions.add_parser("remove", help="revoke the token named NAME")):
        if action.prog.endswith("remove"):
            action.add_argument("name", metavar="NAME")
        action.add_argument("--file", type=Path, metavar="PATH",
                            help="the token file (default: [mcp] tokens_file, else mcp-tokens beside config.toml)")


def cmd_token(args: argparse.Namespace) -> int:
    """``memlens mcp token add|list|remove``: the token is printed on stdout once and kept nowhere."""
    from memlens.config import load_settings
    from memlens.mcp import tokens

    path = args.file or load_settings().mcp.tokens_file or tokens.default_file()
    if args.token_action == "add":
        token = tokens.add(path, args.name, read_only=args.token_read_only)
        rights = "read-only" if args.token_read_only else "read-write"
        print(token, flush=True)
        print(f"memlens: added {rights} token {args.name!r} to {path}; it is shown only this once: give it to that "
              f"client as 'Authorization: Bearer TOKEN'", file=sys.stderr)
    elif args.token_action == "remove":
        tokens.remove(path, args.name)
        print(f"memlens: removed token {args.name!r} from {path}; a running server refuses it from its next request",
              file=sys.stderr)
    else:
        if not path.exists():
            print(f"memlens: no token file at {path}: no tokens yet (memlens mcp token add NAME makes one)",
                  file=sys.stderr)
        for entry in tokens.read_file(path) if path.exists() else []:
            print(f"{entry.name}\t{'read-only' if entry.read_only else 'read-write'}")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    if getattr(args, "mcp_command", None) == "token":
        return cmd_token(args)
    if args.transport == "stdio" and (args.host is not None or args.port is not None):
        raise MemlensError("--host and --port are for --transport http; over stdio the client starts the server")
    host = "127.0.0.1" if args.host is None else args.host
    port = 8765 if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise MemlensError(f"--port must be 0..65535, got {port}")
    from memlens.mcp.server import serve  # imports no SDK yet: the stdio wire is protected first

    return serve(args.store, transport=args.transport, host=host, port=port, read_only=args.read_only)


def cmd_tui(args: argparse.Namespace) -> int:
    try:
        from memlens.tui.app import run_app  # outside the engine's type check (pyproject's [tool.mypy] overrides)
    except ImportError as exc:  # the engine works without the app's dependencies
        raise MemlensError(f"the terminal app needs textual ({exc}); pip install 'textual'") from None
    code: int = run_app(args.store, demo=getattr(args, "demo", False), active_wing=getattr(args, "active_wing", None))
    return code
