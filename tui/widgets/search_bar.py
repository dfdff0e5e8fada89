"""The scoped-query input: completion for keys and the store's real values, inline errors."""

from __future__ import annotations

from rich.cells import cell_len
from textual.binding import Binding
from textual.suggester import Suggester

from memlens.errors import QueryError
from memlens.retrieval.query import KEYS, ScopeError, check_known, parse
from memlens.vocab import KINDS, STATUSES, TYPES

from .ordered import OrderedInput


class ScopeSuggester(Suggester):
    """Completes the last word: a key (``wi`` → ``wing=``) or a value (``wing=lif`` → ``wing=lifecore_ros2``)."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.values: dict[str, list[str]] = {"kind": list(KINDS), "type": list(TYPES), "status": list(STATUSES),
                                             "wing": [], "room": []}

    async def get_suggestion(self, value: str) -> str | None:
        if not value or value.endswith(" "):
            return None
        head, _, word = value.rpartition(" ")
        prefix = head + " " if head else ""
        if "=" not in word:
            for key in KEYS:
                if key.startswith(word) and key != word:
                    return prefix + key + "="
            return None
        key, _, typed = word.partition("=")
        chosen, _, last = typed.rpartition("|")
        for v in self.values.get(key, []):
            if v.startswith(last) and v != last:
                return prefix + f"{key}={chosen + '|' if chosen else ''}{v}"
        return None


class ScopeInput(OrderedInput):
    """The query box: Tab accepts the completion shown in grey (→ does too); with none shown, Tab moves on."""

    BINDINGS = [Binding("tab", "complete", "Complete", show=False, id="search.complete",
                        tooltip="Accept the completion shown in grey")]

    def action_complete(self) -> None:
        if self._suggestion and self.cursor_at_end:
            self.action_cursor_right()
        else:
            self.screen.focus_next()


def check(query: str, wings: list[str], rooms: list[str]) -> ScopeError | None:
    """The error a query would raise, located for inline display; None if it is fine."""
    try:
        parsed = parse(query)
        if wings:
            check_known(parsed, "wing", wings)
        if rooms:
            check_known(parsed, "room", rooms)
    except ScopeError as exc:
        return exc
    except QueryError as exc:  # the query as a whole: too long, or not valid UTF-8
        return ScopeError(str(exc), "", 0, 0)
    return None


def caret_line(error: ScopeError, query: str = "", indent: int = 0) -> str:
    """``    ^^^^^ message`` under the offending token of ``query`` (the text checked): ``indent`` cells, where the
    query's first character is drawn, then the token's place and width in terminal cells (a CJK character or an
    emoji takes two, where ``start``/``end`` count characters)."""
    start = cell_len(query[: error.start]) if query else error.start
    width = cell_len(query[error.start:error.end]) if query else error.end - error.start
    return " " * max(0, indent + start) + "^" * max(1, width) + " " + str(error)
