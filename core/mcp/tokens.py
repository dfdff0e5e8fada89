"""Bearer tokens of the HTTP MCP server: named, each read-write or read-only, stored only as SHA-256 digests.

A token entry is one line, in the token file or in ``[mcp] tokens``::

    alice-laptop  sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    ci-bot        sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752  read-only

``memlens mcp token add NAME [--read-only]`` makes a random token (256 bits),
prints it once and appends its entry; nothing that memlens writes holds the
token itself, so a copy of the file lets nobody in. A presented token is
hashed and compared with every entry's digest in constant time
(``hmac.compare_digest``), the name of the entry that matches is the client
every audit row of its writes names. The file must be readable and writable
by its owner only (like an SSH key): a file others can read or write is refused.
Errors name the file and line, never the line's text (it might be a token
pasted by mistake).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import shlex
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memlens.config import TOKEN_ENTRY, TOKEN_FORM
from memlens.config_source import config_file
from memlens.errors import MemlensError
from memlens.files import expand_user

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
READ_ONLY = "read-only"
TOKEN_PREFIX = "memlens_"  # a prefix lets secret scanners recognise a leaked token
FILE_NAME = "mcp-tokens"
HEADER = "# memlens MCP bearer tokens: NAME sha256:DIGEST [read-only]; add with `memlens mcp token add NAME`\n"


class TokenError(MemlensError):
    """A token file or entry that cannot be used."""


@dataclass(frozen=True)
class Token:
    name: str
    digest: bytes  # sha256 of the token
    read_only: bool = False

    def entry(self) -> str:
        return f"{self.name} sha256:{self.digest.hex()}" + (f" {READ_ONLY}" if self.read_only else "")


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def parse_entries(lines: Iterable[str], where: str = "") -> list[Token]:
    """The tokens of ``lines`` (blank lines and ``#`` comments skipped); a bad line is an error naming only its number
    (``FILE: line N`` when ``where`` names a file, else ``entry N``)."""
    tokens: list[Token] = []
    names: set[str] = set()
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0]
        if not text.strip():
            continue
        at = f"{where}: line {number}" if where else f"entry {number}"
        m = TOKEN_ENTRY.match(text)
        if m is None:
            raise TokenError(f"{at} is not {TOKEN_FORM!r} (a token itself is never stored: "
                             f"add one with `memlens mcp token add NAME`)")
        if m["name"] in names:
            raise TokenError(f"{at}: the name {m['name']!r} is given twice")
        names.add(m["name"])
        tokens.append(Token(m["name"], bytes.fromhex(m["digest"]), m["read_only"] is not None))
    return tokens


def default_file() -> Path:
    return config_file().parent / FILE_NAME


def check_private(path: Path) -> None:
    """Refuse a token file that anyone but its owner can read or write."""
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        raise TokenError(f"token file {path} is not a regular file")
    if mode & 0o077:
        raise TokenError(f"token file {path} is readable or writable by others (mode {stat.S_IMODE(mode):o}): "
                         f"run chmod 600 {path}")


def read_file(path: Path) -> list[Token]:
    try:
        check_private(path)
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenError(f"cannot read token file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TokenError(f"token file {path} is not UTF-8 text") from None
    return parse_entries(text.splitlines(), str(path))


class TokenSet:
    """The tokens a server accepts: the token file's, read again when the file changes (a token removed is refused
    from the next request on), and the fixed ``[mcp] tokens``. A file that turns unusable is reported once on
    stderr and its tokens are refused until it is fixed."""

    def __init__(self, path: Path | None, fixed: list[Token]) -> None:
        self.path = path
        self.fixed = fixed
        self._signature: tuple[int, ...] | None = None  # the file's stat when it was read (``_signature``)
        self._from_file: list[Token] = []
        if path is not None:
            self._from_file = read_file(path)
            self._signature = _signature(path)
            if not self._from_file:
                raise TokenError(f"token file {path} holds no token: add one with `memlens mcp token add NAME` "
                                 f"or remove the file")
        clash = {t.name for t in self._from_file} & {t.name for t in fixed}
        if clash:
            raise TokenError(f"token name {sorted(clash)[0]!r} is both in {path} and in [mcp] tokens")
        self.source = " and ".join(([str(path)] if path else []) + (["[mcp] tokens"] if fixed else []))

    def __len__(self) -> int:
        return len(self._from_file) + len(self.fixed)

    def _refresh(self) -> None:
        if self.path is None:
            return
        signature = _signature(self.path)
        if signature == self._signature:
            return
        self._signature = signature
        try:
            self._from_file = read_file(self.path)
        except TokenError as exc:
            self._from_file = []
            print(f"memlens mcp: warning: {exc}; its tokens are refused until it is fixed", file=sys.stderr, flush=True)

    def verify(self, presented: str) -> Token | None:
        """The token's entry, or None; every digest is compared, in constant time, whatever matches."""
        self._refresh()
        d = digest(presented)
        found = None
        for token in (*self._from_file, *self.fixed):
            if hmac.compare_digest(d, token.digest):
                found = token
        return found


def _signature(path: Path) -> tuple[int, ...] | None:
    """What changes when the file's content, place, owner or mode does (a chmod moves only its ctime and mode)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode, st.st_uid


def load(tokens_file: Path | None, entries: list[str]) -> TokenSet:
    """The server's tokens: the file (the configured one must exist; the default one is read when it does) and
    ``[mcp] tokens``. A file without a token is an error (delete it to serve without tokens, on loopback)."""
    path = expand_user(tokens_file) if tokens_file else default_file()
    return TokenSet(path if tokens_file is not None or path.exists() else None, parse_entries(entries))


def add(path: Path, name: str, read_only: bool = False) -> str:
    """Append a new token's entry to ``path`` (created owner-only) and return the token, which is kept nowhere."""
    if not NAME.match(name):
        raise TokenError(f"token name {name[:80]!r} must be 1-64 letters, digits or . _ @ - (starting with a letter "
                         f"or digit)")
    path = expand_user(path)
    existing = read_file(path) if path.exists() else []
    if any(t.name == name for t in existing):
        raise TokenError(f"{path} already has a token named {name!r}: remove it first "  # from this file, named
                         f"(`memlens mcp token remove {name} --file {shlex.quote(str(path))}`) or choose another name")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    line = Token(name, digest(token), read_only).entry() + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write((HEADER if not existing and f.tell() == 0 else "") + line)
    except OSError as exc:
        raise TokenError(f"cannot write token file {path}: {exc.strerror or exc}") from None
    return token


def remove(path: Path, name: str) -> None:
    """Take the token named ``name`` out of ``path`` (the file is replaced in one rename; comments are kept)."""
    path = expand_user(path)
    if not path.exists():
        raise TokenError(f"there is no token file {path}")
    tokens = read_file(path)
    if not any(t.name == name for t in tokens):
        raise TokenError(f"{path} has no token named {name[:80]!r}")
    kept = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
            if line.split("#", 1)[0].split()[:1] != [name]]
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise TokenError(f"cannot write token file {path}: {exc.strerror or exc}") from None
