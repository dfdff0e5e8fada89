"""Reading files a user names, and creating files and folders only the owner can read.

Every file memlens reads whole goes through :func:`read_file`: it refuses
anything but a regular file before reading (a FIFO would block forever,
``/dev/zero`` never ends) and stops at a byte cap counted on what was actually
read, since ``st_size`` is 0 for ``/proc`` files and says nothing about a file
that grows meanwhile. What memlens creates (stores, their folders, the model
cache) is private: files 0600, folders 0700, whatever the umask.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import sys
import time
from pathlib import Path

from memlens.errors import MemlensError

KiB = 1024
MiB = 1024 * KiB
CONFIG_MAX_BYTES = 1 * MiB  # config.toml, a model's small JSON files
JSON_MAX_BYTES = 64 * MiB  # state files, query sets, qrels, a tokenizer.json (--report: 1 MiB)
STAMP_MAX_BYTES = 4 * KiB  # the model cache's verified-hash stamps


def expand_user(path: str | os.PathLike[str]) -> Path:
    """``path`` with a leading ``~`` or ``~user`` made that user's home; a MemlensError names a user this machine
    does not know (pathlib raises a RuntimeError, a traceback)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        first = Path(path).parts[0] if Path(path).parts else str(path)
        raise MemlensError(f"{str(path)[:200]}: cannot expand {first[:80]}: no such user on this machine, or no home "
                           "directory known") from None


def size_text(n: int) -> str:
    """``n`` bytes in the largest whole binary unit: ``64 MiB``, ``4 KiB``, ``100 bytes``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def kind_of(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file" if not stat.S_ISREG(mode) else "a regular file"


_PSEUDO_FS = ("proc", "sys", "dev")


def on_pseudo_fs(path: str | os.PathLike[str]) -> str | None:
    """``/proc``, ``/sys`` or ``/dev`` when ``path`` resolves under one (``/dev/shm`` is a real tmpfs), else None.

    Their folders exist and their files look regular, but they hold the
    system's state, not the user's documents.
    """
    parts = Path(os.path.realpath(path)).parts
    if len(parts) > 1 and parts[1] in _PSEUDO_FS and parts[1:3] != ("dev", "shm"):
        return "/" + parts[1]
    return None


def _read_fd(fd: int, cap: int) -> bytes:
    """Up to ``cap + 1`` bytes from ``fd`` (the extra byte tells an over-long file)."""
    chunks: list[bytes] = []
    left = cap + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_file(path: str | os.PathLike[str], *, cap: int, what: str = "file", follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most ``cap`` bytes; anything else is a one-line MemlensError.

    The file is opened non-blocking (a FIFO swapped in after a check cannot
    block the open) and checked with ``fstat`` on the open descriptor, so what
    is read is what was checked.
    """
    name = str(path)
    where = f"{what} {name}" if what else name
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise MemlensError(f"{where}: no such file") from None
    except OSError as exc:
        raise MemlensError(f"{where}: cannot read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise MemlensError(f"{where}: is {kind_of(mode)}, not a regular file")
        try:
            data = _read_fd(fd, cap)
        except OSError as exc:
            raise MemlensError(f"{where}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise MemlensError(f"{where}: larger than the {size_text(cap)} limit")
    return data


def read_stdin(*, cap: int, what: str = "input") -> bytes:
    """Standard input, at most ``cap`` bytes (``< /dev/zero`` stops at the cap, not at the memory's end)."""
    data = sys.stdin.buffer.read(cap + 1)
    if len(data) > cap:
        raise MemlensError(f"{what} <stdin>: larger than the {size_text(cap)} limit".lstrip())
    return data


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and any missing parents, each one 0700 (``mkdir -p`` would make parents 0755).

    Folders that already exist are left as they are: they are not ours.
    """
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue  # made meanwhile by another process: not ours to change
        os.chmod(d, 0o700)  # a restrictive umask could have taken the owner's bits too


ORPHAN_AGE_S = 600  # a temp file untouched this long, of a process that is gone, is an orphan
ORPHAN_ANY_S = 86400  # untouched this long, it is one whatever its PID (reused since, or another host's)


def _remove_orphans(path: Path) -> None:
    """Remove ``write_private``'s temp files for ``path`` left by writers that are gone: exactly ``.NAME.PID.tmp`` or
    ``.NAME.PID.HEX8.tmp``, not written to for ``ORPHAN_AGE_S`` and of a PID this host does not run (signal 0), or
    not written to for ``ORPHAN_ANY_S``. A writer writing keeps its file's time fresh (on a shared folder another
    host's PIDs are not this host's to ask: the age keeps its file)."""
    if os.name != "posix":
        return
    shape = re.compile(rf"\.{re.escape(path.name)}\.([0-9]{{1,10}})(?:\.[0-9a-f]{{8}})?\.tmp")
    try:
        names = [(n, int(m.group(1))) for n in os.listdir(path.parent) if (m := shape.fullmatch(n))]
    except OSError:
        return
    now = time.time()
    for name, pid in names:
        target = path.parent / name
        try:
            age = now - target.lstat().st_mtime
        except OSError:
            continue
        if age < ORPHAN_AGE_S or (pid == os.getpid() and age < ORPHAN_ANY_S):
            continue
        if age < ORPHAN_ANY_S:
            try:
                os.kill(pid, 0)
                continue  # running: maybe still writing it
            except ProcessLookupError:
                pass
            except (OSError, OverflowError, ValueError):  # another user's process, or not one to ask: left alone
                continue
        try:
            os.unlink(target)
        except OSError:
            pass


def write_private(path: Path, data: bytes | list[bytes]) -> None:
    """Write ``data`` (or its chunks, in order) to a new 0600 file at ``path`` atomically (temp file + rename).

    The temp file is ``.NAME.PID.RANDOM.tmp`` beside it: two threads writing one path at once do not collide, and
    one left by a process killed while writing (the model's cache is ~90 MB) is removed by a later write once
    that process is gone and the file untouched for 10 minutes (``_remove_orphans``; a later process with the
    same PID used to fail on it).
    """
    _remove_orphans(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.writelines([data] if isinstance(data, bytes) else data)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
