"""Profiles: named presets of the one pipeline (seed 003 routes).

The seed's numbers are the defaults. Any field can be changed, and new
profiles added, under ``[profiles.NAME]`` in the configuration file.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .errors import QueryError

MEMORY_COMMAND = "/memory"


class Profile(BaseModel):
    name: str
    description: str = ""
    kinds: list[str] | None = None
    rooms: list[str] | None = None
    min_query_tokens: int = 0
    min_score: float | None = Field(None, description="absolute floor on the profile's score")
    relative: float | None = Field(None, description="keep hits scoring at least this share of the top hit")
    cap: int | None = None
    year_boost: float = Field(0.0, description="per year since 2000, from meta.year (academic)")
    conversation_fusion: dict[str, float] | None = Field(None, description="raw/summary/recency weights (conversation)")
    recent_turns: int = 0
    fallback: Literal["personal_facts"] | None = None
    mandatory_invariants: bool = False
    weights: dict[str, float] = Field(default_factory=dict)


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


def load_profiles(overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, Profile]:
    """Defaults with the configuration's ``[profiles.NAME]`` tables merged on top."""
    from pydantic import ValidationError as PydanticError

    from .errors import MemlensError

    profiles = dict(DEFAULT_PROFILES)
    for name, values in (overrides or {}).items():
        base = profiles.get(name, Profile(name=name)).model_dump()
        base.update(values or {})
        base["name"] = name
        try:
            profiles[name] = Profile.model_validate(base)
        except PydanticError as exc:
            err = exc.errors()[0]
            raise MemlensError(f"configuration: profiles.{name}.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    return profiles


def route(query: str, profile: str | None, profiles: dict[str, Profile]) -> tuple[str, Profile]:
    """The query text and profile: ``/memory ...`` always routes to ``conversation``."""
    stripped = query.lstrip()
    if stripped == MEMORY_COMMAND or stripped.startswith(MEMORY_COMMAND + " "):
        return stripped[len(MEMORY_COMMAND) :].strip(), profiles["conversation"]
    name = profile or "memory"
    if name not in profiles:
        raise QueryError(f"unknown profile {name!r} (profiles: {', '.join(profiles)})")
    return query, profiles[name]
