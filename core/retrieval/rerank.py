"""Optional cross-encoder rerank, off by default (it costs a second model run per candidate).

The model is a local ``sentence_transformers.CrossEncoder`` directory given in
``rerank.model`` (the optional extra ``memlens[sentence-transformers]``): no hub is reachable, so nothing is downloaded. The top
``rerank.top_n`` candidates by score are rescored. The cross-encoder's
probability replaces relevance in the same formula, and the rank before and
after is kept in each result's components. A candidate outside the rerank
window is dropped with stage ``rerank``, because its score could no longer be
compared with the rescored ones.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from memlens.errors import ModelError
from memlens.files import expand_user
from memlens.retrieval.policy import Candidate, by_score
from memlens.retrieval.scoring import RetrievalWeights
from memlens.trace import Trace

if TYPE_CHECKING:
    from memlens.config import RerankConfig

_models: dict[str, Any] = {}
_lock = threading.Lock()


def load_cross_encoder(path: str | None) -> Any:
    if not path:
        raise ModelError("rerank.enabled is true but rerank.model names no local cross-encoder directory")
    p = expand_user(path)
    if not p.is_dir():
        raise ModelError(f"cross-encoder not found: {p} is not a directory")
    with _lock:
        if str(p) not in _models:
            import os

            from memlens.embed_st import sentence_transformers

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            st = sentence_transformers()  # the optional extra: a one-line error naming it when missing
            try:
                _models[str(p)] = st.CrossEncoder(str(p), device="cpu", local_files_only=True)
            except Exception as exc:
                raise ModelError(f"cannot load cross-encoder {p}: {exc}".splitlines()[0]) from None
        return _models[str(p)]


def rerank(cfg: RerankConfig, text: str, pool: list[Candidate], weights: RetrievalWeights, trace: Trace) -> None:
    model = load_cross_encoder(cfg.model)
    ranked = by_score(pool)
    window, outside = ranked[: cfg.top_n], ranked[cfg.top_n :]
    logits = model.predict([(text, c.entry.embed_text) for c in window], show_progress_bar=False)
    for i, (c, logit) in enumerate(zip(window, logits)):
        x = float(logit)
        prob = x if 0.0 <= x <= 1.0 and getattr(model, "num_labels", 1) != 1 else 1.0 / (1.0 + math.exp(-x))
        c.comps.rank_before_rerank = i + 1
        rescored = round(prob, 6)
        comps = c.comps
        comps.rerank = rescored
        comps.final = (
            weights.relevance * rescored + weights.recency * comps.recency + weights.salience * comps.salience
        ) * comps.boost
    keep = {c.id for c in window} | {c.id for c in outside if c.keep}
    for c in outside:
        if not c.keep:
            trace.drop(c, "rerank", f"outside the rerank window of the top {cfg.top_n}", c.score)
    pool[:] = [c for c in pool if c.id in keep]
    trace.rerank = {
        "applied": True,
        "model": str(cfg.model),
        "top_n": cfg.top_n,
        "input": [c.id for c in window],
        "output": [c.id for c in by_score(window)],
    }
