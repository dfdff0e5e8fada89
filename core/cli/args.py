"""Command-line arguments at the boundary: numbers in range, text in UTF-8, one-line errors.

argparse's own errors (a usage block, then the message) become one line on
stderr with exit status 2, like every other user error of ``memlens``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from memlens.errors import ValidationError
from memlens.limits import MAX_BUDGET, MAX_K, check_int

PROG = "memlens"


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's error convention: one line on stderr, exit status 2."""

    _seen: list[str] = []  # the arguments this parser was given (its own, for a subcommand's)

    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {message}{self._dash_hint(message)} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)

    def _dash_hint(self, message: str) -> str:
        """An entry id may start with '-' (``-dash``), which argparse reads as an unknown option, then says an ID is
        missing: say where the id went."""
        if not message.startswith("the following arguments are required"):
            return ""
        for arg in self._seen:
            if arg == "--":
                break
            if (arg.startswith("-") and arg != "-" and arg.split("=", 1)[0] not in self._option_string_actions
                    and not self._negative_number_matcher.match(arg)):
                return f"; {arg!r} was read as an option: an ID that starts with '-' goes after --, as in {self.prog} -- {arg}"
        return ""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, noting in the namespace the innermost (sub)command's parser that parsed it (``parse``)."""
        self._seen = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, "_parser"):  # a subcommand's parser returns first: it is kept
            parsed._parser = self
        return parsed, extras


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, with arguments no parser knows reported against the subcommand they followed: its
    help lists what it takes (argparse names the top-level command)."""
    parsed, extras = parser.parse_known_args(argv)
    innermost = vars(parsed).pop("_parser", parser)
    if extras:
        innermost.error(f"unrecognized arguments: {' '.join(extras)}")
    return parsed


def _bounded(lo: int, hi: int, unit: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number inside ``lo..hi`` (the range is in the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number from {lo} to {hi}, not {text[:40]!r}") from None
        try:
            return check_int("value", value, lo, hi, unit=unit)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value ")) from None

    parse.__name__ = "whole number"
    return parse


def unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, not {text[:40]!r}")
    return value


K_ARG = _bounded(1, MAX_K)
BUDGET_ARG = _bounded(1, MAX_BUDGET, "tokens")



# Arguments that name files: any bytes the file system allows. Every other string is text
# that is stored, matched or printed, so it must be valid UTF-8.
PATH_ARGS = frozenset({"store", "file", "queries", "qrels", "workspace", "report", "paths"})
_ARG_NAMES = {"text": "TEXT", "query": "QUERY", "task_id": "ID", "entry_id": "--id", "wings": "--wing", "changes": "FIELD=VALUE"}


def check_text_args(args: argparse.Namespace) -> None:
    """Refuse an argument that is not valid UTF-8 (Python hands it over with lone surrogates)."""
    for dest, value in vars(args).items():
        if dest in PATH_ARGS:
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as exc:
                    bad = v[exc.start].encode("utf-8", "surrogateescape")
                    name = _ARG_NAMES.get(dest) or "--" + dest.replace("_", "-")
                    raise ValidationError(
                        f"{name} is not valid UTF-8 (byte 0x{bad.hex()} at character {exc.start + 1}); "
                        "pass text in UTF-8 (check the terminal's locale)"
                    ) from None
