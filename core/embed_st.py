"""The sentence-transformers backend: the reference for the ONNX graph, and the way to run other models.

It needs the optional extra ``memlens[sentence-transformers]`` (sentence-transformers
and so torch); without it, choosing this backend or a reranker is a one-line error
naming the extra.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from memlens.embed_model import ModelSpec, TokenizerMixin, model_id_for
from memlens.errors import ModelError
from memlens.limits import EMBED_INPUT_CHARS

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

EXTRA_HINT = "pip install 'memlens[sentence-transformers]'"


def sentence_transformers() -> Any:
    """The sentence_transformers module, quietened; a one-line ModelError naming the extra when it is missing."""
    try:
        import sentence_transformers as st
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise ModelError(f"this needs the optional extra sentence-transformers ({exc}): {EXTRA_HINT}") from None
    # transformers' logging helpers are unannotated: hence the casts
    cast(Callable[[], None], hf_logging.set_verbosity_error)()
    cast(Callable[[], None], hf_logging.disable_progress_bar)()
    return st


class SentenceTransformerEmbedder(TokenizerMixin):
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
                st = sentence_transformers()
                try:
                    model = st.SentenceTransformer(str(self.spec.path), device="cpu", local_files_only=True)
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
