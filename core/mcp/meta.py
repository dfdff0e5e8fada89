"""What the MCP server says about itself, importable before the SDK (stdlib only).

``initialize`` is answered from here while the SDK still imports (see
``memlens.mcp.stdio``); the server built on the SDK advertises the same
(``tests/test_mcp_stdio.py`` compares the two answers byte for byte).
"""

from __future__ import annotations

from typing import Any

SERVER_NAME = "memlens"

# the handshake-era protocol revisions the SDK negotiates (mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS)
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

INSTRUCTIONS = (
    "Long-term memory shared by your sessions and other agents. Before a task, call memory_context "
    "(or memory_search) with the task and your project as active_wing; invariants and decisions outrank "
    "patterns and notes. When you learn something durable, call memory_add (a repeated add is reported "
    "as already_exists). Record finished or blocked tasks with task_complete / task_block."
)

# capabilities of an MCPServer with tools, resources and prompts handlers (none listed but tools)
CAPABILITIES: dict[str, Any] = {
    "prompts": {"listChanged": False},
    "resources": {"subscribe": False, "listChanged": False},
    "tools": {"listChanged": False},
}

# what every write tool says about review (the server's [review] agent_writes, default under_review)
REVIEWED = ("Your writes wait for a person's review: an added, edited or reactivated entry is stored as under_review "
            "(still retrieved, flagged) until accepted, unless this server is set to store agents' writes as active.")

DESCRIPTIONS = {
    "memory_search": (
        "Search long-term memory. Returns ranked entries (id, wing, room, type, status, title, text, score, flags) "
        "and a trace (cache hit, latency per stage, dropped candidates). Give active_wing = your project so its "
        "entries rank first; the query may start with filters like 'type=invariant room=api'. Flags: "
        "under_review = possibly outdated, conflict = same rule or subject as a result of another wing, no override: "
        "review both. full_trace=true adds every score component."
    ),
    "memory_context": (
        "The markdown context to read before working on a task: your working memory (recent tasks, blockers) first, "
        "then retrieved memory in authority order (invariant > decision > pattern > note), budgeted to fit."
    ),
    "memory_add": (
        "Store one piece of durable knowledge in a wing (project). Idempotent: the same title and text in the same wing "
        "is stored once (status already_exists returns the stored id). 'similar' lists up to 3 near-duplicates with their "
        "cosine similarity: prefer memory_update on one of them over adding a variant. " + REVIEWED
    ),
    "memory_get": (
        "Read one entry by id: all fields, including updated_at (pass it to memory_update to avoid overwriting others' edits)."
    ),
    "memory_update": (
        "Change fields of an entry (only the fields you give). Pass expected_updated_at = the updated_at you read: "
        "if someone changed the entry since, the update is refused and nothing is overwritten. dry_run=true writes "
        "nothing and returns the impact: golden queries that would fail, recent queries whose results would change. "
        + REVIEWED
    ),
    "memory_set_status": (
        "Deprecate an outdated entry (no longer retrieved), mark it under_review, or reactivate it. " + REVIEWED
    ),
    "memory_delete": (
        "Delete an entry permanently (its last version stays in the audit log). Prefer deprecating. A person reviews "
        "every deletion and can restore the entry."
    ),
    "memory_explain": (
        "Why was entry id returned for query, or at which stage was it dropped (scope, status, threshold, override, budget...)?"
    ),
    "memory_wings": "List wings (projects) with their rooms and entry counts, to choose active_wing or a wing for memory_add.",
    "task_complete": (
        "Record that a task finished (success or failure) with its intent; it appears in working memory and resolves its blocker."
    ),
    "task_block": "Mark a task blocked with the reason; it stays in working memory until task_unblock or task_complete.",
    "task_unblock": "Resolve the active blocker of a task (when the reason it was blocked no longer holds).",
    "working_memory": "Recent completed tasks and active blockers: {tasks, blockers, markdown}.",
}


def negotiate(requested: Any) -> str:
    """The protocol revision answered for a client's requested one (the SDK's rule)."""
    return requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]


def initialize_result(requested: Any, version: str) -> dict[str, Any]:
    """The ``initialize`` result, as the SDK-built server serialises it."""
    return {
        "protocolVersion": negotiate(requested),
        "capabilities": CAPABILITIES,
        "serverInfo": {"name": SERVER_NAME, "version": version},
        "instructions": INSTRUCTIONS,
    }
