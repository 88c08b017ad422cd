"""The typed form of a context transaction (the parser's output, the mind layer's input).

Every operation records ``pos``: the character offset of its opening parenthesis in the source
text, so errors can name a line and column (see :func:`morphz.txlang.sexpr.line_col`).
Bodies are kept both as parsed S-expressions (``body``) and as their canonical text
(``body_text``), which is what the mind stores.

Targets and sources are strings: a frame id (``deployment/current``) or an event ref (``@e42``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from morphz.txlang.sexpr import SExpr

PlaceWhere = Literal["first", "last", "before", "after"]


@dataclass(frozen=True, slots=True)
class Create:
    id: str
    body: tuple[SExpr, ...]
    body_text: str
    pos: int = field(default=0, compare=False)
    name: str = "create"


@dataclass(frozen=True, slots=True)
class Derive:
    id: str
    sources: tuple[str, ...]
    body: tuple[SExpr, ...]
    body_text: str
    pos: int = field(default=0, compare=False)
    name: str = "derive"


@dataclass(frozen=True, slots=True)
class Revise:
    id: str
    sources: tuple[str, ...] | None  # None: keep the frame's sources
    body: tuple[SExpr, ...]
    body_text: str
    pos: int = field(default=0, compare=False)
    name: str = "revise"


@dataclass(frozen=True, slots=True)
class Retire:
    targets: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "retire"


@dataclass(frozen=True, slots=True)
class Restore:
    targets: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "restore"


@dataclass(frozen=True, slots=True)
class Protect:
    targets: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "protect"


@dataclass(frozen=True, slots=True)
class Unprotect:
    targets: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "unprotect"


@dataclass(frozen=True, slots=True)
class Relate:
    subject: str
    relation: str
    object: str
    pos: int = field(default=0, compare=False)
    name: str = "relate"


@dataclass(frozen=True, slots=True)
class Unrelate:
    subject: str
    relation: str
    object: str
    pos: int = field(default=0, compare=False)
    name: str = "unrelate"


@dataclass(frozen=True, slots=True)
class Place:
    id: str
    where: PlaceWhere
    anchor: str | None  # the ID2 of (before ID2) / (after ID2)
    pos: int = field(default=0, compare=False)
    name: str = "place"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    checkpoint: str
    pos: int = field(default=0, compare=False)
    name: str = "checkpoint"


@dataclass(frozen=True, slots=True)
class Rollback:
    checkpoint: str
    pos: int = field(default=0, compare=False)
    name: str = "rollback"


@dataclass(frozen=True, slots=True)
class DropCheckpoint:
    checkpoints: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "drop-checkpoint"


@dataclass(frozen=True, slots=True)
class RetireSession:
    sessions: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "retire-session"


@dataclass(frozen=True, slots=True)
class RestoreSession:
    sessions: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "restore-session"


Op = (
    Create
    | Derive
    | Revise
    | Retire
    | Restore
    | Protect
    | Unprotect
    | Relate
    | Unrelate
    | Place
    | Checkpoint
    | Rollback
    | DropCheckpoint
    | RetireSession
    | RestoreSession
)

OP_NAMES: tuple[str, ...] = (
    "create",
    "derive",
    "revise",
    "retire",
    "restore",
    "protect",
    "unprotect",
    "relate",
    "unrelate",
    "place",
    "checkpoint",
    "rollback",
    "drop-checkpoint",
    "retire-session",
    "restore-session",
)

# Operations whose presence makes (reason "...") mandatory (DESIGN §5).
REASON_REQUIRED: frozenset[str] = frozenset(
    {"retire", "unprotect", "unrelate", "rollback", "drop-checkpoint", "retire-session"}
)

# Operations that need the exact current version and are never rebased (DESIGN §6).
EXACT_VERSION: frozenset[str] = frozenset({"rollback", "retire-session", "restore-session"})


@dataclass(frozen=True, slots=True)
class Tx:
    """A parsed ``(context-tx (base-version N) [(reason "...")] OP...)``."""

    base_version: int
    reason: str | None
    ops: tuple[Op, ...]
    source: str = field(default="", compare=False)  # the text it was parsed from (positions)

    @property
    def needs_exact_version(self) -> bool:
        return any(op.name in EXACT_VERSION for op in self.ops)
