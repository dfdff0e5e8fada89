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
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

APP = "memlens"
BUNDLED_MODEL = "all-MiniLM-L6-v2"
BUNDLED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def default_store_path() -> Path:
    return Path(platformdirs.user_data_dir(APP)) / "memlens.db"


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP))


def config_file() -> Path:
    return Path(os.environ.get("MEMLENS_CONFIG") or Path(platformdirs.user_config_dir(APP)) / "config.toml")


class EmbeddingConfig(BaseModel):
    model: str = Field(BUNDLED_MODEL, description="'all-MiniLM-L6-v2' (bundled) or a local sentence-transformers directory")
    backend: Literal["onnx", "sentence-transformers"] = "onnx"
    sha256: str | None = Field(None, description="expected sha256 of the weights; the bundled model's is built in")
    max_tokens: int = 256
    batch_size: int = 64
    threads: int = Field(0, description="ONNX Runtime intra-op threads; 0 lets it choose")


class SearchConfig(BaseModel):
    vector_weight: float = 0.8
    lexical_weight: float = 0.2
    k: int = 10
    candidates: int = Field(50, description="candidates fetched per wing from each of KNN and FTS5")
    vector_index: Literal["auto", "sqlite-vec", "memory"] = Field(
        "auto", description="'auto': sqlite-vec until Memory.warm_index() loads the in-process index"
    )


class StoreConfig(BaseModel):
    busy_timeout_ms: int = 5000
    mmap_size: int = 1 << 30


class RetrievalConfig(BaseModel):
    """Seed 001: boost, weights, recency; seed 004: dedup and conflict detection."""

    active_wing_boost: float = Field(1.2, ge=0)
    weights: dict[str, float] = Field(default_factory=dict, description="relevance / recency / salience")
    half_life_days: float = 30.0
    normalise: Literal["per_kind", "pool"] = "per_kind"
    dedup_similarity: float = Field(0.90, description="same key and at least this cosine: one entry, not a conflict")
    user: str = "default"


class CacheConfig(BaseModel):
    enabled: bool = True
    ttl_seconds: float = 60.0
    max_entries: int = 512


class RerankConfig(BaseModel):
    enabled: bool = False
    model: str | None = Field(None, description="a local sentence-transformers CrossEncoder directory")
    top_n: int = 20


class AuditConfig(BaseModel):
    level: Literal["writes", "reads"] = Field("reads", description="'reads' also logs every retrieval's metrics")
    retrieval_max_rows: int = Field(10_000, ge=1, le=100_000_000, description="retrieval records kept (newest); writes are always kept")
    retrieval_max_age_days: float = Field(90.0, gt=0, le=36_500, description="retrieval records older than this are pruned")


class WorkingMemoryConfig(BaseModel):
    """Seed 002 phase 1: the sliding window of recent tasks and the bound on stored tasks."""

    window: int = Field(5, ge=0, description="completed tasks shown by `memlens tasks` and in agent context")
    max_tasks: int = Field(100, ge=1, description="completed tasks kept; older ones are pruned (the audit keeps them)")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMLENS_", env_nested_delimiter="__", extra="ignore")

    store: Path | None = None
    cache_dir: Path = Field(default_factory=default_cache_dir)
    embedding: EmbeddingConfig = EmbeddingConfig()
    search: SearchConfig = SearchConfig()
    storage: StoreConfig = StoreConfig()
    working_memory: WorkingMemoryConfig = WorkingMemoryConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    cache: CacheConfig = CacheConfig()
    rerank: RerankConfig = RerankConfig()
    audit: AuditConfig = AuditConfig()
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = config_file()
        if path.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    def store_path(self) -> Path:
        return self.store or default_store_path()


def load_settings(**overrides: object) -> Settings:
    from pydantic import ValidationError as PydanticError

    from .errors import MemlensError

    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except PydanticError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise MemlensError(f"configuration: {where}: {err['msg']} (see {config_file()} and MEMLENS_* variables)") from None
    except Exception as exc:  # a malformed TOML file
        raise MemlensError(f"configuration file {config_file()}: {exc}") from None
