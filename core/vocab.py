"""The data model's vocabularies, importable without pydantic (the app's first frame needs them)."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
GLOBAL_WING = "_global"
KINDS = ("turn", "fact", "entity", "procedure", "document", "code", "web")  # web: fetched page text, untrusted
UNTRUSTED_KINDS = ("web",)  # never an invariant or a decision unless a person promotes it (memlens.untrusted)
TYPES = ("invariant", "decision", "pattern", "note")  # authority, highest first: an invariant outranks a decision, and so on
STATUSES = ("active", "under_review", "deprecated")
AUTHORITY = {t: i for i, t in enumerate(TYPES)}
