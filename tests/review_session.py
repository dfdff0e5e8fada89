"""A scripted agent session on the demo memory: the 20 writes the review tests check the inbox against.

3 near-duplicates of existing entries (an entry copied with a sentence added, with a clause left out, with
one word changed), 2 decisions that contradict decisions of the shared wing ``ros2`` without keys (one
written in the project wing, one in ``ros2`` itself), an edit of an invariant, a deletion and 13 plain
additions (one of them overriding the first near-duplicate). ``run_mcp`` makes them through the MCP
tools (an SDK client), ``run_in_process`` through the engine as the same client would (the app tests:
fixed ids, no server).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .conftest import DEMO

AGENT = {"name": "session-agent", "version": "0.9", "via": "mcp"}
DESCRIBED = "session-agent 0.9 (mcp)"


def demo_entry(entry_id: str) -> dict[str, Any]:
    for line in DEMO.read_text(encoding="utf-8").splitlines():
        if line.strip() and json.loads(line)["id"] == entry_id:
            return dict(json.loads(line))
    raise KeyError(entry_id)


@dataclass
class Write:
    tool: str  # memory_add, memory_update, memory_delete
    role: str  # duplicate, contradiction, invariant_edit, deletion, plain
    args: dict[str, Any]
    name: str  # the id it gets in process (an MCP add gets a generated one)
    target: str | None = None  # the existing entry it duplicates or contradicts, or the one it edits or deletes
    expect: set[str] = field(default_factory=set)  # evidence kinds against it the inbox must show


def writes() -> list[Write]:
    naming, mypy, deadlock = demo_entry("ros2-conv-007"), demo_entry("py-conv-003"), demo_entry("lc-arch-004")
    out = [
        Write("memory_add", "duplicate", {"wing": "ros2", "room": "conventions", "type": "note", "title": naming["title"],
                                          "text": naming["text"] + " Confirmed again while setting up the arm_driver package."},
              "agent-dup-1", "ros2-conv-007", {"duplicate", "authority"}),
        Write("memory_add", "duplicate", {"wing": "python", "room": "conventions", "type": "decision", "title": mypy["title"],
                                          "text": mypy["text"].replace(" use typing.Protocol for structural interfaces,", "")},
              "agent-dup-2", "py-conv-003", {"duplicate"}),
        Write("memory_add", "duplicate", {"wing": "lifecore_ros2", "room": "architecture", "type": "note",
                                          "title": deadlock["title"], "text": deadlock["text"].replace("February", "March")},
              "agent-dup-3", "lc-arch-004", {"duplicate"}),
        Write("memory_add", "contradiction", {
            "wing": "lifecore_ros2", "room": "conventions", "type": "decision", "title": "Log with print() in components",
            "text": "Components log with print() instead of the node logger: console output is enough for our launch files, "
                    "and rosout messages with the node name are not needed."},
              "agent-contra-1", "ros2-conv-003", {"conflict"}),
        Write("memory_add", "contradiction", {
            "wing": "ros2", "room": "conventions", "type": "decision", "title": "QoS depth 1 for publishers",
            "text": "Use QoS depth 1 (KEEP_LAST, BEST_EFFORT) for all publishers by default to keep latency low; a deeper "
                    "queue needs a documented reason."},
              "agent-contra-2", "ros2-conv-005", {"conflict"}),
        Write("memory_update", "invariant_edit", {
            "id": "lc-arch-006", "text": "Components should publish through lifecycle publishers; publishing from an "
                                         "inactive node with a plain Publisher is tolerated in tests."},
              "lc-arch-006", "lc-arch-006"),
        Write("memory_delete", "deletion", {"id": "lc-inc-010"}, "lc-inc-010", "lc-inc-010"),
    ]
    plain = [
        ("lifecore_ros2", "note", "CI matrix", "CI runs the lifecore_ros2 test suite in ROS 2 Jazzy and Humble containers; "
         "Humble support ends with the 3.x series."),
        ("lifecore_ros2", "note", "Hardware-in-the-loop rig", "The arm_driver hardware-in-the-loop rig is booked through the "
         "lab calendar; tests that need it are marked hil and skipped elsewhere."),
        ("lifecore_ros2", "pattern", "Record diagnostics in field tests", "Record a rosbag of /diagnostics during every field "
         "test and attach it to the incident report."),
        ("agents_lab", "note", "Launch files in Python", "Session 41 explored replacing the YAML launch configuration with "
         "Python launch files; nothing was decided."),
        ("agents_lab", "note", "Staging robot", "The team's staging robot is named rover-7 and runs the nightly build."),
        ("python", "note", "uv for virtual environments", "The team uses uv for local virtual environments; pip-tools lock "
         "files were retired in 2026."),
        ("python", "pattern", "Paths as pathlib objects", "Pass file system locations between functions as pathlib.Path "
         "objects and turn them into strings only at the edge."),
        ("_global", "note", "Weekly planning", "Weekly planning happens on Mondays at 10:00 UTC; the agenda is in the "
         "team wiki."),
        ("ros2", "note", "IDL files in interface packages", "Interface packages of the legacy robot controller also hold "
         ".idl files generated from its headers."),
        ("lifecore_ros2", "note", "Calibration files", "Camera calibration files live in config/calibration/<serial>.yaml "
         "and are loaded in on_configure."),
        ("lifecore_ros2", "note", "demo_pipeline launch", "The demo_pipeline launch file starts three components and a "
         "lifecycle manager that configures them in order."),
        ("agents_lab", "pattern", "Session summaries", "Summarise each agent session in three bullet points: what changed, "
         "what was learned, what is blocked."),
        ("_global", "note", "Build cache", "The build cache server is build-cache.internal on port 8080; laptops may only "
         "read from it."),
    ]
    for i, (wing, type_, title, text) in enumerate(plain, 1):
        args: dict[str, Any] = {"wing": wing, "type": type_, "title": title, "text": text}
        if title.startswith("IDL files"):
            args["overrides"] = "{agent-dup-1}"  # the first near-duplicate's id, once it has one
        out.append(Write("memory_add", "plain", args, f"agent-plain-{i:02d}"))
    return out


def _resolve(args: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    return {k: ids[v[1:-1]] if isinstance(v, str) and v.startswith("{") else v for k, v in args.items()}


async def run_mcp(client: Any) -> dict[str, str]:
    """Make the 20 writes through the MCP tools, with two searches between them; returns name -> entry id."""
    from .mcp_helpers import result_data

    ids: dict[str, str] = {}
    for w in writes():
        got = result_data(await client.call_tool(w.tool, _resolve(w.args, ids)))
        ids[w.name] = got["id"]
        if w.name == "agent-dup-1":  # the agent looks its own write up: the inbox shows that use
            await client.call_tool("memory_search", {"query": "package and file naming", "active_wing": "ros2"})
    return ids


def run_in_process(mem: Any) -> dict[str, str]:
    """The same writes through the engine, attributed to the same client and landing as the MCP server lands them."""
    from memlens import attribution
    from memlens.review.desk import agent_status

    ids: dict[str, str] = {}
    with attribution.acting_as(AGENT):
        for w in writes():
            args = _resolve(w.args, ids)
            if w.tool == "memory_add":
                text = args.pop("text")
                entry, _, _ = mem.add_unique(text, id=w.name, status=agent_status("active", "under_review"), **args)
                ids[w.name] = entry.id
            elif w.tool == "memory_update":
                eid = args.pop("id")
                ids[w.name] = mem.update(eid, status="under_review", **args).id
            else:
                ids[w.name] = mem.delete(args["id"]).id
            if w.name == "agent-dup-1":
                mem.search("package and file naming", active_wing="ros2")
    return ids
