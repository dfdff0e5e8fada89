"""``memlens tui`` and ``memlens mcp``: the long-running front ends, imported only by the command that starts one."""

from __future__ import annotations

import argparse
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
    s.add_argument("--host", default="127.0.0.1", help="HTTP: address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765; 0 picks a free one)")
    s.add_argument("--read-only", action="store_true", help="serve only the tools that read")


def cmd_mcp(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise MemlensError(f"--port must be 0..65535, got {args.port}")
    from memlens.mcp.server import serve  # imports no SDK yet: the stdio wire is protected first

    return serve(args.store, transport=args.transport, host=args.host, port=args.port, read_only=args.read_only)


def cmd_tui(args: argparse.Namespace) -> int:
    try:
        from memlens.tui.app import run_app  # outside the engine's type check (pyproject's [tool.mypy] overrides)
    except ImportError as exc:  # the engine works without the app's dependencies
        raise MemlensError(f"the terminal app needs textual ({exc}); pip install 'textual'") from None
    code: int = run_app(args.store, demo=getattr(args, "demo", False), active_wing=getattr(args, "active_wing", None))
    return code
