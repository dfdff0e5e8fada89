"""Profiles: named presets of the one pipeline, one per kind of question (memory, academic, personal, conversation).

The numbers below are the defaults. Any field can be changed, and new
profiles added, under ``[profiles.NAME]`` in the configuration file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memlens.errors import QueryError
from memlens.limits import MAX_K as K_MAX
from memlens.setting_checks import check_weights
from memlens.vocab import KINDS

MEMORY_COMMAND = "/memory"


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=64)
    description: str = Field("", max_length=1000)
    kinds: list[str] | None = Field(None, max_length=len(KINDS))
    rooms: list[str] | None = Field(None, max_length=1000)
    min_query_tokens: int = Field(0, ge=0, le=1000)
    min_score: float | None = Field(None, ge=-10, le=10, description="absolute floor on the profile's score")
    relative: float | None = Field(None, ge=0, le=1, description="keep hits scoring at least this share of the top hit")
    cap: int | None = Field(None, ge=1, le=K_MAX)
    year_boost: float = Field(0.0, ge=-1, le=1, description="per year since 2000, from meta.year (academic)")
    conversation_fusion: dict[str, float] | None = Field(None, description="raw/summary/recency weights (conversation)")
    recent_turns: int = Field(0, ge=0, le=100)
    fallback: Literal["personal_facts"] | None = None
    mandatory_invariants: bool = False
    weights: dict[str, float] = Field(default_factory=dict)

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: list[str] | None) -> list[str] | None:
        for k in v or []:
            if k not in KINDS:
                raise ValueError(f"unknown kind {k!r} (kinds: {', '.join(KINDS)})")
        return v

    @field_validator("conversation_fusion")
    @classmethod
    def _fusion(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        return None if v is None else check_weights(v, ("raw", "summary", "recency"))

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        return check_weights(v)


DEFAULT_PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="memory",
            description="all kinds; scope and authority policy; mandatory invariants of the active wing",
            mandatory_invariants=True,
        ),
        Profile(
            name="academic",
            description="documents; >= 2 query tokens; +0.002 per year since 2000; min 0.72; within 90% of top; cap 5",
            kinds=["document"],
            min_query_tokens=2,
            min_score=0.72,
            relative=0.90,
            cap=5,
            year_boost=0.002,
        ),
        Profile(
            name="personal",
            description="personal facts; min 0.60; within 90% of top; cap 5; stored facts as fallback",
            kinds=["fact"],
            rooms=["profile"],
            min_score=0.60,
            relative=0.90,
            cap=5,
            fallback="personal_facts",
        ),
        Profile(
            name="conversation",
            description="turns; 0.6 raw + 0.3 summary + 0.1 recency; min 0.48; + 4 latest turns of the session; cap 6",
            kinds=["turn"],
            min_score=0.48,
            cap=6,
            conversation_fusion={"raw": 0.6, "summary": 0.3, "recency": 0.1},
            recent_turns=4,
        ),
    )
}


def load_profiles(
    overrides: dict[str, dict[str, Any]] | None = None, origin: Callable[[tuple[Any, ...]], str] | None = None
) -> dict[str, Profile]:
    """Defaults with the configuration's ``[profiles.NAME]`` tables merged on top; ranges checked."""
    from pydantic import ValidationError as PydanticError

    from memlens.errors import MemlensError
    from memlens.setting_checks import describe_error

    profiles = dict(DEFAULT_PROFILES)
    for name, values in (overrides or {}).items():
        if not isinstance(values, dict):
            raise MemlensError(f"configuration: profiles.{name} must be a table, got {type(values).__name__}")
        base = (profiles[name].model_dump() if name in profiles else {}) | values
        base["name"] = name
        try:
            profiles[name] = Profile.model_validate(base)
        except PydanticError as exc:
            err = exc.errors()[0]
            loc = ("profiles", name, *err["loc"])
            where = origin(loc) if origin else "in the configuration's [profiles] table"
            raise MemlensError(describe_error(dict(err), Profile, tuple(err["loc"]), where, f"profiles.{name}.")) from None
    return profiles


def check_profiles(overrides: dict[str, dict[str, Any]], origin: Callable[[tuple[Any, ...]], str]) -> None:
    """Validate the configuration's profiles when settings load (not at the first search)."""
    load_profiles(overrides, origin)


def route(query: str, profile: str | None, profiles: dict[str, Profile]) -> tuple[str, Profile]:
    """The query text and profile: ``/memory ...`` always routes to ``conversation``."""
    stripped = query.lstrip()
    if stripped == MEMORY_COMMAND or stripped.startswith(MEMORY_COMMAND + " "):
        return stripped[len(MEMORY_COMMAND) :].strip(), profiles["conversation"]
    name = profile or "memory"
    if name not in profiles:
        raise QueryError(f"unknown profile {name!r} (profiles: {', '.join(profiles)})")
    return query, profiles[name]
