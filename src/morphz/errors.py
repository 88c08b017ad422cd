"""The Morphz error tree.

Every error Morphz raises on purpose is a :class:`MorphzError`. Each carries a short
machine-readable ``code`` and a message that says what to do next. Interfaces (CLI, HTTP, MCP)
map this tree to their own outputs in exactly one place each.

::

    MorphzError                      code
    ├── TxError                      (a refused context transaction; .op, .op_index, .line, .column)
    │   ├── ParseError               parse          malformed text, unknown operation, bad argument
    │   ├── ValidationError          validation     well-formed but not allowed in this state
    │   ├── StaleVersionError        stale-version  exact-version operation on an old base version
    │   ├── ConflictError            conflict       a boundary the tx reads or writes changed
    │   ├── ProtectedError           protected      target is protected (or a causal root request)
    │   ├── NotFoundError            not-found      a frame, event, edge, checkpoint or session
    │   └── BudgetError              budget         the change would not fit the context budget
    ├── ContextNotFoundError         not-found      no context of that name in the store
    ├── ContextExistsError           exists         create of a context that already exists
    ├── InputError                   input          a bad argument to an API call (kind, time, meta)
    │   ├── CursorError              cursor         a cursor altered, or of another query
    │   ├── HistoryImportError       import         a bad line in a history import (names the line)
    │   └── ToolError                tool           a tool call the agent must fix (its result says)
    │       └── ArgumentError        tool           arguments that break the tool's schema
    ├── RecordNotFoundError          not-found      an event ref or frame a read asked for
    ├── StoreError                   store          the database failed or cannot be opened
    │   ├── DamagedStoreError        store          a stored row cannot be read (audit, restore)
    │   ├── StoreBusyError           busy           the database stayed locked past the timeout
    │   └── SchemaError              schema         the file is newer than this Morphz, or corrupt
    └── ProviderError                provider       a model provider refused or failed a request
        ├── AuthError                provider-auth  the key is missing or refused
        ├── RateLimitError           provider-rate-limit  too many requests (.retry_after)
        ├── ContextTooLongError      provider-context-too-long  the input is over the model's window
        └── BadResponseError         provider-bad-response  a reply that cannot be read

A refused transaction leaves the store exactly as it was. The runtime's errors are defined
beside what raises them: the tool errors in :mod:`morphz.runtime.tools.base`, and the
provider's (raised by a model's ``request``) in :mod:`morphz.runtime.models.base`.
"""

from __future__ import annotations

from typing import Any


class MorphzError(Exception):
    """Base of every error Morphz raises on purpose."""

    code: str = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


class TxError(MorphzError):
    """A refused context transaction. Position fields are ``None`` when they do not apply."""

    code = "tx"

    def __init__(
        self,
        message: str,
        *,
        op: str | None = None,
        op_index: int | None = None,
        line: int | None = None,
        column: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.op = op
        self.op_index = op_index
        self.line = line
        self.column = column
        self.details: dict[str, Any] = details or {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "op": self.op,
            "op_index": self.op_index,
            "line": self.line,
            "column": self.column,
        }
        if self.details:
            out["details"] = dict(self.details)
        return out

    def __str__(self) -> str:
        where = ""
        if self.line is not None:
            where = f" (line {self.line}, column {self.column})"
        op = f" in {self.op}" if self.op else ""
        return f"{self.code}{op}{where}: {self.message}"


class ParseError(TxError):
    code = "parse"


class ValidationError(TxError):
    code = "validation"


class StaleVersionError(TxError):
    code = "stale-version"


class ConflictError(TxError):
    code = "conflict"

    @property
    def boundaries(self) -> list[str]:
        value = self.details.get("changed_boundaries", [])
        return list(value)


class ProtectedError(TxError):
    code = "protected"


class NotFoundError(TxError):
    code = "not-found"


class BudgetError(TxError):
    code = "budget"


class ContextNotFoundError(MorphzError):
    code = "not-found"


class ContextExistsError(MorphzError):
    code = "exists"


class InputError(MorphzError):
    code = "input"


class CursorError(InputError):
    code = "cursor"


class HistoryImportError(InputError):
    """A history import refused: ``line`` names the offending line (1-based)."""

    code = "import"

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "line": self.line}


class RecordNotFoundError(MorphzError):
    code = "not-found"


class StoreError(MorphzError):
    code = "store"

    def __init__(self, message: str, *, cause: str | None = None) -> None:
        super().__init__(message)
        #: what failed and what to do about it, without what ``message`` says of one command
        #: (that nothing was changed, to run it again): for a caller whose earlier writes
        #: stand, such as an agent run that had recorded steps before this write failed
        self.cause = message if cause is None else cause


class DamagedStoreError(StoreError):
    """A row of the store cannot be read (text that is not UTF-8, meta that is not JSON): the
    message names it and says to audit the context and restore the store from a backup."""


class StoreBusyError(StoreError):
    code = "busy"

    #: How the library's messages say to wait longer (``morphz.open(busy_timeout=...)``); an
    #: interface where that is set otherwise names its own way in its place.
    WAIT_LONGER = "raise busy_timeout"


class SchemaError(StoreError):
    code = "schema"
