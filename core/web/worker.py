"""The extraction worker: ``python -m memlens.web.worker`` reads pages on stdin and writes their text on stdout.

One request is a JSON header line ``{"url", "charset", "size"}`` followed by
``size`` bytes of HTML; the answer is one JSON line ``{"title", "text"}`` or
``{"error"}``. The parent kills a worker that takes too long (see
``memlens.web.extract``); running as its own program, it never re-imports the
caller's main module.
"""

from __future__ import annotations

import json
import sys
from typing import BinaryIO


def serve(inp: BinaryIO | None = None, out: BinaryIO | None = None) -> None:
    from memlens.web.extract import extract_html

    # trafilatura's imports and first-use set-up happen now, while the parent is still fetching
    extract_html(b"<html><body><article><p>" + b"warm up " * 40 + b"</p></article></body></html>", "utf-8", "")

    src = inp or sys.stdin.buffer
    dst = out or sys.stdout.buffer
    while True:
        line = src.readline()
        if not line:
            return
        try:
            head = json.loads(line)
            body = src.read(int(head["size"]))
            answer = extract_html(body, head.get("charset"), head.get("url") or "")
        except Exception as exc:  # a page the extractor cannot read is that page's error
            answer = {"error": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]}
        dst.write(json.dumps(answer).encode("utf-8") + b"\n")
        dst.flush()


if __name__ == "__main__":
    serve()
