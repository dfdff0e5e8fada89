"""Page text with trafilatura, in worker processes that are killed when they take too long.

Extraction can run away on a huge or pathological page, and a thread cannot be
stopped, so HTML is handed to worker processes (``memlens.web.worker``, at most
two pages at once per call; ``memlens.web.pool`` keeps them for later calls); a
page whose extraction passes ``extract_timeout`` gets an error and its worker
is killed.
Only text comes back: scripts, styles, forms, templates and elements a
browser would not show (``hidden``, ``aria-hidden``, ``display: none``,
``visibility: hidden``, zero font size or opacity, and the usual hiding
classes) are removed before trafilatura reads the page.
"""

from __future__ import annotations

import asyncio
import re
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
    text: str = root.text_content()
    return text


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


class Extractor:
    """Text extraction for one web-context call: at most ``workers`` pages at once, each within ``timeout``."""

    def __init__(self, timeout: float, workers: int = 2, command: list[str] | None = None) -> None:
        from memlens.web.pool import DEFAULT_COMMAND

        self.timeout = timeout
        self.workers = max(1, workers)
        self.command = tuple(command) if command else DEFAULT_COMMAND
        self._slots: asyncio.Semaphore | None = None
        self.used: list[Any] = []  # the workers this call used (a test looks at them)

    def warm(self) -> None:
        """Have a worker starting while the pages are fetched (none is started when one is idle)."""
        from memlens.web.pool import POOL

        POOL.prestart(self.command)

    async def extract_html(self, body: bytes, charset: str | None, url: str) -> dict[str, str]:
        """``extract_html`` in a worker; ExtractTimeout (and the worker killed) after ``timeout`` seconds."""
        from memlens.web.pool import POOL

        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        async with self._slots:
            worker = POOL.take(self.command)
            self.used.append(worker)
            ok = False
            try:
                head = {"url": url, "charset": charset, "size": len(body)}
                answer = await asyncio.wait_for(asyncio.to_thread(worker.ask, head, body), self.timeout)
                ok = True
            except asyncio.TimeoutError:
                raise ExtractTimeout(f"text extraction took longer than {self.timeout:g} s") from None
            finally:
                if ok:
                    POOL.give_back(worker)
                else:  # timed out, cancelled or broken: its thread's read ends when it dies
                    POOL.discard(worker)
        if "error" in answer:
            raise RuntimeError(f"text extraction failed: {answer['error']}")
        return {"title": str(answer.get("title") or ""), "text": str(answer.get("text") or "")}

    async def extract(self, body: bytes, charset: str | None, content_type: str | None, url: str) -> dict[str, str]:
        if content_type == "text/plain":
            return {"title": "", "text": decode(body, charset)}
        return await self.extract_html(body, charset, url)

    async def close(self) -> None:
        """Nothing to end: workers that finished wait for the next call; the others were killed."""
