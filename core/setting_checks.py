"""Checks shared by the settings and the retrieval profiles: named weights, and one readable line per
invalid setting (what is wrong, the allowed range, where the value came from).

It sits below both ``memlens.config`` and ``memlens.profiles`` so neither has to import the other.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel

from memlens.secrets import without_password

WEIGHT_NAMES = ("relevance", "recency", "salience")
FLOAT_MAX = 1000.0  # weights and boosts: anything larger only reorders ties

def check_weights(value: dict[str, float], names: tuple[str, ...] = WEIGHT_NAMES) -> dict[str, float]:
    """Named weights: known names, finite, between 0 and FLOAT_MAX."""
    for k, v in value.items():
        if k not in names:
            raise ValueError(f"unknown weight {k!r} (weights: {', '.join(names)})")
        if not math.isfinite(v) or not 0 <= v <= FLOAT_MAX:
            raise ValueError(f"weight {k!r} must be a finite number from 0 to {FLOAT_MAX:g}, got {v!r}")
    return value


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def allowed_range(model: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    """"from 1 to 4096" for a bounded numeric field at ``loc`` under ``model``."""
    from annotated_types import Ge, Gt, Le, Lt

    field = None
    current: Any = model  # a model class while the path goes through sub-models
    for part in loc:
        fields = current.model_fields if isinstance(current, type) and issubclass(current, BaseModel) else {}
        field = fields.get(str(part))
        if field is None:
            return None
        current = field.annotation
    lo = hi = None
    for m in field.metadata if field is not None else ():
        if isinstance(m, Ge):
            lo = _num(m.ge)
        elif isinstance(m, Gt):
            lo = f"above {_num(m.gt)}"
        elif isinstance(m, Le):
            hi = _num(m.le)
        elif isinstance(m, Lt):
            hi = f"below {_num(m.lt)}"
    if lo is None and hi is None:
        return None
    return f"from {lo} to {hi}" if lo and hi else f"at least {lo}" if lo else f"at most {hi}"


_BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
SECRET_SETTINGS = ("api_key", "tokens")


def describe_error(err: dict[str, Any], model: type[BaseModel], loc: tuple[Any, ...], origin: str, prefix: str = "") -> str:
    """One line for one pydantic error: the setting, what is wrong, the allowed range and where the value came from."""
    where = prefix + ".".join(str(p) for p in loc)
    msg = re.sub(r"^Value error, ", "", str(err.get("msg", "invalid value")))
    msg = msg[:1].lower() + msg[1:]
    if err.get("type") == "extra_forbidden":
        return f"configuration: unknown setting {where} ({origin})"
    value = err.get("input")
    if any(str(part) in SECRET_SETTINGS for part in loc):  # a key is never repeated, not even a refused one
        return f"configuration: {where}: {msg} ({origin})"
    if isinstance(value, str):
        value = without_password(value)  # a URL is shown without the password of its userinfo
    shown = str(value) if err.get("type") in _BOUND_ERRORS else repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    rng = allowed_range(model, loc)
    if rng and err.get("type") in _BOUND_ERRORS:
        return f"configuration: {where} = {shown} is out of range: allowed {rng} ({origin})"
    if err.get("type") == "value_error" or isinstance(value, (dict, list)):
        return f"configuration: {where}: {msg} ({origin})"
    extra = f"; allowed {rng}" if rng else ""
    return f"configuration: {where}: {msg}{extra}, got {shown} ({origin})"
