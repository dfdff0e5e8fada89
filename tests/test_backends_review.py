"""The review inbox, its actions and lint: the same on SQLite and on PostgreSQL (the scripted agent session of
tests/review_session.py on the demo memory, real model, in each backend)."""

from __future__ import annotations

import shutil

import pytest

from memlens import attribution
from memlens.errors import StaleUpdateError
from tests.review_session import AGENT, run_in_process

pytest.importorskip("psycopg")


def _open(backend, request, demo_store, tmp_path, settings, embedder):
    from memlens import Memory

    if backend == "sqlite":
        target = tmp_path / "demo.db"
        shutil.copy(demo_store, target)
    else:
        from memlens.store.postgres.copy import copy_store

        target = request.getfixturevalue("pg_uri")
        copy_store(demo_store, target)
    return Memory.open(target, settings=settings, embedder=embedder)


def _seen(mem):
    """What the inbox and lint say, without times and batch ids."""
    listing = mem.review.listing()["items"]
    inbox = sorted((i["entry"], i["change"]["action"], sorted((e["kind"], e.get("id"), e.get("rule")) for e in i["evidence"]
                                                              if e.get("against")))
                   for i in listing)
    lint = sorted((f["kind"], f["severity"], tuple(f["entries"])) for f in mem.review.lint()["findings"])
    return inbox, lint


def test_inbox_actions_and_lint_agree_across_backends(request, demo_store, tmp_path, settings, real_embedder):
    seen = {}
    for backend in ("sqlite", "postgresql"):
        with _open(backend, request, demo_store, tmp_path, settings, real_embedder) as mem:
            run_in_process(mem)
            inbox, lint = _seen(mem)
            assert len(inbox) == 20
            desk = mem.review
            desk.merge(["agent-dup-1"])
            desk.reject(["lc-arch-006"], reason="weakens an invariant")
            desk.accept(["agent-plain-01"])
            desk.undo("agent-plain-01")
            assert mem.get("ros2-conv-007").meta["found_in"][0]["id"] == "agent-dup-1"
            assert mem.get("agent-plain-09").overrides == "ros2-conv-007"
            assert mem.get("lc-arch-006").text.startswith("Components publish only through")
            assert mem.get("agent-plain-01").status.value == "under_review"
            # a merge into an entry that is merged in turn: undone newest first, every step comes back
            desk.merge(["agent-plain-02"], into="agent-plain-01")
            desk.merge(["agent-plain-01"], into="agent-plain-10")
            desk.undo("agent-plain-01")
            desk.undo("agent-plain-02")
            assert mem.get("agent-plain-02").text.startswith("The arm_driver hardware-in-the-loop rig")
            assert "found_in" not in mem.get("agent-plain-01").meta and "found_in" not in mem.get("agent-plain-10").meta
            # an accept the agent's later deletion blocks: the refusal names the reject that brings the entry back
            desk.accept(["agent-plain-03"])
            with attribution.acting_as(AGENT):
                mem.delete("agent-plain-03")
            with pytest.raises(StaleUpdateError, match=r"deletion waits for review: rejecting it brings the entry back "
                                                       r".*\(memlens review reject agent-plain-03; an undo after that "
                                                       r"reverses the reject, not this review\)$"):
                desk.undo("agent-plain-03")
            desk.reject(["agent-plain-03"])
            assert mem.get("agent-plain-03").status.value == "active"  # as the accept left it
            assert desk.undo("agent-plain-03")["undid"] == "reject"
            seen[mem.store.backend] = (inbox, lint, _seen(mem))
    assert seen["sqlite"] == seen["postgresql"]
