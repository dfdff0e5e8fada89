"""A retrieval as OpenInference spans in OTLP/HTTP JSON, printed and optionally sent to a collector.

``search --format openinference`` exports its retrieval; ``replay --format openinference`` the replayed ones
(one trace each, in one body).

The body is what an OTLP/HTTP collector accepts at ``/v1/traces`` (``Content-Type: application/json``):
``{"resourceSpans": [{"resource": {service.name=memlens}, "scopeSpans": [{"scope": {"name": "memlens"},
"spans": [...]}]}]}``. Spans and their attributes (OpenInference semantic conventions, plus ``memlens.*``):

* ``memlens.search``, kind RETRIEVER (``openinference.span.kind``): ``input.value`` (the query),
  ``embedding.model_name``, ``retrieval.documents.{i}.document.id`` / ``.score`` / ``.content`` /
  ``.metadata`` (JSON: wing, room, kind, type, rank, flags), and ``memlens.profile``, ``memlens.active_wing``,
  ``memlens.wings_searched``, ``memlens.cache_hit``, ``memlens.dropped``, ``memlens.latency_ms.<stage>``.
* ``memlens.rerank``, kind RERANKER, a child of the first, only when the cross-encoder ran:
  ``reranker.query``, ``reranker.model_name``, ``reranker.top_k``, ``reranker.input_documents.{i}.document.id``
  and ``reranker.output_documents.{i}.document.id`` / ``.score``.

Nothing is sent unless ``[export] otlp_endpoint`` is set; it is the only network request memlens makes, to that URL.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError
from memlens.secrets import redact, url_secrets, usable, without_password

if TYPE_CHECKING:
    from memlens.replay.context import ReplayContext
    from memlens.trace import Bundle

SCOPE = "memlens"


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attrs(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in d.items() if v is not None]


def _span(trace_id: str, span_id: str, parent: str | None, name: str, start: int, end: int,
          attrs: dict[str, Any]) -> dict[str, Any]:
    span = {"traceId": trace_id, "spanId": span_id, "name": name, "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end), "attributes": _attrs(attrs),
            "status": {"code": 1}}
    if parent:
        span["parentSpanId"] = parent
    return span


def retriever_attributes(bundle: Bundle) -> dict[str, Any]:
    t = bundle.trace
    attrs: dict[str, Any] = {
        "openinference.span.kind": "RETRIEVER", "input.value": t.query, "input.mime_type": "text/plain",
        "embedding.model_name": t.model or None, "memlens.profile": t.profile, "memlens.active_wing": t.active_wing,
        "memlens.wings_searched": list(t.wings_searched), "memlens.cache_hit": t.cache_hit,
        "memlens.dropped": len(t.dropped), "memlens.formula": t.formula,
    }
    for stage, ms in t.latency_ms.items():
        attrs[f"memlens.latency_ms.{stage}"] = float(ms)
    for i, r in enumerate(bundle.results):
        e = r.entry
        p = f"retrieval.documents.{i}.document"
        attrs[f"{p}.id"] = e.id
        attrs[f"{p}.score"] = float(r.score)
        attrs[f"{p}.content"] = e.text
        attrs[f"{p}.metadata"] = json.dumps({"wing": e.wing, "room": e.room, "kind": e.kind.value, "type": e.type.value,
                                             "title": e.title, "rank": r.rank, "flags": r.flags}, ensure_ascii=False)
    return attrs


def reranker_attributes(bundle: Bundle) -> dict[str, Any] | None:
    t = bundle.trace
    if not t.rerank.get("applied"):
        return None
    scores = {r.entry.id: r.components.rerank for r in bundle.results}
    attrs: dict[str, Any] = {"openinference.span.kind": "RERANKER", "reranker.query": t.text,
                             "reranker.model_name": t.rerank.get("model"), "reranker.top_k": int(t.rerank.get("top_n", 0))}
    for i, eid in enumerate(t.rerank.get("input", [])):
        attrs[f"reranker.input_documents.{i}.document.id"] = eid
    for i, eid in enumerate(t.rerank.get("output", [])):
        attrs[f"reranker.output_documents.{i}.document.id"] = eid
        if scores.get(eid) is not None:
            attrs[f"reranker.output_documents.{i}.document.score"] = float(scores[eid])  # type: ignore[arg-type]
    return attrs


def spans(bundle: Bundle, *, end_ns: int | None = None) -> dict[str, Any]:
    """The OTLP/HTTP JSON body (one trace) for ``bundle``."""
    end = end_ns or time.time_ns()
    lat = bundle.trace.latency_ms
    start = end - int(float(lat.get("total", 0.0)) * 1e6)
    trace_id, root = os.urandom(16).hex(), os.urandom(8).hex()
    out = [_span(trace_id, root, None, "memlens.search", start, end, retriever_attributes(bundle))]
    rr = reranker_attributes(bundle)
    if rr is not None:
        r_end = end - int(float(lat.get("budget", 0.0)) * 1e6)
        r_start = r_end - int(float(lat.get("rerank", 0.0)) * 1e6)
        out.append(_span(trace_id, os.urandom(8).hex(), root, "memlens.rerank", r_start, r_end, rr))
    from memlens import __version__

    return {"resourceSpans": [{
        "resource": {"attributes": _attrs({"service.name": "memlens", "service.version": __version__})},
        "scopeSpans": [{"scope": {"name": SCOPE, "version": __version__}, "spans": out}],
    }]}


def merge(bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """One OTLP body holding the spans of several (each retrieval stays its own trace)."""
    if not bodies:
        return {"resourceSpans": []}
    out = json.loads(json.dumps(bodies[0]))
    spans_ = out["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for b in bodies[1:]:
        spans_.extend(b["resourceSpans"][0]["scopeSpans"][0]["spans"])
    merged: dict[str, Any] = out
    return merged


def traces_url(endpoint: str) -> str:
    return endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"


def send(body: dict[str, Any], endpoint: str, timeout_s: float = 5.0) -> int:
    """POST ``body`` to the collector; its HTTP status, or MemlensError in one line."""
    import urllib.error
    import urllib.request

    url = traces_url(endpoint)
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # straight to the configured collector
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        raise MemlensError(f"the OTLP collector at {without_password(url)} refused the spans: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # the URL's password stays out of the message
        reason = redact(str(getattr(exc, "reason", exc)), usable(url_secrets(url)))
        raise MemlensError(f"cannot send the spans to the OTLP collector at {without_password(url)}: {reason}") from None


def emit(mem: ReplayContext, bundle: Bundle | None, body: dict[str, Any] | None = None) -> int:
    """``search``/``replay --format openinference``: print the spans; send them when ``[export] otlp_endpoint`` is set."""
    body = body if body is not None else spans(bundle)  # type: ignore[arg-type]
    print(json.dumps(body, ensure_ascii=False))
    endpoint = mem.settings.export.otlp_endpoint
    if endpoint:
        try:
            send(body, endpoint, mem.settings.export.timeout_s)
        except MemlensError as exc:
            print(f"memlens: error: {exc}", file=sys.stderr)
            return 1
    return 0
