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


_KINDS = {int: "a whole number", float: "a number", bool: "true or false"}


def _scalar(annotation: Any) -> type | None:
    """``int``, ``float`` or ``bool`` when ``annotation`` is one (or one or None), else None."""
    import types
    import typing

    if annotation in _KINDS:
        return annotation  # type: ignore[no-any-return]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and args[0] in _KINDS:
            return args[0]  # type: ignore[no-any-return]
    return None


def _fits(kind: type, value: Any) -> bool:
    if value is None or kind is bool:
        return value is None or isinstance(value, bool)
    return isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)


def wrong_file_type(model: type[BaseModel], data: dict[str, Any], where: str = "") -> tuple[str, str, Any] | None:
    """The first value of a configuration file's ``data`` whose TOML type is not its setting's (``k = true`` or
    ``k = "5"`` for a number, ``enabled = "yes"`` for a switch): ``(setting, expected, value)``. The environment's
    values are text by nature and go through pydantic's conversions; a file's have types of their own."""
    import typing

    for key, value in data.items():
        field = model.model_fields.get(str(key))
        if field is None:
            continue  # an unknown setting: pydantic says so
        name = f"{where}{key}"
        ann = field.annotation
        kind = _scalar(ann)
        table = (isinstance(ann, type) and issubclass(ann, BaseModel)) or typing.get_origin(ann) is dict
        if kind is not None:
            if not _fits(kind, value):
                return name, _KINDS[kind], value
        elif table and not isinstance(value, dict):  # `search = 3`: pydantic would name its own class
            return name, f"a table ([{name}] and its keys on the lines below)", value
        elif isinstance(ann, type) and issubclass(ann, BaseModel) and isinstance(value, dict):
            found = wrong_file_type(ann, value, f"{name}.")
            if found:
                return found
        elif typing.get_origin(ann) is dict and isinstance(value, dict):
            inner = typing.get_args(ann)[1] if len(typing.get_args(ann)) == 2 else None
            inner_kind = _scalar(inner)
            if inner_kind is not None:  # named numbers: the weights
                for sub, sub_value in value.items():
                    if not _fits(inner_kind, sub_value):
                        return f"{name}.{sub}", _KINDS[inner_kind], sub_value
            elif (isinstance(inner, type) and issubclass(inner, BaseModel)) or typing.get_origin(inner) is dict:
                for sub, sub_value in value.items():
                    if not isinstance(sub_value, dict):
                        return f"{name}.{sub}", f"a table ([{name}.{sub}] and its keys on the lines below)", sub_value
                    if isinstance(inner, type) and issubclass(inner, BaseModel):
                        found = wrong_file_type(inner, sub_value, f"{name}.{sub}.")
                        if found:
                            return found
    return None
