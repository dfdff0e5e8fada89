"""One question, answered: retrieve, assemble the prompt, stream the model's answer, check its citations, log it.

The steps are separate so the CLI and the app share them: the app retrieves on
an engine thread (:func:`assemble` after its own search), streams in its event
loop (``llm.astream_chat``) and logs on an engine thread again; the CLI does all
of it in one thread with :func:`ask`.

Web context comes from a *provider*: any callable ``(urls, query)`` returning an
object (or dict) with ``context`` (text already sanitised and marked untrusted)
and ``sources`` (one record per URL). The default is the store's own
``Memory.web_context_sync`` (or ``web_context``) when this memlens has it,
given the URLs only: the question is never passed on as a web *search*
query, so it does not leave the machine except to the configured chat model.
An awaitable result is run to completion on a private event loop in a worker
thread, so this works from inside a running loop too.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlens.assist import citations as cites
from memlens.assist import log
from memlens.assist.llm import Endpoint, LlmError, one_line, stream_chat
from memlens.assist.prompt import WebPart, build_messages, sent_ids, source_record, web_source_count
from memlens.errors import MemlensError

if TYPE_CHECKING:
    from memlens.memory import Memory

WebProvider = Callable[[list[str], str], Any]


@dataclass
class Prepared:
    """Everything the model is given for one question, and what it came from."""

    question: str
    bundle: Any  # memlens.trace.Bundle
    context: str  # exactly what `memlens context` prints for the same search
    messages: list[dict[str, str]]
    sent_ids: list[str]
    web: WebPart | None = None
    retrieval_seq: int | None = None


@dataclass
class Answer:
    text: str
    complete: bool
    model: str
    citations: cites.Citations
    prepared: Prepared
    error: str | None = None
    logged: int | None = None  # the answer log's row id
    log_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``ask --json`` object: answer, citations (valid ids only), complete, error?, model, trace, ..."""
        out: dict[str, Any] = {"answer": self.text, "citations": self.citations.valid,
                               "invented_citations": self.citations.invented, "complete": self.complete}
        if self.error:
            out["error"] = self.error
        out["model"] = self.model
        out["trace"] = self.prepared.bundle.to_dict()["trace"]  # as `search --json` shows it
        if self.prepared.web is not None:
            out["web"] = {"sources": self.prepared.web.sources, "citations": self.citations.web, "untrusted": True}
        return out


# -- web context -----------------------------------------------------------------------------------


def _run_coroutine(awaitable: Any, timeout: float = 600) -> Any:
    """Run an awaitable to completion on a private loop in a thread (safe inside a running event loop)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(_await(awaitable))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="memlens-web", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise MemlensError(f"web context: no result within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


async def _await(awaitable: Any) -> Any:
    return await awaitable


def default_web_provider(mem: Memory) -> WebProvider | None:
    """``mem.web_context_sync`` / ``mem.web_context`` (sync or async) for the URLs alone, else None."""
    fn = getattr(mem, "web_context_sync", None) or getattr(mem, "web_context", None)
    if fn is None:
        return None

    def provider(urls: list[str], query: str) -> Any:
        result = fn(urls=urls)  # no query: that would be a web search for the question
        return _run_coroutine(result) if inspect.isawaitable(result) else result

    return provider


def web_part(result: Any) -> WebPart:
    """A provider's result (object or dict) as a WebPart."""
    get = result.get if isinstance(result, dict) else (lambda k, d=None: getattr(result, k, d))
    context = get("context", "") or ""
    if not isinstance(context, str):
        raise MemlensError(f"web context: the provider returned {type(context).__name__} text")
    return WebPart(context, [source_record(s) for s in (get("sources", []) or [])])


def fetch_web(mem: Memory, urls: Sequence[str], query: str, provider: WebProvider | None = None) -> WebPart:
    provider = provider or default_web_provider(mem)
    if provider is None:
        raise MemlensError("--web: this memlens cannot fetch web pages (no web context support installed)")
    return web_part(provider(list(urls), query))


# -- the steps ---------------------------------------------------------------------------------------


def assemble(question: str, bundle: Any, context: str, web: WebPart | None = None,
             retrieval_seq: int | None = None) -> Prepared:
    return Prepared(question, bundle, context, build_messages(question, context, web), sent_ids(bundle.results), web,
                    retrieval_seq)


def prepare(mem: Memory, question: str, *, active_wing: str | None, wings: list[str] | None = None, k: int | None = None,
            profile: str | None = "memory", budget: int | None = None, workspace: str | None = None,
            web_urls: Sequence[str] = (), web_provider: WebProvider | None = None, **search_options: Any) -> Prepared:
    """Retrieve and render exactly as ``memlens context`` does, fetch web context, build the prompt."""
    from memlens.ingest.recall import render_with_code

    bundle = mem.search(question, active_wing=active_wing, wings=wings, k=k, profile=profile, budget=budget,
                        workspace=workspace, **search_options)
    seq = log.last_retrieval_seq(mem, bundle.trace.query)
    context = render_with_code(mem, bundle)  # the text `memlens context` prints
    web = fetch_web(mem, web_urls, question, web_provider) if web_urls else None
    return assemble(question, bundle, context, web, seq)


def finish(prepared: Prepared, text: str, *, model: str, complete: bool, error: str | None) -> Answer:
    """The answer with its citations checked against the ids sent."""
    found = cites.parse(text, prepared.sent_ids, web_source_count(prepared.web))
    return Answer(text, complete, model, found, prepared, error)


def answer(endpoint: Endpoint, prepared: Prepared, on_token: Callable[[str], None] | None = None) -> Answer:
    """Stream the model's answer; a failure midway keeps what arrived (complete False, a one-line error)."""
    parts: list[str] = []
    error = None
    try:
        for token in stream_chat(endpoint, prepared.messages):
            parts.append(token)
            if on_token is not None:
                on_token(token)
    except LlmError as exc:
        error = one_line(str(exc))
    return finish(prepared, "".join(parts), model=endpoint.model, complete=error is None, error=error)


def record(mem: Memory, ans: Answer) -> Answer:
    """Log the answer with its retrieval (never raises; ``ans.log_error`` says why when it could not)."""
    p = ans.prepared
    ans.logged, ans.log_error = log.record(
        mem, question=p.question, model=ans.model, complete=ans.complete, error=ans.error, retrieval_seq=p.retrieval_seq,
        bundle=p.bundle, cited=ans.citations.valid, invented=ans.citations.invented)
    return ans


def ask(mem: Memory, question: str, endpoint: Endpoint, *, on_token: Callable[[str], None] | None = None,
        **options: Any) -> Answer:
    """Retrieve, answer and log (``options`` as for :func:`prepare`)."""
    prepared = prepare(mem, question, **options)
    return record(mem, answer(endpoint, prepared, on_token))

