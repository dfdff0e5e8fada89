"""Page text with trafilatura, in worker processes that are killed when they take too long.

Extraction can run away on a huge or pathological page, and a thread cannot be
stopped, so HTML is handed to worker processes (``memlens.web.worker``, at most
two per call, started when the first HTML page arrives); a page whose
extraction passes ``extract_timeout`` gets an error and its worker is killed.
Only text comes back: scripts, styles, forms, templates and elements a
browser would not show (``hidden``, ``aria-hidden``, ``display: none``,
``visibility: hidden``, zero font size or opacity, and the usual hiding
classes) are removed before trafilatura reads the page.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

_HIDDEN_STYLE = re.compile(
    r"display\s*:\s*none|visibility\s*:\s*(hidden|collapse)|font-size\s*:\s*0(?![.\d]*[1-9])|opacity\s*:\s*0(?![.\d]*[1-9])"
    r"|(?<![-\w])(width|height)\s*:\s*0(px)?\s*(;|$)|clip\s*:\s*rect\(\s*0|text-indent\s*:\s*-\d{3,}",
    re.IGNORECASE,
)
_HIDDEN_CLASSES = {"hidden", "d-none", "sr-only", "visually-hidden", "invisible", "screen-reader-text", "hide"}
_DROP_TAGS = ("script", "style", "noscript", "template", "iframe", "object", "embed", "svg", "canvas", "form", "input",
              "button", "select", "textarea", "meta", "link")
_BLOCKS = {"p", "div", "section", "article", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table", "br",
           "pre", "blockquote", "header", "footer", "main", "nav", "aside", "dd", "dt", "dl", "figcaption", "hr"}
MAX_TREE_ELEMENTS = 200_000


_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.IGNORECASE)


def decode(body: bytes, charset: str | None) -> str:
    """The page as text: the header's charset, else a ``<meta charset>`` in its first 4 KB, else UTF-8, else cp1252."""
    if not charset:
        m = _META_CHARSET.search(body[:4096])
        charset = m.group(1).decode("ascii") if m else None
    for enc in (charset, "utf-8"):
        if enc:
            try:
                return body.decode(enc)
            except (LookupError, UnicodeDecodeError):
                continue
    return body.decode("cp1252", "replace")


def is_hidden(el: Any) -> bool:
    attrs = el.attrib
    if "hidden" in attrs or attrs.get("aria-hidden", "").strip().lower() == "true":
        return True
    if _HIDDEN_STYLE.search(attrs.get("style", "")):
        return True
    return bool(_HIDDEN_CLASSES.intersection(attrs.get("class", "").lower().split()))


def visible_tree(html: str) -> Any:
    """The page's lxml tree without hidden and non-text elements (None for an empty page)."""
    import lxml.etree
    import lxml.html

    try:
        tree = lxml.html.document_fromstring(html)
    except (lxml.etree.ParserError, ValueError):
        return None
    for el in list(tree.iter(lxml.etree.Comment, lxml.etree.ProcessingInstruction)):
        el.drop_tree()
    for el in list(tree.iter(*_DROP_TAGS)):
        el.drop_tree()
    for el in list(tree.iter()):
        if isinstance(el.tag, str) and el.getparent() is not None and is_hidden(el):
            el.drop_tree()
    return tree


def plain_text(tree: Any) -> str:
    """Text of the body, one line per block element (used when trafilatura finds no main content)."""
    body = tree.find("body")
    root = body if body is not None else tree
    for el in root.iter():
        if isinstance(el.tag, str) and el.tag in _BLOCKS:
            el.tail = "\n" + (el.tail or "")
    return root.text_content()


def extract_html(body: bytes, charset: str | None, url: str) -> dict[str, str]:
    """``{"title", "text"}`` of an HTML page (runs in a worker process)."""
    html = decode(body, charset)
    tree = visible_tree(html)
    if tree is None:
        return {"title": "", "text": ""}
    title = " ".join((tree.findtext(".//title") or "").split())
    for el in list(tree.iter("title")):
        el.drop_tree()
    size = sum(1 for _ in tree.iter())
    text = None
    if size <= MAX_TREE_ELEMENTS:
        import trafilatura

        doc = trafilatura.bare_extraction(
            tree, url=url or None, include_comments=False, include_tables=True, include_links=False,
            include_images=False, include_formatting=False, with_metadata=False, deduplicate=False,
        )
        if doc is not None:
            text = getattr(doc, "text", None)
            title = title or " ".join((getattr(doc, "title", None) or "").split())
    if not text or not text.strip():
        text = plain_text(tree)
    return {"title": title, "text": text}


class ExtractTimeout(Exception):
    pass


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    def kill(self) -> None:
        if self.proc.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass


class Extractor:
    """Worker processes for one web-context call, started when first needed (``close()`` ends them)."""

    def __init__(self, timeout: float, workers: int = 2, command: list[str] | None = None) -> None:
        self.timeout = timeout
        self.workers = max(1, workers)
        self.command = command or [sys.executable, "-m", "memlens.web.worker"]
        self._idle: list[_Worker] = []
        self._all: list[_Worker] = []
        self._slots: asyncio.Semaphore | None = None
        self._warming: asyncio.Task[_Worker] | None = None

    def warm(self) -> None:
        """Start one worker now, so its start-up (Python, lxml, trafilatura) overlaps the fetches."""
        if self._warming is None and not self._all:
            self._warming = asyncio.ensure_future(self._start())

    async def _start(self) -> _Worker:
        proc = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        worker = _Worker(proc)
        self._all.append(worker)
        return worker

    async def extract_html(self, body: bytes, charset: str | None, url: str) -> dict[str, str]:
        """``extract_html`` in a worker; ExtractTimeout (and the worker killed) after ``timeout`` seconds."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        async with self._slots:
            worker = None
            if not self._idle and self._warming is not None:
                warming, self._warming = self._warming, None
                try:
                    worker = await warming
                except OSError:
                    worker = None
            if worker is None:
                worker = self._idle.pop() if self._idle else await self._start()
            ok = False
            try:
                head = json.dumps({"url": url, "charset": charset, "size": len(body)}).encode("utf-8") + b"\n"
                answer = await asyncio.wait_for(self._ask(worker, head + body), self.timeout)
                ok = True
            except asyncio.TimeoutError:
                raise ExtractTimeout(f"text extraction took longer than {self.timeout:g} s") from None
            finally:
                if ok:
                    self._idle.append(worker)
                else:
                    worker.kill()
        if "error" in answer:
            raise RuntimeError(f"text extraction failed: {answer['error']}")
        return {"title": str(answer.get("title") or ""), "text": str(answer.get("text") or "")}

    @staticmethod
    async def _ask(worker: _Worker, request: bytes) -> dict[str, Any]:
        proc = worker.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request)
        await proc.stdin.drain()
        line = await proc.stdout.readline()
        if not line:
            raise RuntimeError("text extraction failed: the worker process ended")
        answer = json.loads(line)
        return answer if isinstance(answer, dict) else {"error": "unexpected answer"}

    async def extract(self, body: bytes, charset: str | None, content_type: str | None, url: str) -> dict[str, str]:
        if content_type == "text/plain":
            return {"title": "", "text": decode(body, charset)}
        return await self.extract_html(body, charset, url)

    async def close(self) -> None:
        """End every worker (a runaway one included) and wait for them briefly."""
        if self._warming is not None:
            warming, self._warming = self._warming, None
            if not warming.done():
                warming.cancel()
            try:
                self._idle.append(await warming)
            except (asyncio.CancelledError, OSError):
                pass
        for w in self._all:
            if w.proc.stdin is not None and not w.proc.stdin.is_closing():
                w.proc.stdin.close()
            w.kill()
        for w in self._all:
            try:
                await asyncio.wait_for(w.proc.wait(), 5.0)
            except (asyncio.TimeoutError, ProcessLookupError):
                pass
        self._all.clear()
        self._idle.clear()
