"""The review inbox, its actions and lint on a real store (SQLite + sqlite-vec), with the hashing embedder:
which writes are items, what each action writes to the entry and the audit, undo, and lint's findings.
The real model, the MCP server and the CLI are exercised by tests/test_review_session.py."""

from __future__ import annotations

import pytest

from memlens import attribution
from memlens.errors import NotFoundError, StaleUpdateError, ValidationError

AGENT = {"name": "unit-agent", "version": "1", "via": "mcp"}
RULE = "Callbacks must never block the executor thread, so no sleep and no synchronous service call inside them."


@pytest.fixture
def store(mem):
    """Two person-written rules, then an agent's add, edit, deletion and near-duplicate."""
    mem.add(RULE, wing="proj", type="invariant", id="rule-1", title="No blocking callbacks")
    mem.add("Timers drive periodic work in every component of the project.", wing="shared", type="decision", id="rule-2")
    mem.add("Old incident notes are kept for a year before they are archived.", wing="proj", id="note-1")
    with attribution.acting_as(AGENT):
        mem.add("Agents record what they learn in the agents wing after each session.", wing="agents", id="new-1",
                status="under_review")
        mem.update("rule-2", text="Timers drive periodic work in most components of the project.", status="under_review")
        mem.delete("note-1")
        mem.add(RULE + " Confirmed today.", wing="proj", type="note", id="dup-1", title="No blocking callbacks",
                status="under_review")
    return mem


def ids(mem, **kw):
    return [i.entry_id for i in mem.review.items(**kw)]


def test_the_inbox_holds_each_agent_write_once_with_its_change(store):
    items = {i.entry_id: i for i in store.review.items()}
    assert set(items) == {"new-1", "rule-2", "note-1", "dup-1"}
    assert {k: i.action for k, i in items.items()} == {"new-1": "add", "rule-2": "update", "note-1": "delete", "dup-1": "add"}
    assert items["rule-2"].diff()["text"]["after"].startswith("Timers drive periodic work in most")
    assert items["rule-2"].diff()["status"] == {"before": "active", "after": "under_review"}
    assert items["note-1"].after is None and items["note-1"].snapshot["text"].startswith("Old incident notes")
    assert all(i.client == "unit-agent 1 (mcp)" for i in items.values())
    assert ids(store, client="someone-else") == [] and len(ids(store, client="UNIT-AGENT")) == 4
    assert ids(store, since="2999-01-01T00:00:00Z") == []


def test_a_persons_writes_are_not_items_and_a_plain_edit_leaves_the_item_open(store):
    store.add("A person's own note.", wing="proj", id="mine")
    store.update("new-1", salience=0.9)  # edit (then accept): still waiting
    assert "mine" not in ids(store) and "new-1" in ids(store)
    store.set_status("new-1", "active")  # a person's decision: answered
    assert "new-1" not in ids(store)


def test_evidence_names_the_duplicate_the_entry_it_merges_into_and_the_authority(store):
    desk = store.review
    ev = desk.evidence(desk.item("dup-1"))
    dup = next(e for e in ev if e["kind"] == "duplicate")
    assert dup["id"] == "rule-1" and dup["merge_into"] == "rule-1" and dup["shared_text"] == 1.0 and dup["similarity"] > 0.9
    assert any(e["kind"] == "authority" and e["id"] == "rule-1" for e in ev)
    assert not [e for e in desk.evidence(desk.item("new-1")) if e.get("against")]


def test_accept_makes_the_entry_active_keeps_its_type_and_is_audited_as_the_reviewer(store):
    [done] = store.review.accept(["dup-1"])
    e = store.get("dup-1")
    assert e.status.value == "active" and e.type.value == "note"
    row = store.audit("dup-1", 1)[0]
    assert row["detail"]["client"]["via"] == "review" and row["detail"]["review"]["action"] == "accept"
    assert row["detail"]["review"]["batch"] == done["batch"]
    assert "dup-1" not in ids(store)


def test_reject_takes_each_kind_of_write_back(store):
    desk = store.review
    desk.reject(["new-1"], reason="not a fact")
    assert store.get("new-1").status.value == "deprecated"
    assert store.audit("new-1", 1)[0]["detail"]["review"]["reason"] == "not a fact"
    desk.reject(["rule-2"])
    rule = store.get("rule-2")
    assert rule.text.startswith("Timers drive periodic work in every") and rule.status.value == "active"
    desk.reject(["note-1"])
    assert store.get("note-1").text.startswith("Old incident notes")
    assert ids(store) == ["dup-1"]
    store.review.reject(["dup-1"], delete=True)
    with pytest.raises(NotFoundError):
        store.get("dup-1")


def test_merge_keeps_one_entry_with_the_attribution_and_the_overrides(store):
    with attribution.acting_as(AGENT):
        store.add("Spin up a worker for long jobs instead.", wing="proj", id="over-1", overrides="dup-1",
                  status="under_review")
    [done] = store.review.merge(["dup-1"])
    assert done["into"] == "rule-1"
    with pytest.raises(NotFoundError):
        store.get("dup-1")
    found = store.get("rule-1").meta["found_in"]
    assert found == [{"id": "dup-1", "wing": "proj", "title": "No blocking callbacks", "by": "unit-agent 1 (mcp)",
                      "at": found[0]["at"]}]
    assert store.get("over-1").overrides == "rule-1"
    # undo restores all three entries as they were, and the item comes back
    store.review.undo("rule-1")
    assert store.get("dup-1").text.endswith("Confirmed today.") and store.get("over-1").overrides == "dup-1"
    assert "found_in" not in store.get("rule-1").meta and "dup-1" in ids(store)


def test_a_merge_that_would_close_a_cycle_of_overrides_is_refused_and_writes_nothing(store):
    """dup-1 overrides note-2 and note-2 overrides rule-1: rule-1 taking dup-1's override would hide itself."""
    store.add("Keep incident notes for two years.", wing="proj", id="note-2", overrides="rule-1")
    store.update("dup-1", overrides="note-2")
    before = {i: store.get(i).to_record() for i in ("rule-1", "dup-1", "note-2")}
    with pytest.raises(ValidationError, match=r"merge: rule-1 -> note-2 -> rule-1 would be a cycle of overrides"):
        store.review.merge(["dup-1"], into="rule-1")
    assert {i: store.get(i).to_record() for i in before} == before and "dup-1" in ids(store)
    # an entry re-pointed from the merged one to the kept one can close a loop too
    store.update("dup-1", overrides=None)
    store.update("note-2", overrides="dup-1")
    store.update("rule-1", overrides="note-2")
    with pytest.raises(ValidationError, match=r"merge: rule-1 -> note-2 -> rule-1 would be a cycle"):
        store.review.merge(["dup-1"], into="rule-1")
    assert store.get("dup-1").overrides is None and store.get("note-2").overrides == "dup-1"


def test_a_merge_of_several_entries_is_checked_whole_before_anything_is_written(store):
    from tests.conftest import snapshot_store

    before = snapshot_store(store.path)
    with pytest.raises(ValidationError, match="new-1 is merged by this command and cannot be what the others merge into"):
        store.review.merge(["dup-1", "new-1"], into="new-1")
    with pytest.raises(ValidationError, match="note-1 was deleted: there is nothing to merge"):
        store.review.merge(["dup-1", "note-1"], into="rule-1")
    assert snapshot_store(store.path) == before


def test_a_merge_into_a_weaker_type_is_refused_before_anything_is_written(store):
    """A merge keeps the target's type: an agent's invariant folded into a note would drop the rule unsaid."""
    from tests.conftest import snapshot_store

    store.add("Callbacks run on the executor's threads.", wing="proj", id="note-9")
    with attribution.acting_as(AGENT):
        store.add(RULE + " Never sleep in one.", wing="proj", type="invariant", id="dup-2", status="under_review")
    before = snapshot_store(store.path)
    with pytest.raises(ValidationError, match=r"^merge: dup-2 is an invariant and note-9 a note: merging would drop "
                                               r"the invariant it states; make note-9 an invariant first "
                                               r"\(memlens edit note-9 type=invariant\), or reject dup-2$"):
        store.review.merge(["dup-2"], into="note-9")
    with pytest.raises(ValidationError, match="dup-2 is an invariant and note-9 a note"):
        store.review.merge(["dup-1", "dup-2"], into="note-9")  # checked whole: dup-1 (a note) is not merged either
    assert snapshot_store(store.path) == before
    [done] = store.review.merge(["dup-2"], into="rule-1")  # into an invariant: as before
    assert done["into"] == "rule-1"


def test_an_action_refused_midway_names_what_it_did_before(store, monkeypatch):
    from memlens.review import actions

    real = actions.accept

    def accept(st, item, **kw):
        if item.entry_id == "new-1":  # written meanwhile by someone else
            raise StaleUpdateError("entry 'new-1' changed since the inbox was read; list it again")
        return real(st, item, **kw)

    monkeypatch.setattr(actions, "accept", accept)
    with pytest.raises(StaleUpdateError, match=r"^entry 'new-1' changed since the inbox was read; list it again "
                                               r"\(stopped at new-1; done before it: dup-1: accepted\)$"):
        store.review.accept(["dup-1", "new-1"])
    assert store.get("dup-1").status.value == "active" and sorted(ids(store)) == ["new-1", "note-1", "rule-2"]


def test_a_rule_with_the_key_of_another_in_its_own_wing_is_evidence_against_it(store):
    """One key names one rule: an agent's rule with another text for a key its wing already has is for a person."""
    store.add("The health service answers from the cached component status.", wing="proj", type="decision",
              id="health-1", key="health.service")
    with attribution.acting_as(AGENT):
        store.add("The health service must probe the hardware live on every request.", wing="proj", type="decision",
                  id="health-2", key="health.service", status="under_review")
    desk = store.review
    ev = desk.evidence(desk.item("health-2"))
    (conflict,) = [e for e in ev if e["kind"] == "conflict"]
    assert (conflict["rule"], conflict["key"], conflict["id"], conflict["against"]) == ("same key", "health.service",
                                                                                       "health-1", True)
    assert "accept with --supersedes health-1" in conflict["detail"]
    assert "health-2" in {s["entry"] for s in desk.accept_clean()["skipped"]}


def test_supersedes_is_refused_for_a_deletion_or_a_deprecation(store):
    from tests.conftest import snapshot_store

    with attribution.acting_as(AGENT):
        store.set_status("rule-1", "deprecated")
    before = snapshot_store(store.path)
    for entry_id, state in (("note-1", "deleted"), ("rule-1", "deprecated")):
        with pytest.raises(ValidationError, match=f"--supersedes: {entry_id} is {state} and cannot override anything"):
            store.review.accept([entry_id], supersedes="rule-2")
    assert snapshot_store(store.path) == before


def test_rejecting_with_delete_clears_the_overrides_naming_the_entry_and_undo_restores_them(store):
    store.add("Agents record what they learn elsewhere now.", wing="agents", id="over-x", overrides="new-1")
    store.review.reject(["new-1"], delete=True)
    assert store.get("over-x").overrides is None  # no override left naming nothing
    store.review.undo("new-1")
    assert store.get("new-1").status.value == "under_review" and store.get("over-x").overrides == "new-1"


def test_undo_reverses_the_newest_action_and_reopens_the_item(store):
    desk = store.review
    desk.accept(["new-1"])
    desk.reject(["rule-2"])
    assert desk.undo("rule-2")["undid"] == "reject"
    assert store.get("rule-2").text.startswith("Timers drive periodic work in most") and "rule-2" in ids(store)
    assert desk.undo("new-1")["undid"] == "accept"
    assert store.get("new-1").status.value == "under_review" and "new-1" in ids(store)
    with pytest.raises(NotFoundError):
        desk.undo("new-1")  # both actions on it are undone
    desk.reject(["note-1"])
    desk.undo("note-1")
    with pytest.raises(NotFoundError):
        store.get("note-1")  # deleted again, as the agent left it


def test_an_accept_that_changed_nothing_undone_leaves_the_agents_edit_as_it_was(store):
    """An agent's edit that left the entry active: accepting it writes only a review row; undone, the item is the
    edit again, with its change, and can be answered (it read as a deletion that no action could answer)."""
    with attribution.acting_as(AGENT):
        store.update("rule-1", text=RULE + " Edited while active.")
    waiting = next(i for i in store.review.items() if i.entry_id == "rule-1")
    assert waiting.action == "update" and store.get("rule-1").status.value == "active"
    store.review.accept(["rule-1"])
    assert "rule-1" not in ids(store)
    store.review.undo("rule-1")
    again = next(i for i in store.review.items() if i.entry_id == "rule-1")
    assert again.action == "update" and again.diff() == waiting.diff() and again.after == store.get("rule-1").to_record()
    store.review.reject(["rule-1"])
    assert store.get("rule-1").text == RULE and "rule-1" not in ids(store)


def test_an_action_is_refused_when_the_entry_changed_since_the_inbox_was_read(store):
    item = store.review.item("new-1")
    store.update("new-1", salience=0.1)  # someone writes meanwhile
    from memlens.review import actions

    with pytest.raises(StaleUpdateError):
        actions.accept(store.store, item)
    assert store.get("new-1").status.value == "under_review"
    store.review.accept(["rule-2"])
    store.update("rule-2", salience=0.2)
    with pytest.raises(StaleUpdateError):
        store.review.undo("rule-2")  # undoing would overwrite that edit


def _records(mem, *entry_ids):
    """Each entry's record without its updated_at (an undo stamps what it puts back with its own time)."""
    return {i: {k: v for k, v in mem.get(i).to_record().items() if k != "updated_at"} for i in entry_ids}


def test_chained_merges_undone_newest_first_restore_every_step(store):
    """new-1 merged into dup-1, then dup-1 into rule-1: undoing the second, then the first, brings all back (the first
    undo used to leave dup-1 with a new updated_at, and the second was refused for good: new-1's text was lost)."""
    desk = store.review
    was = _records(store, "new-1", "dup-1", "rule-1")
    desk.merge(["new-1"], into="dup-1")
    desk.merge(["dup-1"], into="rule-1")
    assert desk.undo("dup-1")["undid"] == "merge"
    assert desk.undo("new-1")["undid"] == "merge"
    assert _records(store, "new-1", "dup-1", "rule-1") == was
    assert {"new-1", "dup-1"} <= set(ids(store))


def test_an_undo_out_of_order_names_the_undo_to_run_first(store):
    from tests.conftest import snapshot_store

    desk = store.review
    desk.merge(["new-1"], into="dup-1")
    desk.merge(["dup-1"], into="rule-1")
    before = snapshot_store(store.path)
    with pytest.raises(StaleUpdateError, match=r"^cannot undo the merge of new-1: entry 'dup-1' was changed after it by "
                                               r"a later review action \(merge of dup-1, audit row \d+\); undo that "
                                               r"first \(memlens review undo dup-1\), then this one$"):
        desk.undo("new-1")
    assert snapshot_store(store.path) == before
    desk.undo("dup-1")  # what the message says, then the undo asked for
    desk.undo("new-1")
    assert store.get("new-1").text.startswith("Agents record what they learn")


def test_an_undo_after_a_persons_edit_names_the_fields_to_set_back(store):
    desk = store.review
    desk.accept(["rule-2"])
    salience = store.get("rule-2").salience
    store.update("rule-2", salience=0.2)
    with pytest.raises(StaleUpdateError, match=r"^cannot undo the accept of rule-2: entry 'rule-2' was edited after it "
                                               r"\(audit row \d+, update\): its salience differs from what the review "
                                               r"left; set it back \(memlens edit rule-2 FIELD=VALUE\), then undo again$"):
        desk.undo("rule-2")
    store.update("rule-2", salience=salience)  # set back by hand: the undo goes through
    assert desk.undo("rule-2")["undid"] == "accept" and "rule-2" in ids(store)


def test_an_undo_after_an_agents_later_write_names_the_agent_and_the_fields(store):
    """dup-1's item was open before the merge: rejecting the agent's later write would take back its add too, so the
    error says which fields to set back; a person's edit doing so lets the undo through."""
    desk = store.review
    desk.merge(["new-1"], into="dup-1")
    salience = store.get("dup-1").salience
    with attribution.acting_as(AGENT):
        store.update("dup-1", salience=0.9)
    with pytest.raises(StaleUpdateError, match=r"^cannot undo the merge of new-1: entry 'dup-1' was edited after it "
                                               r"\(audit row \d+, update by unit-agent 1 \(mcp\)\): its salience "
                                               r"differs from what the review left; set it back"):
        desk.undo("new-1")
    store.update("dup-1", salience=salience)
    desk.undo("new-1")
    assert store.get("new-1").text.startswith("Agents record what they learn") and "new-1" in ids(store)


def test_an_undo_after_an_agents_deletion_names_the_reject_that_brings_the_entry_back(store):
    """An agent deleted the entry after the accept: the refusal says its deletion waits for review and names the reject
    that brings the entry back, and that an undo after it reverses the reject (it used to say only that nothing brings
    the entry back). A person's deletion answers the entry's item, and rejecting an entry the agent added and deleted
    brings nothing back: no reject is offered for either."""
    from tests.conftest import snapshot_store

    desk = store.review
    desk.accept(["new-1"])
    accepted = _records(store, "new-1")
    with attribution.acting_as(AGENT):
        store.delete("new-1")
    before = snapshot_store(store.path)
    with pytest.raises(StaleUpdateError, match=r"^cannot undo the accept of new-1: entry 'new-1' was deleted after it "
                                               r"\(audit row \d+, delete by unit-agent 1 \(mcp\)\); this review can no "
                                               r"longer be undone, but the agent's deletion waits for review: rejecting "
                                               r"it brings the entry back as it was before the agent's writes \(memlens "
                                               r"review reject new-1; an undo after that reverses the reject, not this "
                                               r"review\)$"):
        desk.undo("new-1")
    assert snapshot_store(store.path) == before
    desk.reject(["new-1"])  # what the message names
    assert _records(store, "new-1") == accepted  # back as the accept left it: active
    assert desk.undo("new-1")["undid"] == "reject"  # and an undo now takes the reject, as the message says
    with pytest.raises(NotFoundError):
        store.get("new-1")
    desk.accept(["rule-2"])
    store.delete("rule-2")  # a person's deletion: nothing waits for review
    with pytest.raises(StaleUpdateError, match=r"^cannot undo the accept of rule-2: entry 'rule-2' was deleted after it "
                                               r"\(audit row \d+, delete\), and nothing brings it back as the review "
                                               r"left it; this review can no longer be undone$"):
        desk.undo("rule-2")

    with attribution.acting_as(AGENT):
        store.add("Session notes go to the agents wing.", wing="agents", id="new-2", status="under_review")
        store.add("Each session ends with a short summary.", wing="agents", id="new-3", status="under_review")
    desk.merge(["new-3"], into="new-2")  # new-2's own item (the agent added it) stays open
    with attribution.acting_as(AGENT):
        store.delete("new-2")
    with pytest.raises(StaleUpdateError, match=r"^cannot undo the merge of new-3: entry 'new-2' was deleted after it "
                                               r".*, and nothing brings it back as the review left it; this review can "
                                               r"no longer be undone$"):
        desk.undo("new-3")  # rejecting an agent's add and deletion brings nothing back: no reject offered


def test_an_undo_after_an_agents_deletion_of_the_merge_target_names_the_reject_then_the_undo(store):
    """The agent deleted a person's entry that a merge went into: rejecting that deletion brings the entry back, and
    the merge (a review action on the merged entry, not on the target) can then be undone. The refusal said the review
    could no longer be undone and that an undo after the reject reverses the reject."""
    from tests.conftest import snapshot_store

    desk = store.review
    with attribution.acting_as(AGENT):
        store.add("Callbacks never block; long work goes to a worker thread.", wing="proj", id="new-4",
                  status="under_review")
    desk.merge(["new-4"], into="rule-1")
    merged = _records(store, "rule-1")
    with attribution.acting_as(AGENT):
        store.delete("rule-1")
    before = snapshot_store(store.path)
    with pytest.raises(StaleUpdateError, match=r"^cannot undo the merge of new-4: entry 'rule-1' was deleted after it "
                                               r".*; the agent's deletion waits for review: reject it, which brings the "
                                               r"entry back as it was before the agent's writes \(memlens review reject "
                                               r"rule-1\), then undo again \(memlens review undo new-4\)$"):
        desk.undo("new-4")
    assert snapshot_store(store.path) == before
    desk.reject(["rule-1"])  # what the message names first
    assert _records(store, "rule-1") == merged
    assert desk.undo("new-4")["undid"] == "merge"  # then the undo goes through, as it says
    assert store.get("new-4").text.startswith("Callbacks never block")


def test_the_cli_offers_no_undo_of_an_undo(store, capsys, monkeypatch):
    from memlens import embed
    from memlens.cli.main import main

    monkeypatch.setattr(embed, "make_embedder", lambda *a, **k: embed.HashEmbedder())
    path = str(store.path)
    store.close()
    assert main(["--store", path, "review", "merge", "new-1", "--into", "dup-1"]) == 0
    assert "(undo: memlens review undo new-1)" in capsys.readouterr().out
    assert main(["--store", path, "review", "undo", "new-1"]) == 0
    assert capsys.readouterr().out == "undo: merge of new-1, dup-1 reversed\n"


def test_bulk_accept_skips_items_with_evidence_against_them(store):
    got = store.review.accept_clean()
    assert [d["entry"] for d in got["accepted"]] == ["new-1", "rule-2", "note-1"]
    assert {s["entry"]: s["against"] for s in got["skipped"]} == {"dup-1": ["authority", "duplicate"]}
    # nothing argued against note-1's deletion: accepting it writes a review mark, the entry stays deleted
    assert store.audit("note-1", 1)[0]["action"] == "review" and ids(store) == ["dup-1"]


def test_supersedes_sets_overrides_and_an_unknown_id_is_refused(store):
    with pytest.raises(ValidationError, match="supersedes"):
        store.review.accept(["new-1"], supersedes="nope")
    assert "new-1" in ids(store)
    store.update("rule-2", overrides="new-1")  # new-1 superseding rule-2 would close a cycle
    with pytest.raises(ValidationError, match="^supersedes: new-1 -> rule-2 -> new-1 would be a cycle of overrides"):
        store.review.accept(["new-1"], supersedes="rule-2")
    assert "new-1" in ids(store) and store.get("new-1").overrides is None
    store.review.accept(["new-1"], supersedes="rule-1")
    assert store.get("new-1").overrides == "rule-1"


def test_edit_then_accept_is_one_undoable_action(store):
    [done] = store.review.accept(["new-1"], edits={"text": "Agents record what they learned, in the agents wing."})
    e = store.get("new-1")
    assert e.text.startswith("Agents record what they learned") and e.status.value == "active"
    assert [r["detail"]["review"]["batch"] for r in store.audit("new-1", 2)] == [done["batch"]] * 2
    store.review.undo("new-1")
    assert store.get("new-1").text.startswith("Agents record what they learn in")


def test_actions_on_an_entry_with_nothing_waiting_are_refused_and_write_nothing(store):
    before = store.store.audit_count()
    for call in (lambda: store.review.accept(["rule-1"]), lambda: store.review.reject(["missing"]),
                 lambda: store.review.merge(["new-1"])):
        with pytest.raises((NotFoundError, ValidationError)):
            call()
    assert store.store.audit_count() == before


def test_agent_writes_land_under_review_unless_set_to_active():
    from memlens.review.desk import agent_status

    assert agent_status("active", "under_review") == "under_review"
    assert agent_status(None, "under_review") == "under_review"
    assert agent_status("deprecated", "under_review") == "deprecated"
    assert agent_status("active", "active") == "active" and agent_status(None, "active") is None


def test_lint_finds_what_is_wrong_with_a_severity_and_exit_status(store):
    from memlens.review.lint import exit_status

    store.add("Entries of this wing use the old API.", wing="proj", id="orphan", overrides="rule-1")
    store.delete("rule-1")  # the delete leaves orphan overriding nothing; older releases left the dangling override:
    store.store.conn.execute("UPDATE entries SET overrides = 'rule-1' WHERE id = 'orphan'")  # written back by hand
    store.add("word " * 900, wing="proj", id="long-1", type="invariant", title="Long")
    report = store.review.lint(store.embedder.count_tokens)
    kinds = {(f["kind"], f["severity"], tuple(f["entries"])) for f in report["findings"]}
    assert ("overrides", "error", ("orphan", "rule-1")) in kinds
    assert any(k == "too_long" and s == "warning" and e == ("long-1",) for k, s, e in kinds)
    assert report["findings"][0]["severity"] == "error"
    assert exit_status(report, "error") == 1 and exit_status({"findings": []}, "info") == 0
    assert set(report["summary"]["by_kind"]) >= {"overrides", "too_long"}


def test_an_edit_that_closes_a_cycle_of_overrides_is_refused_and_lint_names_one_already_stored(store):
    """Entries on a cycle of overrides each hide the next: search would return none of them."""
    from memlens.errors import ValidationError
    from tests.conftest import snapshot_store

    store.update("rule-2", overrides="rule-1")
    before = snapshot_store(store.path)
    with pytest.raises(ValidationError, match="^overrides: rule-1 -> rule-2 -> rule-1 would be a cycle of overrides"):
        store.update("rule-1", overrides="rule-2")
    assert snapshot_store(store.path) == before
    assert store.review.lint(store.embedder.count_tokens)["summary"]["by_kind"].get("overrides") is None
    # a cycle made before this check existed (written here behind the engine's back) is an error for lint
    store.store.conn.execute("UPDATE entries SET overrides = 'rule-2' WHERE id = 'rule-1'")
    report = store.review.lint(store.embedder.count_tokens)
    cycles = [f for f in report["findings"] if "cycle" in f["detail"]]
    assert [(f["kind"], f["severity"], f["entries"]) for f in cycles] == [("overrides", "error", ["rule-1", "rule-2"])]
    assert cycles[0]["detail"].startswith("rule-1 -> rule-2 -> rule-1 is a cycle of overrides")
