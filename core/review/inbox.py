"""The review inbox: what agents wrote that no person has answered yet, read from the audit.

An agent is a client that names itself on a write: an MCP client, or an API caller inside
``memlens.attribution.acting_as``; its audit rows carry ``detail.client``. A person's writes (the CLI,
the app, imports) carry no client, and a review action carries the reviewer with ``via: review`` and
``detail.review`` (its action and batch).

Each entry's audit rows are read oldest first:

* an agent's add, edit, status change or deletion opens the entry's item, or adds to it;
* a person's answer closes it: a review action (accept, reject, merge), and also a deletion or a
  status change made through the CLI or the app. A person's plain edit leaves it open (edit, then
  accept);
* undoing a review action reopens exactly what that action closed.

An item is one entry with all its unanswered writes: ``before`` is the entry as it was before the
first of them (None for a new entry) and ``after`` as the last one left it (None once deleted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from memlens.attribution import describe

AGENT_ACTIONS = frozenset({"add", "update", "delete"})
FIELDS = ("title", "text", "wing", "room", "kind", "type", "status", "key", "salience", "overrides", "meta")


class ReviewRows(Protocol):
    """The store role the inbox reads (``memlens.store.base.Writes.review_rows``)."""

    def review_rows(self) -> list[tuple[Any, ...]]: ...


def _json(text: Any) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None  # a hand-edited row: treated as empty
    return value if isinstance(value, dict) else None


@dataclass
class Write:
    """One audit row of an entry write."""

    seq: int
    ts: str
    action: str
    entry_id: str
    wing: str
    raw_before: str | None = field(repr=False)
    raw_after: str | None = field(repr=False)
    detail: dict[str, Any]

    @cached_property
    def before(self) -> dict[str, Any] | None:
        return _json(self.raw_before)

    @cached_property
    def after(self) -> dict[str, Any] | None:
        return _json(self.raw_after)

    @property
    def client(self) -> dict[str, Any] | None:
        c = self.detail.get("client")
        return c if isinstance(c, dict) and c.get("name") else None

    @property
    def review(self) -> dict[str, Any] | None:
        r = self.detail.get("review")
        return r if isinstance(r, dict) else None

    @property
    def by_agent(self) -> bool:
        c = self.client
        return c is not None and c.get("via") != "review" and self.review is None and self.action in AGENT_ACTIONS

    def answers(self) -> bool:
        """A person's write that closes the entry's item (see the module's rules). A review action answers the entry
        it was taken on, not the others it rewrites on the way (a merge re-pointing an override)."""
        if self.review is not None:
            return bool(self.review.get("subject", self.entry_id) == self.entry_id)
        if self.action == "delete":
            return True
        b, a = self.before, self.after
        return self.action == "update" and b is not None and a is not None and b.get("status") != a.get("status")

    def summary(self) -> dict[str, Any]:
        return {"seq": self.seq, "ts": self.ts, "action": self.action, "client": describe(self.client)}


@dataclass
class Item:
    """One entry's unanswered agent writes (oldest first), and the entry's newest audit row of any source that
    wrote it (a review row that changed nothing, as accepting an entry already active, holds no version of it)."""

    entry_id: str
    writes: list[Write]
    last: Write

    @property
    def before(self) -> dict[str, Any] | None:
        return self.writes[0].before

    @property
    def after(self) -> dict[str, Any] | None:
        """The entry as its newest write left it (a person's edit after the agent's included); None: deleted."""
        return self.last.after

    @property
    def snapshot(self) -> dict[str, Any]:
        """The entry as it is, or its last version when it is gone."""
        for w in [self.last, *reversed(self.writes)]:
            for version in (w.after, w.before):
                if version is not None:
                    return version
        return {"id": self.entry_id}

    @property
    def client(self) -> str:
        return describe(self.writes[-1].client)

    @property
    def clients(self) -> list[str]:
        return list(dict.fromkeys(describe(w.client) for w in self.writes))

    @property
    def at(self) -> str:
        return self.writes[-1].ts

    @property
    def action(self) -> str:
        """add, update, status or delete: what the agent's writes did, taken together."""
        if self.after is None:
            return "delete"
        if self.before is None:
            return "add"
        return "status" if set(self.diff()) == {"status"} else "update"

    def diff(self) -> dict[str, dict[str, Any]]:
        """The fields that differ between ``before`` and ``after`` (both present)."""
        b, a = self.before, self.after
        if b is None or a is None:
            return {}
        return {f: {"before": b.get(f), "after": a.get(f)} for f in FIELDS if b.get(f) != a.get(f)}

    def change(self) -> dict[str, Any]:
        return {"action": self.action, "seq": self.writes[-1].seq, "writes": [w.summary() for w in self.writes],
                "diff": self.diff()}

    def matches(self, client: str | None, since: str | None) -> bool:
        if since is not None and self.at < since:
            return False
        if client is None:
            return True
        want = client.casefold()
        return any(want in (str((w.client or {}).get("name", "")).casefold(), describe(w.client).casefold())
                   for w in self.writes)

    def to_dict(self, evidence: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        snap = self.snapshot
        return {"entry": self.entry_id, "client": self.client, "at": self.at, "change": self.change(),
                "evidence": evidence or [], "wing": snap.get("wing"), "title": snap.get("title"),
                "type": snap.get("type"), "status": None if self.after is None else self.after.get("status"),
                "clients": self.clients}


def _writes(rows: list[tuple[Any, ...]]) -> dict[str, list[Write]]:
    out: dict[str, list[Write]] = {}
    for seq, ts, action, entry_id, wing, before, after, detail in rows:
        if entry_id is None:
            continue
        w = Write(int(seq), str(ts), str(action), str(entry_id), str(wing or ""), before, after, _json(detail) or {})
        out.setdefault(w.entry_id, []).append(w)
    return out


def _pending(history: list[Write]) -> list[Write]:
    """The entry's unanswered agent writes, by the module's rules."""
    pending: list[Write] = []
    before_batch: dict[str, list[Write]] = {}  # a review batch -> what was pending when it closed the item
    undone: set[str] = set()
    for w in history:
        if w.by_agent:
            pending.append(w)
            continue
        review = w.review or {}
        batch = str(review.get("batch", ""))
        if review.get("action") == "undo":
            target = str(review.get("undoes", ""))
            if target in before_batch and target not in undone:
                undone.add(target)
                pending = list(before_batch[target])
            continue
        if batch and batch not in before_batch:
            before_batch[batch] = list(pending)
        if w.answers():
            pending = []
    return pending


def items(log: ReviewRows, *, client: str | None = None, since: str | None = None) -> list[Item]:
    """Every entry with unanswered agent writes (by ``client``, last written at or after ``since``), by client then time."""
    out = []
    for entry_id, history in _writes(log.review_rows()).items():
        pending = _pending(history)
        if pending:
            item = Item(entry_id, pending, next(w for w in reversed(history) if w.action != "review"))
            if item.matches(client, since):
                out.append(item)
    return sorted(out, key=lambda i: (i.client.casefold(), i.at, i.entry_id))


def find(log: ReviewRows, entry_id: str) -> Item | None:
    """The item of ``entry_id``, if it has one."""
    return next((i for i in items(log) if i.entry_id == entry_id), None)
