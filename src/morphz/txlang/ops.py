"""The typed form of a context transaction (the parser's output, the mind layer's input).

Every operation records ``pos``: the character offset of its opening parenthesis in the source
text, so errors can name a line and column (see :func:`morphz.txlang.sexpr.line_col`).
Bodies are kept both as parsed S-expressions (``body``) and as their canonical text
(``body_text``), which is what the mind stores.

Targets and sources are strings: a frame id (``deployment/current``) or an event ref (``@e42``).

The classes are values: compared and hashed by their fields, never changed after construction.
They are not declared ``frozen`` only because a frozen dataclass's ``__init__`` costs about four
times as much, and every transaction (live and replayed) builds several of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from morphz.txlang.sexpr import SExpr, read_canonical_items

PlaceWhere = Literal["first", "last", "before", "after"]


class BodySpan:
    """Where a body lies in canonical source text: its items start at offset ``start`` and end
    before the closing parenthesis of their operation (see
    :func:`~morphz.txlang.sexpr.read_canonical_items`)."""

    __slots__ = ("source", "start")

    def __init__(self, source: str, start: int) -> None:
        self.source = source
        self.start = start


class _BodyOp:
    """What Create, Derive and Revise share: a frame id, a body and its canonical text.

    Written out rather than declared as dataclasses for one reason: ``body`` may be given as
    a :class:`BodySpan` (the parser's canonical fast path does), and is then read from that
    span on first use, with the same nodes and positions; the mind only uses ``body_text``.
    Compared, hashed and shown like the dataclasses here: by every field but ``pos``.
    """

    __slots__ = ("_body", "_span", "body_text", "id", "name", "pos")
    _fields: ClassVar[tuple[str, ...]]
    id: str
    body_text: str
    pos: int
    name: str

    def _set_body(self, body: tuple[SExpr, ...] | BodySpan) -> None:
        if isinstance(body, BodySpan):
            self._body: tuple[SExpr, ...] | None = None
            self._span: BodySpan | None = body
        else:
            self._body, self._span = body, None

    @property
    def body(self) -> tuple[SExpr, ...]:
        body = self._body
        if body is None:
            assert self._span is not None
            read = read_canonical_items(self._span.source, self._span.start)
            assert read is not None, "a BodySpan must hold canonical items"
            body = self._body = read[0]
        return body

    def _key(self) -> tuple[object, ...]:
        return tuple([getattr(self, name) for name in self._fields if name != "pos"])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _BodyOp)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join([f"{name}={getattr(self, name)!r}" for name in self._fields])
        return f"{self.__class__.__qualname__}({fields})"


class Create(_BodyOp):
    __slots__ = ()
    _fields = ("id", "body", "body_text", "pos", "name")
    __match_args__ = ("id", "body", "body_text", "pos", "name")

    def __init__(
        self,
        id: str,
        body: tuple[SExpr, ...] | BodySpan,
        body_text: str,
        pos: int = 0,
        name: str = "create",
    ) -> None:
        self.id = id
        self._set_body(body)
        self.body_text = body_text
        self.pos = pos
        self.name = name


class Derive(_BodyOp):
    __slots__ = ("sources",)
    _fields = ("id", "sources", "body", "body_text", "pos", "name")
    __match_args__ = ("id", "sources", "body", "body_text", "pos", "name")

    def __init__(  # noqa: PLR0917 - positional, as the dataclass it stands for
        self,
        id: str,
        sources: tuple[str, ...],
        body: tuple[SExpr, ...] | BodySpan,
        body_text: str,
        pos: int = 0,
        name: str = "derive",
    ) -> None:
        self.id = id
        self.sources = sources
        self._set_body(body)
        self.body_text = body_text
        self.pos = pos
        self.name = name


class Revise(_BodyOp):
    __slots__ = ("sources",)
    _fields = ("id", "sources", "body", "body_text", "pos", "name")
    __match_args__ = ("id", "sources", "body", "body_text", "pos", "name")

    def __init__(  # noqa: PLR0917 - positional, as the dataclass it stands for
        self,
        id: str,
        sources: tuple[str, ...] | None,  # None: keep the frame's sources
        body: tuple[SExpr, ...] | BodySpan,
        body_text: str,
        pos: int = 0,
        name: str = "revise",
    ) -> None:
        self.id = id
        self.sources = sources
        self._set_body(body)
        self.body_text = body_text
        self.pos = pos
        self.name = name


@dataclass(slots=True, unsafe_hash=True)
class Retire:
    targets: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "retire"


@dataclass(slots=True, unsafe_hash=True)
class Restore:
    targets: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "restore"


@dataclass(slots=True, unsafe_hash=True)
class Protect:
    targets: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "protect"


@dataclass(slots=True, unsafe_hash=True)
class Unprotect:
    targets: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "unprotect"


@dataclass(slots=True, unsafe_hash=True)
class Relate:
    subject: str
    relation: str
    object: str
    pos: int = field(default=0, compare=False)
    name: str = "relate"


@dataclass(slots=True, unsafe_hash=True)
class Unrelate:
    subject: str
    relation: str
    object: str
    pos: int = field(default=0, compare=False)
    name: str = "unrelate"


@dataclass(slots=True, unsafe_hash=True)
class Place:
    id: str
    where: PlaceWhere
    anchor: str | None  # the ID2 of (before ID2) / (after ID2)
    pos: int = field(default=0, compare=False)
    name: str = "place"


@dataclass(slots=True, unsafe_hash=True)
class Checkpoint:
    checkpoint: str
    pos: int = field(default=0, compare=False)
    name: str = "checkpoint"


@dataclass(slots=True, unsafe_hash=True)
class Rollback:
    checkpoint: str
    pos: int = field(default=0, compare=False)
    name: str = "rollback"


@dataclass(slots=True, unsafe_hash=True)
class DropCheckpoint:
    checkpoints: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "drop-checkpoint"


@dataclass(slots=True, unsafe_hash=True)
class RetireSession:
    sessions: tuple[str, ...]
    pos: int = field(default=0, compare=False)
    name: str = "retire-session"


@dataclass(slots=True, unsafe_hash=True)
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


@dataclass(slots=True, unsafe_hash=True)
class Tx:
    """A parsed ``(context-tx (base-version N) [(reason "...")] OP...)``."""

    base_version: int
    reason: str | None
    ops: tuple[Op, ...]
    source: str = field(default="", compare=False)  # the text it was parsed from (positions)
    # True only when ``source`` is already the canonical text (``print_tx`` would give it back
    # byte for byte): the parser's canonical fast path sets it, so the commit need not print.
    canonical: bool = field(default=False, compare=False, repr=False)
    base_pos: int = field(default=0, compare=False, repr=False)  # where (base-version N) stands

    @property
    def needs_exact_version(self) -> bool:
        return any(op.name in EXACT_VERSION for op in self.ops)
