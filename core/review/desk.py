"""``ReviewDesk``: the inbox, its evidence and the reviewer's actions, over the narrow parts they use.

The facade builds one (``Memory.review``) from the store, the embedding function, the settings and
the impact preview; front ends call only this. Each action runs as the reviewer (audit ``client``:
``{name, via: "review"}``) inside one review batch (audit ``detail.review``: the action, the batch id,
the entries it touches, the reason), which is what ``undo`` finds again in an entry's history.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memlens import attribution
from memlens.errors import MemlensError, NotFoundError, StaleUpdateError, ValidationError
from memlens.ids import new_id
from memlens.models import AUTHORITY
from memlens.review import actions, evidence, inbox
from memlens.review.inbox import Item
from memlens.store import writes
from memlens.store.rows import COLUMNS

if TYPE_CHECKING:
    from memlens.config import ReviewConfig
    from memlens.store.base import Store

Preview = Callable[[Callable[["Store"], Any]], dict[str, Any]]  # runs a change on a rolled-back copy: its impact
HISTORY = 10_000  # audit rows of one entry read to find its review actions


def agent_status(requested: str | None, setting: str) -> str | None:
    """The status an agent's write leaves an entry in: with ``[review] agent_writes = "under_review"`` an add or
    an edit waits for a person (still retrieved, flagged) unless the agent deprecates; ``requested`` None: an
    edit that names no status."""
    if setting == "under_review" and requested in (None, "active"):
        return "under_review"
    return requested


def reviewer_name(configured: str | None) -> str:
    if configured:
        return configured
    try:
        return getpass.getuser() or "reviewer"
    except Exception:  # no login name (a container without a passwd entry)
        return "reviewer"


class ReviewDesk:
    def __init__(self, store: Store, embed: actions.Embed, config: ReviewConfig, thresholds: evidence.Thresholds, *,
                 preview: Preview | None = None, update: Callable[..., Any] | None = None,
                 now: Callable[[], datetime] | None = None) -> None:
        self.store = store
        self.embed = embed
        self.config = config
        self.thresholds = thresholds
        self._preview = preview
        self._update = update
        self.now = now
        self.reviewer = attribution.client_record(reviewer_name(config.reviewer), via="review") or {"name": "reviewer"}

    # -- reading ----------------------------------------------------------------------------------

    def items(self, *, client: str | None = None, since: str | None = None) -> list[Item]:
        return inbox.items(self.store, client=client, since=since)

    def item(self, entry_id: str) -> Item:
        found = inbox.find(self.store, entry_id)
        if found is None:
            raise NotFoundError(f"{entry_id!r} has no agent write waiting for review (memlens review lists them)")
        return found

    def evidence(self, item: Item, *, impact: bool = False, pending: set[str] | None = None) -> list[dict[str, Any]]:
        out = evidence.evidence(item, self.store, self.thresholds, pending)
        if impact:
            out.append(self.impact(item))
        return out

    def impact(self, item: Item) -> dict[str, Any]:
        """Which golden and recently logged queries accepting or rejecting the item would change (nothing written)."""
        if self._preview is None:
            return {"kind": "impact", "against": False, "detail": "no preview available"}
        accept = self._preview(lambda s: actions.accept(s, item))
        reject = self._preview(lambda s: actions.reject(s, self.embed, item))
        failing = [g for g in accept["golden"] if g.get("was_ok")]
        return {"kind": "impact", "accept": _impact(accept), "reject": _impact(reject), "against": bool(failing),
                "golden_checked": accept["golden_checked"]}

    def listing(self, *, client: str | None = None, since: str | None = None, with_evidence: bool = True,
                impact: bool = False) -> dict[str, Any]:
        """``{"items": [{entry, client, at, change, evidence, ...}]}``: the ``memlens review --json`` object."""
        found = self.items(client=client, since=since)
        pending = {i.entry_id for i in found}
        return {"items": [i.to_dict(self.evidence(i, impact=impact, pending=pending) if with_evidence else None)
                          for i in found]}

    # -- acting -----------------------------------------------------------------------------------

    @contextmanager
    def _as_reviewer(self, action: str, entries: list[str], **extra: Any) -> Iterator[dict[str, Any]]:
        """``entries``: every entry the action may write, the first being the one it answers (its subject)."""
        info = {"action": action, "batch": new_id(), "subject": entries[0], "entries": entries,
                **{k: v for k, v in extra.items() if v}}
        with attribution.acting_as(self.reviewer), attribution.reviewing(info):
            yield info

    def _items(self, ids: list[str]) -> list[Item]:
        if not ids:
            raise ValidationError("give at least one entry id")
        found = {i.entry_id: i for i in self.items()}
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFoundError(f"no agent write waiting for review on {', '.join(missing)} (memlens review lists them)")
        return [found[i] for i in dict.fromkeys(ids)]

    def accept(self, ids: list[str], *, supersedes: str | None = None,
               edits: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Accept each item (``edits``: change the entry first, one item only; ``supersedes``: it overrides that entry)."""
        items = self._items(ids)
        if (edits or supersedes) and len(items) > 1:
            raise ValidationError("edits and --supersedes apply to one entry at a time")

        def one(item: Item) -> dict[str, Any]:
            with self._as_reviewer("accept", [item.entry_id], supersedes=supersedes) as info:
                seen = None
                if edits:
                    if self._update is None or item.after is None:
                        raise ValidationError(f"{item.entry_id}: nothing to edit")
                    edited = self._update(item.entry_id, expected_updated_at=item.after.get("updated_at"), **edits)
                    seen = edited.to_record()["updated_at"]
                detail = actions.accept(self.store, item, supersedes=supersedes, seen=seen)
            return {"entry": item.entry_id, "action": "accept", "batch": info["batch"], "detail": detail}

        return _each(items, one)

    def accept_clean(self, *, client: str | None = None, since: str | None = None) -> dict[str, Any]:
        """Accept every item with no evidence against it; the others are listed with what argues against them."""
        found = self.items(client=client, since=since)
        pending = {i.entry_id for i in found}
        accepted, skipped = [], []
        for item in found:
            ev = self.evidence(item, pending=pending)
            if evidence.against(ev):
                skipped.append({"entry": item.entry_id, "against": sorted({e["kind"] for e in ev if e.get("against")})})
                continue
            accepted += self.accept([item.entry_id])
        return {"accepted": accepted, "skipped": skipped}

    def reject(self, ids: list[str], *, reason: str | None = None, delete: bool = False) -> list[dict[str, Any]]:
        def one(item: Item) -> dict[str, Any]:
            # a deletion clears the overrides naming the entry (``writes.release_overriders``): undo restores them too
            touched = [item.entry_id, *(self._overriders(item.entry_id) if delete else [])]
            with self._as_reviewer("reject", touched, reason=reason, delete=delete) as info:
                detail = actions.reject(self.store, self.embed, item, delete=delete)
            return {"entry": item.entry_id, "action": "reject", "batch": info["batch"], "detail": detail}

        return _each(self._items(ids), one)

    def merge_target(self, item: Item) -> str:
        """The entry the item's best near-duplicate says it would merge into."""
        dups = [e for e in evidence.evidence(item, self.store, self.thresholds) if e["kind"] == "duplicate"]
        for d in dups:
            target = d["merge_into"] if d["merge_into"] != item.entry_id else d["id"]
            if target != item.entry_id:
                return str(target)
        raise ValidationError(f"{item.entry_id} has no near-duplicate to merge into; name the entry to merge it into "
                              f"(memlens review merge {item.entry_id} --into ID)")

    def merge(self, ids: list[str], *, into: str | None = None) -> list[dict[str, Any]]:
        items = self._items(ids)
        merged = [i.entry_id for i in items]
        if into in merged:
            raise ValidationError(f"{into} is merged by this command and cannot be what the others merge into")
        targets = {}  # every item's target, found before anything is written
        for item in items:
            if item.after is None:
                raise ValidationError(f"{item.entry_id} was deleted: there is nothing to merge")
            target = targets[item.entry_id] = into or self.merge_target(item)
            if target in merged:
                raise ValidationError(f"{item.entry_id} would merge into {target}, which this command merges too: "
                                      "merge them one at a time")
            self._refuse_lower_authority(item.entry_id, target)

        def one(item: Item) -> dict[str, Any]:
            target = targets[item.entry_id]
            overriders = self._overriders(item.entry_id)
            with self._as_reviewer("merge", list(dict.fromkeys([item.entry_id, target, *overriders])), into=target) as info:
                detail = actions.merge(self.store, item, target, overriders)
            return {"entry": item.entry_id, "action": "merge", "into": target, "batch": info["batch"], "detail": detail}

        return _each(items, one)

    def _refuse_lower_authority(self, entry_id: str, target: str) -> None:
        """A merge keeps the target's type: folding an invariant into a pattern (or any type into a weaker one) would
        drop the rule it states without a word, so it is refused, saying how to go on."""
        merged, kept = self.store.get_row(entry_id), self.store.get_row(target)
        if merged is None or kept is None:
            return  # (the merge itself says which entry is missing)
        have, keep = merged[_TYPE], kept[_TYPE]
        if AUTHORITY.get(have, len(AUTHORITY)) < AUTHORITY.get(keep, len(AUTHORITY)):
            raise ValidationError(
                f"merge: {entry_id} is {_a(have)} and {target} {_a(keep)}: merging would drop the {have} it states; "
                f"make {target} {_a(have)} first (memlens edit {target} type={have}), or reject {entry_id}")

    # -- the whole store -------------------------------------------------------------------------

    def lint(self, count_tokens: Callable[[str], int] | None = None) -> dict[str, Any]:
        from memlens.models import utcnow
        from memlens.review.lint import lint

        return lint(self.store, self.thresholds, self.config, now=(self.now or utcnow)(), count_tokens=count_tokens)

    def _overriders(self, entry_id: str) -> list[str]:
        return writes.overriders(self.store, entry_id)

    def last_action(self, entry_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The newest review action on ``entry_id`` not undone yet, and its audit rows (newest first)."""
        undone: set[str] = set()
        for row in self.store.audit(entry_id, HISTORY):
            review = (row.get("detail") or {}).get("review")
            if not isinstance(review, dict):
                continue
            if review.get("action") == "undo":
                undone.add(str(review.get("undoes")))
                continue
            batch = str(review.get("batch"))
            if batch in undone:
                continue
            rows = []
            for eid in review.get("entries") or [entry_id]:
                rows += [r for r in self.store.audit(str(eid), HISTORY)
                         if ((r.get("detail") or {}).get("review") or {}).get("batch") == batch]
            return review, sorted(rows, key=lambda r: -int(r["seq"]))
        return None

    def undo(self, entry_id: str) -> dict[str, Any]:
        """Reverse the newest review action on ``entry_id`` that is not undone yet (all the entries it touched)."""
        found = self.last_action(entry_id)
        if found is None:
            raise NotFoundError(f"no review action on {entry_id!r} to undo")
        review, rows = found
        entries = list(dict.fromkeys(str(r["entry_id"]) for r in rows))
        try:
            with self._as_reviewer("undo", entries, undoes=review["batch"]) as info:
                actions.undo(self.store, self.embed, rows)
        except actions.ChangedSince as exc:
            raise StaleUpdateError(self._changed_since(review, exc, entry_id)) from None
        return {"entry": entry_id, "action": "undo", "undid": review.get("action"), "batch": info["batch"],
                "undoes": review["batch"], "entries": entries}

    def _changed_since(self, review: dict[str, Any], exc: actions.ChangedSince, asked: str) -> str:
        """Why an undo of ``review`` (asked on entry ``asked``) is refused, naming what to do first: undoing the later
        review action that changed the entry (the one ``memlens review undo`` on it reverses), putting back the fields
        a later write (a person's or an agent's) changed, deleting an entry added again, rejecting an agent's deletion
        of another entry the review touched; or that it cannot be undone any more."""
        entry_id, what = exc.entry_id, f"{review.get('action')} of {review.get('subject')}"
        later = [r for r in self.store.audit(entry_id, HISTORY) if int(r["seq"]) > exc.seq]  # newest first
        undone = {str(((r.get("detail") or {}).get("review") or {}).get("undoes")) for r in later}
        for r in later:
            act = (r.get("detail") or {}).get("review") or {}
            if act and act.get("action") != "undo" and str(act.get("batch")) not in undone:
                return (f"cannot undo the {what}: entry {entry_id!r} was changed after it by a later review action "
                        f"({act.get('action')} of {act.get('subject')}, audit row {r['seq']}); undo that first "
                        f"(memlens review undo {entry_id}), then this one")
        by = next((f" (audit row {r['seq']}, {r['action']}{_by(r)})" for r in later
                   if not (r.get("detail") or {}).get("review")), "")
        # a person's edit putting the fields back is no review action, so the same action is undone next time (an
        # agent's later write is not rejected instead: that would take back its earlier writes too, and become the
        # entry's newest review action, the one an undo takes)
        if exc.fields != ["exists"]:
            one = len(exc.fields) == 1
            return (f"cannot undo the {what}: entry {entry_id!r} was edited after it{by}: its "
                    f"{', '.join(exc.fields)} {'differs' if one else 'differ'} from what the review left; set "
                    f"{'it' if one else 'them'} back (memlens edit {entry_id} FIELD=VALUE), then undo again")
        if self.store.get_row(entry_id) is None:
            gone = f"cannot undo the {what}: entry {entry_id!r} was deleted after it{by}"
            if self._deletion_waiting(entry_id) and entry_id != asked:
                # the reject is a review action on that entry only: an undo asked on ``asked`` still finds this review
                return (f"{gone}; the agent's deletion waits for review: reject it, which brings the entry back as it "
                        f"was before the agent's writes (memlens review reject {entry_id}), then undo again (memlens "
                        f"review undo {asked})")
            if self._deletion_waiting(entry_id):
                return (f"{gone}; this review can no longer be undone, but the agent's deletion waits for review: "
                        f"rejecting it brings the entry back as it was before the agent's writes (memlens review reject "
                        f"{entry_id}; an undo after that reverses the reject, not this review)")
            return f"{gone}, and nothing brings it back as the review left it; this review can no longer be undone"
        return (f"cannot undo the {what}: entry {entry_id!r} exists again since the review deleted it{by}; "
                f"delete it first (memlens delete {entry_id}), then undo again")

    def _deletion_waiting(self, entry_id: str) -> bool:
        """Whether the entry's deletion was an agent's and waits for review (a person's deletion answers the entry's
        item) and rejecting it would bring the entry back (not when the agent also added it). That is no way to the
        undo refused: the reject becomes the entry's newest review action, the one an undo takes, and undoing it
        deletes the entry again."""
        item = inbox.find(self.store, entry_id)
        return item is not None and item.after is None and item.before is not None


_TYPE = COLUMNS.index("type")


def _a(entry_type: str) -> str:
    return f"{'an' if entry_type == 'invariant' else 'a'} {entry_type}"


def _by(row: dict[str, Any]) -> str:
    """The agent that wrote an audit ``row``, as ' by NAME', or nothing for a person's write."""
    client = (row.get("detail") or {}).get("client")
    return f" by {attribution.describe(client)}" if isinstance(client, dict) and client.get("name") else ""


def _each(items: list[Item], act: Callable[[Item], dict[str, Any]]) -> list[dict[str, Any]]:
    """``act`` on each item, each its own transaction (and review batch, undone alone). An item refused after others
    were answered names them in its error: what was done is never left unsaid."""
    out: list[dict[str, Any]] = []
    for item in items:
        try:
            out.append(act(item))
        except MemlensError as exc:
            if not out:
                raise
            done = "; ".join(str(o["detail"]) for o in out)
            raise type(exc)(f"{exc} (stopped at {item.entry_id}; done before it: {done})") from None
    return out


def _impact(p: dict[str, Any]) -> dict[str, Any]:
    return {"golden_failing": [{k: g.get(k) for k in ("id", "query", "expect", "why", "was_ok")} for g in p["golden"]],
            "queries_changed": [{k: q.get(k) for k in ("query", "entered", "left", "moved", "top1_changed")}
                                for q in p["queries"]],
            "summary": p["summary"]}
