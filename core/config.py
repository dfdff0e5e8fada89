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
from typing import Literal

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


class StoreConfig(BaseModel):
    busy_timeout_ms: int = 5000
    mmap_size: int = 1 << 30
    audit_reads: bool = False


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMLENS_", env_nested_delimiter="__", extra="ignore")

    store: Path | None = None
    cache_dir: Path = Field(default_factory=default_cache_dir)
    embedding: EmbeddingConfig = EmbeddingConfig()
    search: SearchConfig = SearchConfig()
    storage: StoreConfig = StoreConfig()

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
