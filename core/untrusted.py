"""Text from the web stays marked as web text for as long as it is stored.

An entry of kind ``web`` (``memlens web --save``) is untrusted: a page's author
wrote it, and a page may address a model with instructions. Its origin is fixed
when it is created:

- its kind stays ``web`` and no other entry becomes ``web`` by an edit; its
  ``meta.source`` and ``meta.untrusted`` stay as saved, so search flags it
  ``untrusted`` and the agent context labels it for its whole life;
- it is never an ``invariant`` or a ``decision`` (the types that bind an agent)
  unless a person promoted exactly this text to exactly that type. The
  promotion is an explicit step (``memlens edit ID type=invariant --promote``,
  a confirmation in the app's entry screen), recorded in ``meta.promoted``
  (type, who, when, the text's sha256) and in the audit. No other edit can
  write ``meta.promoted``, and the MCP tools cannot promote at all, so an agent
  (or a page steering one) can never turn page text into a rule.

A later edit of the promoted text or type voids the promotion: the entry can
then be an authority type again only through a new promotion. An import (a
person restoring an export, or ``memlens copy``) keeps entries as they were
exported, a promotion included.
"""

from __future__ import annotations

import hashlib
from typing import Any

from memlens.errors import ValidationError
from memlens.vocab import UNTRUSTED_KINDS

ORIGIN_KEYS = ("source", "untrusted", "fetched_at", "requested_url")  # set when the page was saved: kept for life
PROMOTED = "promoted"  # meta key of a person's promotion
AUTHORITY_TYPES = ("invariant", "decision")
PROMOTERS = ("cli", "app")  # where a person promotes: the CLI's --promote, the app's confirmation


def _value(v: Any) -> str:
    return str(getattr(v, "value", v))


def is_untrusted(kind: Any) -> bool:
    return _value(kind) in UNTRUSTED_KINDS


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def how_to_promote(entry_id: str, type_: str) -> str:
    return f"only a person can promote it: memlens edit {entry_id} type={type_} --promote, or confirm it in the app"


def authority_problem(entry_id: str, kind: Any, type_: Any, text: str, meta: dict[str, Any]) -> str | None:
    """Why this entry cannot be stored as it is (web text of an authority type without a promotion that covers it)."""
    t = _value(type_)
    if not is_untrusted(kind) or t not in AUTHORITY_TYPES:
        return None
    promoted = meta.get(PROMOTED)
    if isinstance(promoted, dict) and promoted.get("type") == t and promoted.get("text_sha256") == text_sha256(text):
        return None
    article = "an" if t == "invariant" else "a"
    return f"a {_value(kind)} entry is untrusted text and cannot be {article} {t}; {how_to_promote(entry_id, t)}"


def refuse_new_authority(kind: Any, type_: Any, meta: Any) -> None:
    """A new web entry is stored as untrusted text first: no id exists yet for a person to promote (a forged
    promotion is refused by ``refuse_new_promotion``, named as such)."""
    t = _value(type_)
    if is_untrusted(kind) and t in AUTHORITY_TYPES and not (isinstance(meta, dict) and PROMOTED in meta):
        raise ValidationError(f"type: a new web entry is untrusted text and cannot be {'an' if t == 'invariant' else 'a'} "
                              f"{t}: save it as a note, then a person can promote it (memlens edit ID type={t} --promote, "
                              "or in the app)")


def refuse_new_promotion(kind: Any, meta: dict[str, Any]) -> None:
    """A new web entry (``add``, ``memory_add``) carries no promotion: a person promotes one that is stored."""
    if is_untrusted(kind) and PROMOTED in meta:
        raise ValidationError("meta.promoted: a new web entry cannot arrive promoted; save it as a note, then a person "
                              "can promote it (memlens edit ID type=invariant --promote)")


def carry_origin(before: Any, record: dict[str, Any], promoted_by: str | None, now: str) -> None:
    """Prepare the edited ``record`` of ``before``: refuse a change of origin, keep the origin keys, and attach a
    person's promotion when ``promoted_by`` names one (``record`` is changed in place)."""
    _check_kind(before, record["kind"])
    if not is_untrusted(before.kind):
        if promoted_by is not None:
            raise ValidationError(f"--promote is for web text; {before.id} is a {_value(before.kind)} entry: "
                                  "edit it without --promote")
        return
    if not isinstance(record.get("meta") or {}, dict):
        raise ValidationError("field 'meta': Input should be a valid dictionary")  # as the entry's own check says it
    meta = dict(record.get("meta") or {})
    for key in (*ORIGIN_KEYS, PROMOTED):
        if key not in meta and key in before.meta:
            meta[key] = before.meta[key]  # an edit that does not name them keeps them
    if promoted_by is None:
        if PROMOTED in meta and (_value(record["type"]) != _value(before.type) or record["text"] != before.text):
            del meta[PROMOTED]  # the promotion covered this text at this type: a change voids it
    else:
        if promoted_by not in PROMOTERS:
            raise ValidationError(f"promoted_by must be one of {', '.join(PROMOTERS)}")
        t = _value(record["type"])
        if t not in AUTHORITY_TYPES:
            raise ValidationError(f"--promote gives web text an authority type: add type=invariant or type=decision "
                                  f"(the entry would be a {t})")
        meta[PROMOTED] = {"type": t, "by": promoted_by, "at": now, "from_type": _value(before.type),
                          "text_sha256": text_sha256(record["text"])}
    record["meta"] = meta
    check_edit(before, record["kind"], meta, promoting=promoted_by is not None)


def check_edit(before: Any, kind: Any, meta: dict[str, Any], *, promoting: bool) -> None:
    """Refuse an edit of ``before`` into ``kind``/``meta`` that changes its origin or its promotion (run again inside
    the write transaction, against the row as stored then)."""
    _check_kind(before, kind)
    if not is_untrusted(before.kind):
        return
    for key in ORIGIN_KEYS:
        if meta.get(key) != before.meta.get(key):
            raise ValidationError(f"meta.{key}: entry {before.id} is web text; where it came from is fixed when it is "
                                  "saved and cannot be edited")
    if not promoting and meta.get(PROMOTED) not in (None, before.meta.get(PROMOTED)):  # kept or voided, never made
        raise ValidationError(f"meta.{PROMOTED}: {how_to_promote(before.id, 'invariant')}")


def _check_kind(before: Any, kind: Any) -> None:
    if is_untrusted(before.kind) and not is_untrusted(kind):
        raise ValidationError(f"kind: entry {before.id} is web text (untrusted) and stays kind web; "
                              f"{how_to_promote(before.id, 'invariant')}")
    if is_untrusted(kind) and not is_untrusted(before.kind):
        raise ValidationError(f"kind: only text saved from the web is kind web (memlens web --save); {before.id} "
                              f"is a {_value(before.kind)} entry")
