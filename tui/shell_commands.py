"""What the assistant shell understands, kept apart from Textual so it can be tested alone.

A line typed in the shell is one of three things:

* a question, sent to memlens as the agent's user would send it:
  plain text (the ``memory`` profile), ``/memory ...`` (the engine routes it to
  ``conversation``), or ``@PROFILE ...`` to name any configured profile;
* a ``:command`` for quick curation and the working memory
  (``:deprecate``, ``:review``, ``:activate``, ``:task ...``, ``:budget``,
  ``:help``, ``:clear``), parsed here with :mod:`shlex`;
* nothing (an empty line).

``parse`` turns a line into a small dataclass or raises :class:`ShellError`
with a one-line message; ``execute`` runs a write through the app's
:class:`~memlens.tui.service.Lens` (so it blocks: call it from a worker);
``suggest`` and :class:`History` back the input's completion and recall.
``@`` was chosen for profiles because ``word:`` collides with ordinary
questions ("note: the lidar ...") while ``@`` rarely starts one.
"""

from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass, field
from typing import Any

from memlens.limits import MAX_BUDGET as LIMIT_BUDGET

DEFAULT_BUDGET = 1200
MIN_BUDGET, MAX_BUDGET = 1, LIMIT_BUDGET  # what the context preview, the CLI and MCP take
STATUS_COMMANDS = {"deprecate": "deprecated", "review": "under_review", "activate": "active"}
TASK_ACTIONS = ("complete", "block", "unblock")
COMMANDS = ("activate", "budget", "clear", "deprecate", "help", "ingest", "review", "task")
USAGE = {
    "deprecate": ":deprecate ID",
    "review": ":review ID",
    "activate": ":activate ID",
    "task": ':task complete|block|unblock TASK_ID ...',
    "task complete": ':task complete TASK_ID --intent "..." [--failed]',
    "task block": ':task block TASK_ID --reason "..."',
    "task unblock": ":task unblock TASK_ID",
    "budget": ":budget [TOKENS]",
    "help": ":help",
    "ingest": ":ingest PATH... --wing W [--room R]",
    "clear": ":clear",
}
HELP = f"""\
**Ask** as the agent's user would. The context below each question is exactly what the agent
would receive: working memory first, then retrieved memory within the token budget.

| you type | profile |
|---|---|
| `why do callbacks block` | memory (all kinds, authority policy) |
| `/memory why did lidar_filter hang` | conversation (turns + the latest turns of the session) |
| `@academic executor scheduling` | any profile by name: `@memory`, `@academic`, `@personal`, `@conversation` |

**Commands** (Tab completes names and ids, ↑/↓ recall earlier lines):

| command | effect |
|---|---|
| `{USAGE['deprecate']}` · `{USAGE['review']}` · `{USAGE['activate']}` | set an entry's status (audited) |
| `{USAGE['task complete']}` | record a completed task in working memory |
| `{USAGE['task block']}` · `{USAGE['task unblock']}` | add or resolve a blocker |
| `{USAGE['budget']}` | show or set the context budget (default {DEFAULT_BUDGET}) |
| `{USAGE['ingest']}` | read documents into a wing (each file's chunks, replaced when it changes) |
| `:help` · `:clear` | this help · empty the transcript (also ctrl+l) |

**The trace line** under each question: profile · entries *kept* whole · *summarised* · *dropped*
by the budget · candidates *filtered* by earlier stages (scope, thresholds, caps, overrides) ·
tokens used / budget (working memory included) · latency · cache. PgUp/PgDn scroll the transcript.
"""


class ShellError(ValueError):
    """A line the shell cannot run; the message fits on one line."""


# -- what a line means ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """A question; ``profile`` None lets the engine route (plain text → memory, ``/memory`` → conversation)."""

    text: str
    profile: str | None = None


@dataclass(frozen=True)
class SetStatus:
    entry_id: str
    status: str


@dataclass(frozen=True)
class CompleteTask:
    task_id: str
    intent: str
    failed: bool = False


@dataclass(frozen=True)
class BlockTask:
    task_id: str
    reason: str


@dataclass(frozen=True)
class UnblockTask:
    task_id: str


@dataclass(frozen=True)
class SetBudget:
    """``tokens`` None only shows the current budget."""

    tokens: int | None


@dataclass(frozen=True)
class Ingest:
    """Files and folders to ingest into ``wing`` (documents and source code; see ``memlens.ingest``)."""

    paths: tuple[str, ...]
    wing: str
    room: str = ""


@dataclass(frozen=True)
class Help:
    pass


@dataclass(frozen=True)
class Clear:
    pass


Command = Ask | SetStatus | CompleteTask | BlockTask | UnblockTask | SetBudget | Ingest | Help | Clear
WRITES = (SetStatus, CompleteTask, BlockTask, UnblockTask)


# -- parsing -------------------------------------------------------------------------------------


def parse(line: str, profiles: list[str] | None = None) -> Command | None:
    """The command a line stands for; None for an empty line; ShellError when it is wrong. ``profiles``: the store's
    profile names, which an ``@PROFILE`` question must name (checked here, while the line is still in the input)."""
    text = line.strip()
    if not text:
        return None
    if text.startswith(":"):
        return _command(text[1:])
    if text.startswith("/"):
        head = text.split(None, 1)
        if head[0] != "/memory":
            raise ShellError(f"unknown command {head[0]} (questions: plain text, /memory ..., @profile ...; :help)")
        if len(head) == 1:
            raise ShellError("usage: /memory QUESTION")
        return Ask(text)
    if text.startswith("@"):
        head = text.split(None, 1)
        name = head[0][1:]
        if not name:
            raise ShellError("usage: @PROFILE QUESTION (e.g. @academic executor scheduling)")
        if len(head) == 1:
            raise ShellError(f"usage: @{name} QUESTION")
        if profiles and name not in profiles:
            close = difflib.get_close_matches(name, profiles, n=1)
            hint = f"; did you mean @{close[0]}?" if close else ""
            raise ShellError(f"unknown profile {name!r}{hint} (profiles: {', '.join(profiles)})")
        return Ask(head[1].strip(), name)
    return Ask(text)


def _command(body: str) -> Command:
    try:
        words = shlex.split(body)
    except ValueError as exc:  # "No closing quotation"
        raise ShellError(f"cannot parse the command: {str(exc).lower()}") from None
    if not words:
        raise ShellError("empty command (:help lists them)")
    name, args = words[0], words[1:]
    if name in STATUS_COMMANDS:
        (entry_id,) = _positional(args, 1, USAGE[name])
        return SetStatus(entry_id, STATUS_COMMANDS[name])
    if name == "task":
        return _task(args)
    if name == "budget":
        (value,) = _positional(args, 1, USAGE["budget"], optional=True) or (None,)
        return SetBudget(None if value is None else _tokens(value))
    if name == "ingest":
        pos, opts = _options(args, {"--wing": True, "--room": True}, USAGE["ingest"])
        if not pos:
            raise ShellError(f"give at least one file or folder: {USAGE['ingest']}")
        if not opts.get("--wing", "").strip():
            raise ShellError(f"--wing is required: {USAGE['ingest']}")
        return Ingest(tuple(pos), opts["--wing"].strip(), opts.get("--room", "").strip())
    if name in ("help", "clear"):
        _positional(args, 0, USAGE[name])
        return Help() if name == "help" else Clear()
    close = difflib.get_close_matches(name, COMMANDS, n=1)
    hint = f"; did you mean :{close[0]}?" if close else ""
    raise ShellError(f"unknown command :{name}{hint} (:help lists them)")


def _task(args: list[str]) -> Command:
    if not args or args[0] not in TASK_ACTIONS:
        what = f"unknown task action {args[0]!r}; " if args else ""
        raise ShellError(f"{what}usage: {USAGE['task']}")
    action, rest = args[0], args[1:]
    usage = USAGE[f"task {action}"]
    if action == "complete":
        pos, opts = _options(rest, {"--intent": True, "--failed": False}, usage)
        (task_id,) = _positional(pos, 1, usage)
        if not opts.get("--intent", "").strip():
            raise ShellError(f"--intent is required: {usage}")
        return CompleteTask(task_id, opts["--intent"].strip(), bool(opts.get("--failed")))
    if action == "block":
        pos, opts = _options(rest, {"--reason": True}, usage)
        (task_id,) = _positional(pos, 1, usage)
        if not opts.get("--reason", "").strip():
            raise ShellError(f"--reason is required: {usage}")
        return BlockTask(task_id, opts["--reason"].strip())
    (task_id,) = _positional(rest, 1, usage)
    return UnblockTask(task_id)


def _options(args: list[str], known: dict[str, bool], usage: str) -> tuple[list[str], dict[str, Any]]:
    """Split ``--name value`` / ``--name=value`` / ``--flag`` from positional words."""
    pos: list[str] = []
    opts: dict[str, Any] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if name not in known:
                raise ShellError(f"unknown option {name}: {usage}")
            if known[name]:
                if not eq:
                    i += 1
                    if i >= len(args):
                        raise ShellError(f"{name} needs a value: {usage}")
                    value = args[i]
                opts[name] = value
            elif eq:
                raise ShellError(f"{name} takes no value: {usage}")
            else:
                opts[name] = True
        else:
            pos.append(word)
        i += 1
    return pos, opts


def _positional(args: list[str], n: int, usage: str, optional: bool = False) -> list[str]:
    if optional and not args:
        return []
    if len(args) < n:
        raise ShellError(f"missing {'an argument' if n - len(args) == 1 else 'arguments'}: {usage}")
    if len(args) > n:
        raise ShellError(f"unexpected {args[n]!r}: {usage}")
    return args


def _tokens(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ShellError(f"the budget is a whole number of tokens, got {value!r}") from None
    if not MIN_BUDGET <= n <= MAX_BUDGET:
        raise ShellError(f"the budget must be from {MIN_BUDGET} to {MAX_BUDGET:,} tokens, got {n:,}")
    return n


# -- running writes ------------------------------------------------------------------------------


def execute(cmd: Command, lens: Any) -> str:
    """Run a write command through ``lens`` (blocking) and say what changed, in one line.

    Engine errors (``NotFoundError`` for an unknown id, ``ValidationError``)
    propagate unchanged: their messages are already written for users.
    """
    if isinstance(cmd, SetStatus):
        entry = lens.get(cmd.entry_id)
        if entry.status.value == cmd.status:
            return f"{entry.id} is already {cmd.status}: nothing written"
        before = entry.status.value
        entry = lens.set_status(cmd.entry_id, cmd.status)
        return f"{entry.id} \u201c{entry.title}\u201d: {before} \u2192 {entry.status.value}"
    if isinstance(cmd, CompleteTask):
        task = lens.complete_task(cmd.task_id, cmd.intent, failed=cmd.failed)
        return f"task {task.task_id} completed ({task.outcome.value}): {task.intent}"
    if isinstance(cmd, BlockTask):
        blocker = lens.block_task(cmd.task_id, cmd.reason)
        return f"task {blocker.task_id} blocked: {blocker.reason}"
    if isinstance(cmd, UnblockTask):
        blocker = lens.unblock_task(cmd.task_id)
        return f"task {blocker.task_id} unblocked (was: {blocker.reason})"
    raise TypeError(f"{type(cmd).__name__} is not a write")


def budget_counts(bundle: Any) -> dict[str, int]:
    """What the budget did to a bundle: kept, summarised, dropped; and candidates filtered before it."""
    items = (bundle.trace.budget or {}).get("items")
    if items is None:  # no budget applied: everything returned was kept
        n = {"kept": len(bundle.results), "summarised": 0, "dropped": 0}
    else:
        n = {a: sum(1 for i in items if i["action"] == a) for a in ("kept", "summarised", "dropped")}
    n["filtered"] = sum(1 for d in bundle.trace.dropped if d.stage != "budget")
    return n


# -- completion and recall -----------------------------------------------------------------------


@dataclass
class Known:
    """Values the completion offers; refreshed by the screen after every write."""

    entry_ids: list[str] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)
    blocked_ids: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=lambda: ["memory", "academic", "personal", "conversation"])


def _first(prefix: str, options: list[str]) -> str | None:
    return next((o for o in options if o.startswith(prefix) and o != prefix), None)


def suggest(value: str, known: Known) -> str | None:
    """The whole line completed at its last word, or None (Textual shows the rest greyed out)."""
    if not value or value.endswith(" "):
        head, word = value.rstrip(), ""
        if not value:
            return None
    else:
        head, _, word = value.rpartition(" ")
    words = head.split()
    prefix = value[: len(value) - len(word)]
    if not words:  # the first word
        if word.startswith(":"):
            hit = _first(word[1:], list(COMMANDS))
            return None if hit is None else f":{hit} "
        if word.startswith("@"):
            hit = _first(word[1:], known.profiles)
            return None if hit is None else f"@{hit} "
        if word.startswith("/") and "/memory".startswith(word) and word != "/memory":
            return "/memory "
        return None
    if not word:
        return None
    first = words[0]
    if first in (":deprecate", ":review", ":activate") and len(words) == 1:
        options = known.entry_ids
    elif first == ":task" and len(words) == 1:
        options = list(TASK_ACTIONS)
    elif first == ":task" and len(words) == 2 and words[1] in TASK_ACTIONS:
        options = known.blocked_ids if words[1] == "unblock" else known.task_ids
    elif first == ":ingest" and word.startswith("--"):
        options = ["--wing", "--room"]
    elif first == ":task" and len(words) >= 3 and word.startswith("--"):
        options = {"complete": ["--intent", "--failed"], "block": ["--reason"]}.get(words[1], [])
    else:
        return None
    hit = _first(word, options)
    return None if hit is None else prefix + hit


class History:
    """Earlier lines, newest last; ↑/↓ walk them like a shell, keeping the line being typed."""

    def __init__(self, limit: int = 200) -> None:
        self.lines: list[str] = []
        self.limit = limit
        self._pos: int | None = None
        self._draft = ""

    def add(self, line: str) -> None:
        line = line.strip()
        if line and (not self.lines or self.lines[-1] != line):
            self.lines.append(line)
            del self.lines[: -self.limit]
        self._pos = None

    def previous(self, current: str) -> str | None:
        """The line before the one shown (None at the oldest or with no history)."""
        if not self.lines:
            return None
        if self._pos is None:
            self._draft, self._pos = current, len(self.lines)
        if self._pos == 0:
            return None
        self._pos -= 1
        return self.lines[self._pos]

    def next(self) -> str | None:
        """The line after the one shown; past the newest, the draft that was being typed."""
        if self._pos is None:
            return None
        self._pos += 1
        if self._pos >= len(self.lines):
            self._pos = None
            return self._draft
        return self.lines[self._pos]
