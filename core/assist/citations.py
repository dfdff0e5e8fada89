"""The entry ids an answer cites, checked against the ids the model was actually given.

The prompt asks for citations in square brackets: ``[lc-arch-001]``, several
as ``[lc-arch-001, ros2-conv-005]``, web sources as ``[web:2]``. Markdown
links (``[text](url)``) and bracketed prose (``[see above]``) are not
citations. An id that was not in the context sent is *invented*: it is
reported as such and never shown as a valid citation, whatever the store
holds (the model could not have read it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memlens.models import ID_RE

_BRACKET = re.compile(r"\[([^\[\]\n]{1,400})\](?!\()")
_ID_CHARS = ID_RE.pattern.strip("^$")  # [A-Za-z0-9_.:\-]{1,128}
_TOKEN = re.compile(rf"^{_ID_CHARS}$")
_WEB = re.compile(r"^web:(\d{1,4})$")


@dataclass
class Citations:
    valid: list[str] = field(default_factory=list)  # entry ids that were sent, in order of first citation
    invented: list[str] = field(default_factory=list)  # cited but never sent
    web: list[int] = field(default_factory=list)  # web sources cited by number (1-based), when that many were sent

    def to_dict(self) -> dict[str, list[str] | list[int]]:
        return {"citations": self.valid, "invented_citations": self.invented, "web_citations": self.web}


def _looks_like_id(token: str) -> bool:
    """An id-shaped token: no spaces, and a digit, '-' or '_' in it ("[note]" is prose, "[lc-arch-001]" an id)."""
    return bool(_TOKEN.match(token)) and any(c.isdigit() or c in "-_" for c in token)


def parse(answer: str, sent_ids: list[str] | set[str], web_sources: int = 0) -> Citations:
    """Every bracketed citation in ``answer``, each id once, split into valid and invented."""
    sent = set(sent_ids)
    out = Citations()
    for m in _BRACKET.finditer(answer):
        for raw in m.group(1).split(","):
            token = raw.strip().strip("`*_ ")
            web = _WEB.match(token)
            if web:
                n = int(web.group(1))
                bucket_ok = 1 <= n <= web_sources
                if bucket_ok and n not in out.web:
                    out.web.append(n)
                elif not bucket_ok and token not in out.invented:
                    out.invented.append(token)
                continue
            if token in sent:
                if token not in out.valid:
                    out.valid.append(token)
            elif _looks_like_id(token) and token not in out.invented:
                out.invented.append(token)
    return out
