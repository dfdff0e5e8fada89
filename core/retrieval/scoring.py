"""Scoring pieces: weights, recency decay, per-kind min-max normalisation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from memlens.errors import ValidationError


@dataclass(frozen=True)
class RetrievalWeights:
    """Weights of the final score. The defaults reproduce plain relevance order."""

    relevance: float = 1.0
    recency: float = 0.0
    salience: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> RetrievalWeights:
        return cls().merge(data or {})

    def merge(self, other: RetrievalWeights | dict[str, Any] | None) -> RetrievalWeights:
        """A copy with ``other``'s values on top (a dict may set only some weights)."""
        if other is None:
            return self
        data = other.to_dict() if isinstance(other, RetrievalWeights) else dict(other)
        if not data:  # every search merges the settings' weights and the profile's, mostly none
            return self
        known = _WEIGHT_NAMES
        unknown = set(data) - known
        if unknown:
            raise ValidationError(f"unknown retrieval weight {sorted(unknown)[0]!r} (weights: {', '.join(sorted(known))})")
        for k, v in data.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or not math.isfinite(v):
                raise ValidationError(f"retrieval weight {k!r} must be a finite number >= 0, got {v!r}")
        return replace(self, **{k: float(v) for k, v in data.items()})

    def to_dict(self) -> dict[str, float]:
        return {"relevance": self.relevance, "recency": self.recency, "salience": self.salience}


_WEIGHT_NAMES = frozenset(f.name for f in fields(RetrievalWeights))
assert set(RetrievalWeights().to_dict()) == _WEIGHT_NAMES, "RetrievalWeights.to_dict is out of date"


def recency(updated_at: datetime, now: datetime, half_life_days: float) -> tuple[float, float]:
    """(score, age in days): exponential decay, 1.0 now, 0.5 after one half-life."""
    age = max(0.0, (now - updated_at).total_seconds() / 86400.0)
    if half_life_days <= 0:
        return 1.0, age
    return math.exp(-math.log(2) * age / half_life_days), age


def recency_many(stamps: Sequence[str], now: datetime, half_life_days: float) -> list[tuple[float, float]]:
    """``recency`` of many stored timestamps at once, rounded as the trace shows them (6 and 3 places).

    A search scores ~100 candidates, whose stamps are few (entries written together share one): each
    distinct stamp is worked out once, and each is parsed once per process (``_stamp_us``). The age is
    the whole microseconds between the two, in days.
    """
    if not stamps:
        return []
    now_us = (now.astimezone(timezone.utc).replace(tzinfo=None) - _EPOCH) // _MICROSECOND
    each = {}
    for x in dict.fromkeys(stamps):
        age = max((now_us - _stamp_us(x)) / 86_400e6, 0.0)
        score = math.exp(-math.log(2) * age / half_life_days) if half_life_days > 0 else 1.0
        each[x] = (round(score, 6), round(age, 3))
    return [each[x] for x in stamps]


_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
STAMPS_KEPT = 50_000
_stamps: dict[str, int] = {}  # stored timestamp -> microseconds since the epoch (UTC)


def _stamp_us(stamp: str) -> int:
    """A stored timestamp as whole microseconds since the epoch: the store's own form (``…Z``) read directly,
    any other through ``parse_ts``; kept per process."""
    got = _stamps.get(stamp)
    if got is None:
        if len(stamp) in (20, 27) and stamp[-1] == "Z":
            naive = datetime.fromisoformat(stamp[:-1])
        else:
            from memlens.models import parse_ts

            naive = parse_ts(stamp).astimezone(timezone.utc).replace(tzinfo=None)
        got = (naive - _EPOCH) // _MICROSECOND
        if len(_stamps) >= STAMPS_KEPT:
            _stamps.clear()
        _stamps[stamp] = got
    return got


def minmax(values: dict[Any, float], *, floor_single: bool = True) -> tuple[dict[Any, float], list[float] | None]:
    """Min-max normalise to 0..1 and return the bounds used.

    A group whose values are all equal (one candidate, say) cannot be stretched;
    its values are kept as they are, clipped to 0..1, rather than inflated to 1.0,
    so a lone weak match does not look perfect.
    """
    norm, bounds = minmax_list(list(values.values()), floor_single=floor_single)
    return dict(zip(values, norm)), bounds


def minmax_missing(values: list[float | None]) -> tuple[list[float], list[float] | None]:
    """``minmax_list`` of the values that are not None, in one list with 0.0 where a value is missing (a candidate
    one generator did not find): the pipeline's normalisation, without splitting the pool and merging it back."""
    present = [v for v in values if v is not None]
    if not present:
        return [0.0] * len(values), None
    lo, hi = min(present), max(present)
    if hi - lo < 1e-9:  # as minmax_list's floor_single: clipped, not inflated
        return [0.0 if v is None else min(1.0, max(0.0, v)) for v in values], [lo, hi]
    span = hi - lo
    return [0.0 if v is None else (v - lo) / span for v in values], [lo, hi]


def minmax_list(values: list[float], *, floor_single: bool = True) -> tuple[list[float], list[float] | None]:
    """``minmax`` of a list: the normalised values in the same order, and the bounds (None for no values)."""
    if not values:
        return [], None
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:
        if floor_single:
            return [min(1.0, max(0.0, v)) for v in values], [lo, hi]
        return [1.0] * len(values), [lo, hi]
    span = hi - lo
    return [(v - lo) / span for v in values], [lo, hi]
