"""The MCP tools: thin adapters from tool calls to ``memlens.Memory``.

Each tool validates its arguments through its signature (the SDK derives the
JSON schema from it), runs in a worker thread, and turns a ``MemlensError``
into a tool error with the engine's one-line message. Writes are attributed
to the calling client (``memlens.attribution``): its audit rows name it.

The engine opens in the background (``Engine.start``): the store first, then
the model, then the in-process vector index. A tool that needs the model
waits for it; the wait shows in the result's trace as ``model_wait_ms``.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from memlens import attribution
from memlens.errors import MemlensError, ValidationError
from memlens.mcp.engine import Engine as Engine  # (the engine was defined here: its name stays importable)

if TYPE_CHECKING:
    from memlens.memory import Memory

F = TypeVar("F", bound=Callable[..., Any])  # a tool function, returned as it came

TypeName = Literal["invariant", "decision", "pattern", "note"]
KindName = Literal["turn", "fact", "entity", "procedure", "document", "code", "web"]
StatusName = Literal["active", "under_review", "deprecated"]
OutcomeName = Literal["success", "failure"]

READ_TOOLS = ("memory_search", "memory_context", "memory_get", "memory_explain", "memory_wings", "working_memory")
WRITE_TOOLS = ("memory_add", "memory_update", "memory_set_status", "memory_delete", "task_complete", "task_block",
               "task_unblock")
UNNAMED = {"name": "unnamed client", "via": "mcp"}


def landed(mem: "Memory", status: str | None) -> str | None:
    """The status an agent's write leaves the entry in (``[review] agent_writes``, ``memlens.review.desk``)."""
    from memlens.review.desk import agent_status

    return agent_status(status, mem.settings.review.agent_writes)


def stored_differs(entry: Any, asked: dict[str, Any]) -> str | None:
    """What an agent adding content already stored should know: the stored entry is deprecated (search does not
    return it), or its fields are not those asked for (an add never edits: memory_update does)."""
    said = []
    if entry.status.value == "deprecated":
        said.append("the stored entry is deprecated: search does not return it (memory_set_status makes it active)")
    record = entry.to_record()
    other = [f for f, v in asked.items() if v not in (None, "") and record.get(f) != v]
    if other:
        said.append(f"it keeps its own {', '.join(other)} (memory_update changes them)")
    return "; ".join(said) or None


def client_of(ctx: Context | None) -> dict[str, str] | None:
    """The client: the bearer token's name when the call came with one (what the client says about itself is
    kept as ``agent``), else the client as named in its ``initialize`` (or request envelope)."""
    from memlens.mcp.auth import token_of

    try:
        params = ctx.session.client_params if ctx is not None else None
        info = params.client_info if params is not None else None
    except Exception:
        info = None
    said = attribution.client_record(getattr(info, "name", None), getattr(info, "version", None), via="mcp")
    token = token_of(ctx)
    if token is None:
        return said
    record = attribution.client_record(token[0], via="mcp token")
    if record is not None and said is not None:
        record["agent"] = " ".join(said[k] for k in ("name", "version") if k in said)
    return record


def asking(ctx: Context | None) -> str | None:
    """The client as the retrieval log names it (``claude-code 1.2 (mcp)``); None when it named none."""
    return attribution.describe(client_of(ctx)) or None


def compact(result: Any, full: bool) -> dict[str, Any]:
    e = result.entry
    out = {"id": e.id, "wing": e.wing, "room": e.room, "kind": e.kind.value, "type": e.type.value,
           "status": e.status.value, "title": e.title, "text": result.summary or e.text, "score": round(result.score, 4),
           "rank": result.rank, "flags": result.flags}
    for name in ("conflicts_with", "hides"):
        if getattr(result, name):
            out[name] = getattr(result, name)
    if full:
        out["components"] = result.components.model_dump()
    return out


def trace_summary(trace: Any, waited_ms: float) -> dict[str, Any]:
    return {"query": trace.query, "active_wing": trace.active_wing, "profile": trace.profile,
            "wings_searched": trace.wings_searched, "cache_hit": trace.cache_hit, "latency_ms": trace.latency_ms,
            "dropped": len(trace.dropped), "counts": trace.counts, "degraded": trace.degraded, "notes": trace.notes,
            "model_wait_ms": round(waited_ms, 1)}


def _strict(server: MCPServer, name: str) -> None:
    """Arguments of tool ``name`` taken as their declared JSON types only: ``k: true`` or ``k: "5"`` and
    ``full_trace: "yes"`` are refused, where pydantic's default (lax) mode would turn them into 1, 5 and True.
    (An array or object sent as a JSON string is still read as one: the SDK does that before validation.) An
    argument the tool does not have is refused too, as import and the API refuse an unknown field, rather than
    dropped unseen (a misspelt ``sailence`` would store the default)."""
    tool = server._tool_manager.get_tool(name)  # the SDK builds the argument model; it has no public hook for its mode
    assert tool is not None
    model = tool.fn_metadata.arg_model
    model.model_config = {**model.model_config, "strict": True, "extra": "forbid"}
    model.model_rebuild(force=True)


def register(server: MCPServer, engine: Engine, *, read_only: bool = False) -> list[str]:
    """Add the tools to ``server`` (only the read tools when ``read_only``); returns their names."""
    from memlens.mcp.meta import DESCRIPTIONS

    names: list[str] = []

    def call(ctx: Context | None, fn: Callable[[Any, float], Any], need_model: bool = False) -> Any:
        # every write names its client: one that did not name itself is still an agent, its writes still reviewed
        with attribution.acting_as(client_of(ctx) or UNNAMED):
            try:
                mem, waited = engine.memory(need_model)
                return fn(mem, waited)
            except MemlensError as exc:
                raise ToolError(str(exc)) from None

    def record(ctx: Context | None, fn: Callable[[Any, float], Any], need_model: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = call(ctx, fn, need_model)  # a tool's JSON object
        return out

    def tool(name: str, title: str, *, read: bool, destructive: bool = False, idempotent: bool = True,
             structured: bool = True) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            if read_only and not read:
                return fn
            hints = ToolAnnotations(title=title, read_only_hint=read, destructive_hint=False if read else destructive,
                                    idempotent_hint=idempotent, open_world_hint=False)
            server.add_tool(fn, name=name, title=title, description=DESCRIPTIONS[name], annotations=hints,
                            structured_output=structured)
            _strict(server, name)
            names.append(name)
            return fn
        return deco

    Id = Annotated[str, Field(description="the entry id, as returned by memory_search or memory_add", min_length=1)]
    Wing = Annotated[str, Field(description="a project name (letters, digits, _ . -); '_global' holds cross-project knowledge")]

    @tool("memory_search", "Search memory", read=True)
    def memory_search(
        query: Annotated[
            str, Field(description="what to look for; may start with filters: wing=W room=R type=T kind=K status=S")
        ],
        active_wing: Annotated[str | None, Field(description="the project you are working in: its entries rank higher")] = None,
        wings: Annotated[
            list[str] | None,
            Field(description="search only these wings (default: the active wing and _global; all wings without an active wing)"),
        ] = None,
        k: Annotated[int | None, Field(ge=1, le=100, description="results to return (default 10)")] = None,
        profile: Annotated[
            str, Field(description="retrieval profile, e.g. memory (default), academic, personal, conversation")
        ] = "memory",
        budget: Annotated[int | None, Field(ge=1, description="token budget for the results' text")] = None,
        full_trace: Annotated[bool, Field(description="also return every score component and the full trace")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        def run(mem: "Memory", waited: float) -> dict[str, Any]:
            b = mem.search(query, active_wing=active_wing, wings=wings, k=k, profile=profile, budget=budget,
                           client=asking(ctx))
            out = {"results": [compact(r, full_trace) for r in b.results], "trace": trace_summary(b.trace, waited)}
            if full_trace:
                out["full_trace"] = b.trace.model_dump(mode="json")
            return out
        return record(ctx, run, need_model=True)

    @tool("memory_context", "Memory context for a task", read=True, structured=False)
    def memory_context(
        query: Annotated[str, Field(description="the task or question you need context for")],
        active_wing: Annotated[str, Field(description="the project you are working in")],
        budget: Annotated[int | None, Field(ge=1, description="token budget for the whole context")] = None,
        ctx: Context | None = None,
    ) -> str:
        text: str = call(ctx, lambda mem, _w: mem.context(query, active_wing=active_wing, budget=budget, client=asking(ctx)),
                         need_model=True)
        return text

    @tool("memory_add", "Remember something", read=False, destructive=False, idempotent=True)
    def memory_add(
        text: Annotated[str, Field(description="the knowledge itself, self-contained", min_length=1)],
        wing: Wing,
        room: Annotated[str, Field(description="a topic inside the wing, e.g. architecture")] = "",
        type: Annotated[TypeName, Field(description="authority: invariant > decision > pattern > note")] = "note",
        kind: Annotated[KindName, Field(description="what it is")] = "fact",
        title: Annotated[str, Field(description="short title (default: the start of the text)")] = "",
        key: Annotated[str | None, Field(description="a stable key: entries with one key describe one thing")] = None,
        status: Annotated[StatusName, Field(
            description="active unless you are unsure (under_review); the server may keep it under_review until a "
                        "person accepts it")] = "active",
        salience: Annotated[float, Field(ge=0.0, le=1.0, description="importance 0..1")] = 0.5,
        overrides: Annotated[str | None, Field(description="id of an entry this one replaces")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        def run(mem: "Memory", _w: float) -> dict[str, Any]:
            if kind == "web":  # web text arrives with its source, fetched by memlens itself: never typed in by an agent
                raise ValidationError("kind: web is for text saved from the web with its source (memlens web --save); "
                                      "store what you learned as a fact, or a document")
            entry, created, similar = mem.add_unique(
                text, wing=wing, room=room, type=type, kind=kind, title=title, key=key, salience=salience,
                status=landed(mem, status), overrides=overrides)
            out = {"id": entry.id, "status": "created" if created else "already_exists", "wing": entry.wing,
                   "updated_at": entry.to_record()["updated_at"], "similar": similar}
            if not created:
                note = stored_differs(entry, {"type": type, "kind": kind, "room": room, "key": key,
                                              "overrides": overrides})
                if note:
                    out["note"] = note
            return out
        return record(ctx, run, need_model=True)

    @tool("memory_get", "Read one entry", read=True)
    def memory_get(id: Id, ctx: Context | None = None) -> dict[str, Any]:
        return record(ctx, lambda mem, _w: mem.get(id).to_record())

    DryRun = Annotated[bool, Field(description="only preview the change: the golden queries that would fail and the "
                                               "recent queries whose results would change; nothing is written")]

    def preview(change: Any) -> Any:
        from memlens.replay.impact import preview as impact_preview

        return lambda mem, _w: impact_preview(mem, change)

    @tool("memory_update", "Edit an entry", read=False, destructive=True, idempotent=True)
    def memory_update(
        id: Id,
        text: Annotated[str | None, Field(description="new text (re-embedded)")] = None,
        title: Annotated[str | None, Field(description="new title")] = None,
        wing: Annotated[str | None, Field(description="move to this wing")] = None,
        room: Annotated[str | None, Field(description="new room ('' for none)")] = None,
        type: Annotated[TypeName | None, Field(description="new authority type")] = None,
        kind: Annotated[KindName | None, Field(description="new kind")] = None,
        status: Annotated[StatusName | None, Field(description="new status")] = None,
        key: Annotated[str | None, Field(description="new key ('' clears it)")] = None,
        salience: Annotated[float | None, Field(ge=0.0, le=1.0, description="new importance")] = None,
        overrides: Annotated[str | None, Field(description="id of an entry this one replaces ('' clears it)")] = None,
        expected_updated_at: Annotated[str | None, Field(
            description="the updated_at you read: the update is refused if the entry changed since")] = None,
        dry_run: DryRun = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        fields = {"text": text, "title": title, "wing": wing, "room": room, "type": type, "kind": kind,
                  "status": status, "key": key, "salience": salience, "overrides": overrides}
        changes = {k: v for k, v in fields.items() if v is not None}
        if not changes:
            raise ToolError("nothing to change: give at least one field (text, title, wing, room, type, ...)")

        def edit(m: Any) -> Any:  # an agent's edit waits for review too, when it changes anything
            return m.update_checked(id, expected_updated_at, landing=landed(m, status), **changes)

        if dry_run:  # the update runs (and is checked) as it would, in a transaction that is rolled back
            return record(ctx, preview(edit), need_model=True)
        return record(ctx, lambda mem, _w: edit(mem).to_record(), need_model="text" in changes or "title" in changes)

    @tool("memory_set_status", "Set an entry's status", read=False, destructive=True, idempotent=True)
    def memory_set_status(id: Id, status: Annotated[StatusName, Field(
            description="active, under_review (still retrieved, flagged) or deprecated (no longer retrieved)")],
            dry_run: DryRun = False, ctx: Context | None = None) -> dict[str, Any]:
        def change(m: Any) -> Any:  # a status the entry already has changes nothing
            return m.update(id, status=status, landing=landed(m, status))

        def run(mem: "Memory", _w: float) -> dict[str, Any]:
            out: dict[str, Any] = change(mem).to_record()
            if out["status"] != status:  # (an agent's write waits for review: ``[review] agent_writes``)
                out["note"] = f"the entry is {out['status']}, not {status}: an agent's write waits for a person's review"
            return out

        if dry_run:
            return record(ctx, preview(change), need_model=True)
        return record(ctx, run)

    @tool("memory_delete", "Delete an entry", read=False, destructive=True, idempotent=True)
    def memory_delete(id: Id, dry_run: DryRun = False, ctx: Context | None = None) -> dict[str, Any]:
        def run(mem: "Memory", _w: float) -> dict[str, Any]:
            e = mem.delete(id)
            return {"id": e.id, "deleted": True, "wing": e.wing, "title": e.title}
        return record(ctx, preview(lambda m: m.delete(id)) if dry_run else run, need_model=dry_run)

    @tool("memory_explain", "Why (not) this entry?", read=True)
    def memory_explain(
        query: Annotated[str, Field(description="the query you searched with")],
        id: Id,
        active_wing: Annotated[str | None, Field(description="the active wing of that search")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return record(ctx, lambda mem, _w: mem.explain(query, id, active_wing=active_wing, client=asking(ctx)),
                      need_model=True)

    @tool("memory_wings", "List wings and rooms", read=True)
    def memory_wings(ctx: Context | None = None) -> dict[str, Any]:
        def run(mem: "Memory", _w: float) -> dict[str, Any]:
            wings = mem.wing_counts()
            return {"entries": sum(w["entries"] for w in wings), "wings": wings}
        return record(ctx, run)

    TaskId = Annotated[str, Field(description="your task's id", min_length=1)]

    @tool("task_complete", "Record a finished task", read=False, destructive=False, idempotent=True)
    def task_complete(
        task_id: TaskId,
        intent: Annotated[str, Field(description="what the task set out to do, in one sentence")],
        outcome: Annotated[OutcomeName, Field(description="success or failure")] = "success",
        report: Annotated[dict[str, Any] | None, Field(description="validation report, e.g. {'tests': 'passed'}")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        if not intent.strip():  # the engine's own message offers requires_context=false, which this tool does not take
            raise ToolError("an intent is required: what the task set out to do, in one sentence")
        return record(ctx, lambda mem, _w: mem.tasks.complete(task_id, intent, outcome=outcome,
                                                            validation_report=report).to_record())

    @tool("task_block", "Mark a task blocked", read=False, destructive=False, idempotent=False)
    def task_block(task_id: TaskId, reason: Annotated[str, Field(description="why the task cannot proceed")],
                   ctx: Context | None = None) -> dict[str, Any]:
        return record(ctx, lambda mem, _w: mem.tasks.block(task_id, reason).to_record())

    @tool("task_unblock", "Resolve a task's blocker", read=False, destructive=False, idempotent=False)
    def task_unblock(task_id: TaskId, ctx: Context | None = None) -> dict[str, Any]:
        return record(ctx, lambda mem, _w: mem.tasks.unblock(task_id).to_record())

    @tool("working_memory", "Recent tasks and blockers", read=True)
    def working_memory(ctx: Context | None = None) -> dict[str, Any]:
        return record(ctx, lambda mem, _w: mem.tasks.window().to_dict())

    return names
