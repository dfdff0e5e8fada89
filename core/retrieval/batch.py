"""``memlens search --queries FILE.jsonl``: many searches, one JSON object a line in and out.

The batch is all or nothing for input problems. Every line is checked before
the first search runs: its fields (types and ranges, by ``BatchQuery``) and
then its query against the store (syntax, wings, rooms, profile, k, budget).
Each line's id is its own (a line without one is answered under its line
number), as ``import`` refuses an id used twice.
The first bad line stops the batch with ``FILE: line N: field: problem``, exit
status 2, and nothing on stdout; a batch that passes prints one result line per
query line, in order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from pydantic import ValidationError as PydanticError

from memlens.errors import MemlensError, ValidationError
from memlens.limits import MAX_BUDGET, MAX_K, MAX_QUERY_CHARS
from memlens.retrieval.plan import Planning

if TYPE_CHECKING:
    from memlens.trace import Bundle

FIELDS = ("id", "query", "active_wing", "wings", "k", "profile", "budget")


class BatchQuery(BaseModel):
    """One line of a ``--queries`` file. Absent fields take the command line's values."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: StrictStr | StrictInt | None = None
    query: StrictStr = Field(max_length=MAX_QUERY_CHARS)
    active_wing: StrictStr | None = None
    wings: list[StrictStr] | None = Field(None, max_length=1000)
    k: StrictInt | None = Field(None, ge=1, le=MAX_K)
    profile: StrictStr | None = None
    budget: StrictInt | None = Field(None, ge=1, le=MAX_BUDGET)


def describe(exc: PydanticError) -> str:
    """``field: problem`` for the first error pydantic found."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "line"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = f"unknown field (fields: {', '.join(FIELDS)})"
    elif err["type"] == "missing":
        msg = "required (a string)"
    elif err["type"].startswith(("int_", "string_")) or err["type"] in ("list_type", "model_type"):
        got = err.get("input")
        shown = repr(got) if len(repr(got)) <= 40 else repr(got)[:37] + "..."
        msg = f"{msg}, got {shown}"
    return f"{loc}: {msg}"


def parse_lines(path: Path) -> list[tuple[int, BatchQuery]]:
    from memlens.retrieval.evaluate import read_json_lines, shown

    where = shown(path)
    jobs = []
    lines: dict[str, int] = {}  # each output id (JSON) -> the line that has it
    for n, obj in read_json_lines(path):
        if not isinstance(obj, dict):
            raise ValidationError(f"{where}: line {n}: expected a JSON object with a string 'query', got {type(obj).__name__}")
        try:
            q = BatchQuery.model_validate(obj)
        except PydanticError as exc:
            raise ValidationError(f"{where}: line {n}: {describe(exc)}") from None
        key = json.dumps(n if q.id is None else q.id)  # a line without an id is answered under its number
        if key in lines:
            said = (f"{q.id!r} already appears on line {lines[key]}" if q.id is not None
                    else f"none given, so it is answered as {n}, which line {lines[key]} already uses")
            raise ValidationError(f"{where}: line {n}: id: {said}")
        lines[key] = n
        jobs.append((n, q))
    return jobs


class Batch(Planning, Protocol):
    """What a batch asks of the engine (a ``Memory`` is one): a plan's parts (each line is checked first), the
    in-process index loaded once, and searches."""

    def warm_index(self) -> int: ...

    def search(self, query: str, **kw: Any) -> Bundle: ...


def run(mem: Batch, path: Path, jobs: list[tuple[int, BatchQuery]], defaults: dict[str, Any], out: Any = None) -> int:
    """Check every line of ``parse_lines(path)`` against the store, then run them all; returns the searches run."""
    from memlens.retrieval.evaluate import shown
    from memlens.retrieval.search import check

    where = shown(path)
    out = out or sys.stdout
    calls = []
    for n, q in jobs:
        kw = {f: getattr(q, f) if getattr(q, f) is not None else defaults.get(f) for f in FIELDS[2:]}
        try:
            check(mem, q.query, **kw)
        except MemlensError as exc:
            raise ValidationError(f"{where}: line {n}: {exc}") from None
        calls.append((n, q, kw))
    if len(calls) >= 20:
        mem.warm_index()  # ~1 s per 100k vectors, repaid after a few dozen searches
    for n, q, kw in calls:
        try:
            b = mem.search(q.query, **kw)
        except MemlensError as exc:  # the store changed under the batch
            raise MemlensError(f"{where}: line {n}: {exc}") from None
        out.write(json.dumps({"id": q.id if q.id is not None else n, **b.to_dict()}, ensure_ascii=False) + "\n")
    return len(calls)
