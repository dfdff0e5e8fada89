"""Where the settings come from: the configuration file, the ``MEMLENS_*`` variables, and which of them set a
value (for the one-line error a bad value gets). ``memlens.config.load_settings`` reads them through here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, get_args, get_origin

import platformdirs

APP = "memlens"
ENV_PREFIX = "MEMLENS_"
# MEMLENS_* variables that are not settings and are no typo: what memlens reads besides its settings (the file, the
# MCP server's early answer) and the name the README gives a client's bearer token. The project's tests and benchmarks
# name their own variables without the prefix.
OTHER_VARIABLES = frozenset({"MEMLENS_CONFIG", "MEMLENS_MCP_EARLY_INIT", "MEMLENS_TOKEN"})


def config_file() -> Path:
    return Path(os.environ.get("MEMLENS_CONFIG") or Path(platformdirs.user_config_dir(APP)) / "config.toml")


def read_config_file() -> tuple[Path | None, dict[str, Any]]:
    """(path, tables) of the configuration file; (None, {}) when there is none.

    The default file may be absent; a file named by ``MEMLENS_CONFIG`` must
    exist (``MEMLENS_CONFIG=/dev/null`` says "no file" explicitly).
    """
    import tomllib

    from memlens.errors import MemlensError
    from memlens.files import CONFIG_MAX_BYTES, read_file

    named = os.environ.get("MEMLENS_CONFIG")
    path = config_file()
    if named and os.path.realpath(named) == os.path.realpath(os.devnull):
        return None, {}
    if not named and not os.path.lexists(path):
        return None, {}
    if named and not os.path.lexists(path):
        raise MemlensError(f"configuration file {path} (named by MEMLENS_CONFIG): no such file")
    data = read_file(path, cap=CONFIG_MAX_BYTES, what="configuration file")
    try:
        return path, tomllib.loads(data.decode("utf-8").removeprefix("\ufeff"))  # a byte-order mark some editors write
    except UnicodeDecodeError as exc:
        raise MemlensError(f"configuration file {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise MemlensError(f"configuration file {path}: invalid TOML: {exc}") from None


def env_variable(loc: tuple[Any, ...]) -> str | None:
    """The ``MEMLENS_*`` variable that set the value at ``loc``, if one did (the most specific wins)."""
    names = {k.upper(): k for k in os.environ if k.upper().startswith(ENV_PREFIX)}
    for i in range(len(loc), 0, -1):
        var = ENV_PREFIX + "__".join(str(p).upper() for p in loc[:i])
        if var in names:
            return names[var]
    return None


def in_file(data: dict[str, Any], loc: tuple[Any, ...]) -> bool:
    node: Any = data
    for part in loc:
        if not isinstance(node, dict) or str(part) not in node:
            return False
        node = node[str(part)]
    return True


def origin_of(loc: tuple[Any, ...], overrides: dict[str, Any], file: Path | None, data: dict[str, Any]) -> str:
    if loc and str(loc[0]) in overrides:
        return "passed to load_settings"
    var = env_variable(loc)
    if var:
        return f"from environment variable {var}"
    if file is not None and in_file(data, loc[:1]):
        return f"in {file}"
    return f"see {config_file()} and {ENV_PREFIX}* variables"


def not_json(settings: Any, field: str | None) -> str | None:
    """Which ``MEMLENS_FIELD__KEY`` variable of a list or table setting of ``settings`` (the ``Settings`` class) holds
    no JSON, and how to write it."""
    section = settings.model_fields.get(field or "")
    model = section.annotation if section is not None else None
    for name, value in os.environ.items():
        key = name.upper().removeprefix(f"{ENV_PREFIX}{(field or '').upper()}__").lower()
        sub = getattr(model, "model_fields", {}).get(key) if key != name.lower() else None
        kinds = {get_origin(t) or t for t in (sub.annotation, *get_args(sub.annotation))} if sub is not None else set()
        if kinds & {list, tuple, dict}:
            try:
                json.loads(value)
            except ValueError:
                what, example = ("a table", '{"key": "value"}') if dict in kinds else ("a list", '["a", "b"]')
                return f"environment variable {name}: {field}.{key} is {what}, written as JSON: for example {name}='{example}'"
    return None


def setting_variables(settings: Any) -> list[str]:
    """The variable of each setting of ``settings`` (the ``Settings`` class) and of each key of its tables:
    MEMLENS_SEARCH, MEMLENS_SEARCH__K ..."""
    out = []
    for name, field in settings.model_fields.items():
        out.append(ENV_PREFIX + name.upper())
        out += [f"{ENV_PREFIX}{name.upper()}__{key.upper()}" for key in getattr(field.annotation, "model_fields", {})]
    return out


def stray_variables(settings: Any) -> list[tuple[str, str | None, bool]]:
    """The ``MEMLENS_*`` variables that set nothing, each with the closest variable that would and whether it names
    a table ``settings`` does not have (MEMLENS_SERACH__K: a setting mistyped, an error as in the file) rather than a
    plain name memlens does not read (MEMLENS_SEARCH_K: perhaps someone else's variable, only warned about). Names
    are compared in capitals, as the settings read them."""
    import difflib

    known = setting_variables(settings)
    tables = {ENV_PREFIX + name.upper() for name in settings.model_fields}
    out = []
    for name in sorted(os.environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in OTHER_VARIABLES:
            continue
        head, nested, _ = upper.partition("__")
        if head in tables:
            continue  # a setting, or a key of one of its tables (a wrong key is the settings' own error)
        tails = [k[len(ENV_PREFIX):] for k in [*known, *sorted(OTHER_VARIABLES)]]  # the prefix they share is no likeness
        close = difflib.get_close_matches(upper[len(ENV_PREFIX):], tails, n=1)
        out.append((name, ENV_PREFIX + close[0] if close else None, bool(nested)))
    return out


def stray_warnings(settings: Any) -> list[str]:
    """A warning line for each ``MEMLENS_*`` variable that sets nothing and names no table (``stray_variables``: one
    that names a table is the settings' error)."""
    return [f"warning: environment variable {var} is not a memlens setting and is ignored"
            + (f" (did you mean {close}?)" if close else "") for var, close, mistyped in stray_variables(settings)
            if not mistyped]
