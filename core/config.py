"""Configuration: defaults < TOML file < MEMLENS_* environment < explicit arguments.

The file is ``platformdirs.user_config_dir("memlens")/config.toml`` or the path
in ``MEMLENS_CONFIG``. Nested tables map to nested models, e.g.::

    [embedding]
    backend = "sentence-transformers"
    [search]
    vector_weight = 0.8
"""

from __future__ import annotations

import os
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from memlens.config_source import APP, ENV_PREFIX, env_variable, not_json, origin_of, read_config_file, stray_variables
from memlens.limits import MAX_ENTRY_CHARS_SETTING, MAX_K, SQLITE_VEC_MAX_KNN
from memlens.setting_checks import FLOAT_MAX, check_weights, describe_error, wrong_file_type

BUNDLED_MODEL = "all-MiniLM-L6-v2"
BUNDLED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# sqlite-vec answers a KNN query with at most this many rows; a search asks for
# max(search.candidates, 3 * k) of them (clamped), and k is bounded like the CLI's -k.
KNN_MAX_ROWS = SQLITE_VEC_MAX_KNN
K_MAX = MAX_K

_FILE_DATA: ContextVar[dict[str, Any] | None] = ContextVar("memlens_config_file_data", default=None)


def default_store_path() -> Path:
    return Path(platformdirs.user_data_dir(APP)) / "memlens.db"


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP))


def check_dir_path(value: Path) -> Path:
    """A folder memlens may create files in: a directory, or absent under a directory.

    System pseudo-filesystems (``/proc``, ``/sys``, ``/dev`` but ``/dev/shm``)
    are refused: their folders exist but files cannot be made there.
    """
    from memlens.files import expand_user, on_pseudo_fs

    path = expand_user(value)
    try:
        pseudo = on_pseudo_fs(path)
        if pseudo:
            raise ValueError(f"{value} is on a system pseudo-filesystem ({pseudo}), not a folder for files")
        probe = path
        while not os.path.lexists(probe) and probe.parent != probe:
            probe = probe.parent
        if not probe.is_dir():
            from memlens.files import kind_of

            kind = kind_of(os.stat(probe).st_mode) if probe.exists() else "a dangling symbolic link"
            raise ValueError((f"{value}: " if probe != path else "") + f"{probe} is {kind}, not a directory")
    except OSError as exc:
        raise ValueError(f"{value} is not usable ({exc.strerror or exc})") from None
    return path


def _not_blank(v: Any) -> Any:
    if isinstance(v, str) and not v.strip():
        raise ValueError("must not be empty")
    return v


class _Section(BaseModel):
    """A table of the configuration: unknown keys are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class EmbeddingConfig(_Section):
    model: str = Field(BUNDLED_MODEL, min_length=1, max_length=4096,
                       description="'all-MiniLM-L6-v2' (bundled) or a local sentence-transformers directory")
    backend: Literal["onnx", "sentence-transformers"] = "onnx"
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$",
                               description="expected sha256 of the weights; the bundled model's is built in")
    max_tokens: int = Field(256, ge=1, le=8192)
    batch_size: int = Field(64, ge=1, le=4096)
    threads: int = Field(0, ge=0, le=1024, description="ONNX Runtime intra-op threads; 0 lets it choose")

    @field_validator("sha256")
    @classmethod
    def _lower(cls, v: str | None) -> str | None:
        return v.lower() if v else v


class SearchConfig(_Section):
    vector_weight: float = Field(0.8, ge=0, le=FLOAT_MAX)
    lexical_weight: float = Field(0.2, ge=0, le=FLOAT_MAX)
    k: int = Field(10, ge=1, le=K_MAX)
    candidates: int = Field(50, ge=1, le=KNN_MAX_ROWS, description="candidates fetched per wing from each of KNN and FTS5")
    vector_index: Literal["auto", "sqlite-vec"] = Field(
        "auto", description="'auto': sqlite-vec until Memory.warm_index() loads the in-process index"
    )


class StoreConfig(_Section):
    busy_timeout_ms: int = Field(5000, ge=0, le=3_600_000)
    mmap_size: int = Field(1 << 30, ge=0, le=1 << 40)
    synchronous: Literal["normal", "full"] = Field(
        "normal", description="SQLite stores: 'normal' keeps every commit through a crash of any process, 'full' "
                              "also through a power loss or an OS crash (each commit waits for the disk)")


class RetrievalConfig(_Section):
    """How results are scored (active-wing boost, weights, recency) and when two entries are duplicates, not a conflict."""

    active_wing_boost: float = Field(1.2, ge=0, le=FLOAT_MAX)
    weights: dict[str, float] = Field(default_factory=dict, description="relevance / recency / salience")
    half_life_days: float = Field(30.0, ge=0, le=36500, description="0: no recency decay")
    normalise: Literal["per_kind", "pool"] = "per_kind"
    dedup_similarity: float = Field(0.90, ge=0, le=1, description="same key and at least this cosine: one entry, not a conflict")
    conflict_similarity: float = Field(
        0.52,
        ge=0,
        le=1,
        description="invariants/decisions of different wings at least this similar, no override: flagged conflict",
    )
    user: str = Field("default", min_length=1, max_length=256)

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        return check_weights(v)


class CacheConfig(_Section):
    enabled: bool = True
    ttl_seconds: float = Field(60.0, ge=0, le=7 * 86400)
    max_entries: int = Field(512, ge=0, le=100_000)


class RerankConfig(_Section):
    enabled: bool = False
    model: str | None = Field(
        None, min_length=1, max_length=4096, description="a local sentence-transformers CrossEncoder directory"
    )
    top_n: int = Field(20, ge=1, le=K_MAX)


class AuditConfig(_Section):
    level: Literal["writes", "reads"] = Field("reads", description="'reads' also logs every retrieval's metrics")
    retrieval_max_rows: int = Field(
        10_000, ge=1, le=100_000_000, description="retrieval records kept (newest); writes are always kept"
    )
    retrieval_max_age_days: float = Field(90.0, gt=0, le=36_500, description="retrieval records older than this are pruned")


class ExportConfig(_Section):
    """Where ``search --format openinference`` also sends its spans (OTLP/HTTP, JSON); nothing is sent when unset."""

    otlp_endpoint: str | None = Field(None, min_length=1, max_length=2048,
                                      description="an http(s) URL; '/v1/traces' is appended unless it ends with it")
    timeout_s: float = Field(5.0, gt=0, le=120)

    @field_validator("otlp_endpoint")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s/]+", v):
            raise ValueError("must be an http:// or https:// URL")
        return v


class WorkingMemoryConfig(_Section):
    """Working memory: the sliding window of recent tasks an agent sees, and the bound on stored tasks."""

    window: int = Field(5, ge=0, le=1000, description="completed tasks shown by `memlens tasks` and in agent context")
    max_tasks: int = Field(
        100, ge=1, le=1_000_000, description="completed tasks kept; older ones are pruned (the audit keeps them)"
    )


class WebProviderConfig(_Section):
    """One search provider: its API key and, to use a proxy or a test server, its base URL."""

    api_key: str | None = Field(None, min_length=1, max_length=4096)
    base_url: str | None = Field(None, pattern=r"^https?://[^\s]+$", max_length=2048)


class WebProvidersConfig(_Section):
    brave: WebProviderConfig = WebProviderConfig()
    serpapi: WebProviderConfig = WebProviderConfig()
    tavily: WebProviderConfig = WebProviderConfig()


class WebConfig(_Section):
    """Web context (`memlens web`): where fetches may go, their bounds, and the search provider."""

    allow_hosts: list[str] = Field(
        default_factory=list, max_length=1000,
        description="hosts, addresses or networks that may be fetched although private or loopback",
    )
    respect_robots: bool = True
    user_agent: str = Field("memlens-web/0.1", min_length=1, max_length=200, pattern=r"^[\x21-\x7e][\x20-\x7e]*$")
    max_concurrency: int = Field(4, ge=1, le=32)
    connect_timeout: float = Field(5.0, gt=0, le=120)
    read_timeout: float = Field(10.0, gt=0, le=600)
    deadline_seconds: float = Field(20.0, gt=0, le=600, description="the whole call: fetches still running then are dropped")
    max_bytes: int = Field(2_000_000, ge=1024, le=50_000_000, description="bytes read of one page; the rest is not read")
    max_redirects: int = Field(3, ge=0, le=3)
    extract_timeout: float = Field(10.0, gt=0, le=300, description="seconds the text extraction of one page may take")
    source_chars: int = Field(4000, ge=100, le=1_000_000, description="characters kept of one page")
    total_chars: int = Field(12000, ge=100, le=10_000_000, description="characters of web text in one context")
    max_urls: int = Field(10, ge=1, le=100, description="URLs one call may fetch")
    provider: Literal["brave", "serpapi", "tavily"] | None = Field(None, description="search provider for --search")
    max_results: int = Field(5, ge=1, le=20, description="search results fetched")
    providers: WebProvidersConfig = WebProvidersConfig()
class LlmConfig(_Section):
    """The chat model ``memlens ask`` and the app's assistant shell answer with: any OpenAI-compatible endpoint."""

    base_url: str | None = Field(None, min_length=1, max_length=2048,
                                 description="e.g. http://127.0.0.1:11434/v1 (ollama); the client posts to BASE/chat/completions")
    model: str | None = Field(None, min_length=1, max_length=256, description="the model name the endpoint expects")
    # no length bound: a refused value would be echoed in the one-line configuration error
    api_key: str | None = Field(None, repr=False, description="sent as a Bearer token; never printed")
    timeout: float = Field(120.0, gt=0, le=3600, description="seconds for a whole answer")
    connect_timeout: float = Field(10.0, gt=0, le=600, description="seconds to connect")
    read_timeout: float = Field(60.0, gt=0, le=3600, description="seconds of silence tolerated while streaming")
    max_tokens: int | None = Field(None, ge=1, le=1_000_000, description="cap on the answer's length (the server's default)")

    @field_validator("base_url")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s/?#]+", v):
            raise ValueError("must be an http:// or https:// URL")
        return v.rstrip("/") if v else v

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)


HOST_ENTRY = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(?P<port>\*|\d{1,5}))?$")
# a bearer token's entry (memlens.mcp.tokens): its name, the SHA-256 of the token, and whether it may only read
TOKEN_ENTRY = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._@-]{0,63})\s+sha256:(?P<digest>[0-9a-f]{64})"
                         r"(?:\s+(?P<read_only>read-only))?\s*$")
TOKEN_FORM = "NAME sha256:DIGEST [read-only]"
ORIGIN_ENTRY = re.compile(r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:(\*|\d{1,5}))?$")


class McpConfig(_Section):
    """``memlens mcp --transport http``: the names a client may reach it by, besides loopback and the --host address."""

    allowed_hosts: list[str] = Field(default_factory=list, max_length=100,
                                     description="Host header values served: NAME, NAME:PORT or NAME:* ([v6] bracketed)")
    allowed_origins: list[str] = Field(default_factory=list, max_length=100,
                                       description="Origin header values served besides http://HOST of those names")
    tokens_file: Path | None = Field(None, description="the bearer tokens' file (default: mcp-tokens beside config.toml, "
                                                       "used when it exists); owner-only permissions")
    tokens: list[str] = Field(default_factory=list, max_length=1000, repr=False,
                              description="token entries 'NAME sha256:HEX [read-only]', as in the file (e.g. from the "
                                          "environment: MEMLENS_MCP__TOKENS='[\"...\"]')")
    max_body_bytes: int = Field(2 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024,
                                description="largest HTTP request body; a larger one gets 413")
    max_sessions: int = Field(200, ge=1, le=100_000, description="open HTTP sessions at most; one more gets 503")
    max_sessions_per_token: int = Field(
        64, ge=1, le=100_000, description="open HTTP sessions of one bearer token at most (keep it above the number "
                                          "of clients sharing one token); one more closes that token's least recently "
                                          "used session (503 when each of them is running a request)")
    session_idle_seconds: float = Field(1800.0, ge=1, le=7 * 86400,
                                        description="an HTTP session idle this long (no request, no event stream "
                                                    "open) is closed")

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        for entry in v:
            if not HOST_ENTRY.match(entry):
                raise ValueError(f"{entry[:80]!r} is not a host name or address with an optional :PORT or :*")
        return v

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        for entry in v:
            if not ORIGIN_ENTRY.match(entry):
                raise ValueError(f"{entry[:80]!r} is not an origin like http://host:port")
        return v

    @field_validator("tokens")
    @classmethod
    def _tokens(cls, v: list[str]) -> list[str]:
        for number, entry in enumerate(v, 1):  # never repeated in the error: it might be a token pasted by mistake
            if not TOKEN_ENTRY.match(entry.split("#", 1)[0]):
                raise ValueError(f"entry {number} is not {TOKEN_FORM!r} (a token itself is never stored: "
                                 f"add one with `memlens mcp token add NAME`)")
        return v


class ReviewConfig(_Section):
    """Curating what agents wrote (``memlens review``) and checking the whole store (``memlens lint``)."""

    agent_writes: Literal["under_review", "active"] = Field(
        "under_review", description="the status an MCP client's add or edit leaves the entry in (a deprecation stays one)")
    reviewer: str | None = Field(None, min_length=1, max_length=80,
                                 description="the name review actions are audited under (default: the login name)")
    duplicate_similarity: float = Field(
        0.65, ge=0, le=1, description="near-duplicates: stored vectors at least this similar (cosine) ...")
    duplicate_shared_text: float = Field(
        0.95, ge=0, le=1, description="... and at least this share of the shorter entry's words in the other")
    unused_days: float = Field(30.0, gt=0, le=36_500,
                               description="lint: an entry no logged search returned for this long while its wing was searched")
    pending_days: float = Field(14.0, gt=0, le=36_500, description="lint: an entry under review for longer than this")
    budget: int = Field(800, ge=1, le=1_000_000, description="lint: an entry longer than this many tokens never fits a context")


class LimitsConfig(BaseModel):
    max_entry_chars: int = Field(100_000, ge=1, le=MAX_ENTRY_CHARS_SETTING,
                                 description="longest entry text add/update/import accept; split longer documents")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    store: str | Path | None = Field(None, description="the store: a SQLite file, or a postgresql:// URI")
    cache_dir: Path = Field(default_factory=default_cache_dir)
    embedding: EmbeddingConfig = EmbeddingConfig()
    search: SearchConfig = SearchConfig()
    storage: StoreConfig = StoreConfig()
    working_memory: WorkingMemoryConfig = WorkingMemoryConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    cache: CacheConfig = CacheConfig()
    rerank: RerankConfig = RerankConfig()
    audit: AuditConfig = AuditConfig()
    export: ExportConfig = ExportConfig()
    limits: LimitsConfig = LimitsConfig()
    web: WebConfig = WebConfig()
    llm: LlmConfig = LlmConfig()
    mcp: McpConfig = McpConfig()
    review: ReviewConfig = ReviewConfig()
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)

    _blank = field_validator("store", "cache_dir", mode="before")(_not_blank)

    @field_validator("cache_dir")
    @classmethod
    def _cache_dir(cls, v: Path) -> Path:
        return check_dir_path(v)

    @field_validator("store", mode="after")
    @classmethod
    def _store(cls, v: str | Path | None) -> str | Path | None:
        """A ``postgresql://`` URI stays a string (a path would fold its ``//``); anything else is a file path."""
        if v is None or (isinstance(v, str) and v.startswith(("postgresql://", "postgres://"))):
            return v
        return Path(v)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        data = _FILE_DATA.get()
        if data is None:
            _, data = read_config_file()
        return (init_settings, env_settings, InitSettingsSource(settings_cls, init_kwargs=data))

    def store_path(self) -> str | Path:
        """The store: a file path, or a ``postgresql://`` URI (a str)."""
        return self.store or default_store_path()


def _wrong_file_type(data: dict[str, Any]) -> tuple[str, str, Any] | None:
    """A value of the configuration file whose TOML type is not its setting's, the profiles' included."""
    from memlens.profiles import Profile

    found = wrong_file_type(Settings, data)
    profiles = data.get("profiles")
    for name, table in (profiles.items() if isinstance(profiles, dict) and not found else ()):
        found = found or (wrong_file_type(Profile, table, f"profiles.{name}.") if isinstance(table, dict) else None)
    return found


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict"})  # pydantic names a union's members so


def load_settings(**overrides: Any) -> Settings:
    """The settings, every value checked against its allowed range; a bad one is a one-line MemlensError."""
    from pydantic import ValidationError as PydanticError
    from pydantic_settings import SettingsError

    from memlens.errors import MemlensError

    file, data = read_config_file()
    for name, close, mistyped in stray_variables(Settings):
        if mistyped:  # MEMLENS_SERACH__K: as an unknown table of the file is
            where = ".".join(name[len(ENV_PREFIX):].lower().split("__"))
            raise MemlensError(f"configuration: unknown setting {where} (from environment variable {name}"
                               + (f"; did you mean {close}?)" if close else ")"))
    if data and (wrong := _wrong_file_type(data)):
        name, expected, value = wrong
        shown = repr(value) if not isinstance(value, bool) else str(value).lower()
        raise MemlensError(f"configuration: {name}: expected {expected}, got {shown[:60]} (in {file})")
    token = _FILE_DATA.set(data)
    try:
        settings = Settings(**overrides)
    except PydanticError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        while len(loc) > 1 and (str(loc[-1]) in _TYPE_TAGS or "[" in str(loc[-1])):  # a union's member, not a setting
            loc = loc[:-1]
        raise MemlensError(describe_error(dict(err), Settings, loc, origin_of(loc, overrides, file, data))) from None
    except RecursionError:  # JSON in a MEMLENS_* variable nested deeper than Python's parser goes
        raise MemlensError("configuration: a MEMLENS_* environment variable holds JSON nested too deeply") from None
    except SettingsError as exc:  # a MEMLENS_* variable holding a table or a list that is not JSON
        m = re.search(r'field "([^"]+)"', str(exc))
        field = m.group(1) if m else None
        var = env_variable((field,)) if field else None
        if var and field:
            raise MemlensError(
                f"configuration: environment variable {var}: {field} is a table, so its value must be a JSON object"
                f" (or set {ENV_PREFIX}{field.upper()}__KEY=VALUE for one key)"
            ) from None
        raise MemlensError(f"configuration: {not_json(Settings, field) or exc}") from None
    finally:
        _FILE_DATA.reset(token)
    from memlens.profiles import check_profiles

    check_profiles(settings.profiles, lambda loc: origin_of(loc, overrides, file, data))
    return settings
