"""Morphz: a runtime for long-running LLM agents that keep a finite context through context
transactions.

>>> import morphz
>>> db = morphz.open("morphz.db")                      # doctest: +SKIP
>>> ctx = db.context("context-default", create=True)   # doctest: +SKIP
"""

from typing import TYPE_CHECKING, Any

from morphz import capacity
from morphz.contextdb import DEFAULT_CONTEXT, DEFAULT_SESSION, Context
from morphz.database import Database, open
from morphz.errors import (
    BudgetError,
    ConflictError,
    ContextExistsError,
    ContextNotFoundError,
    CursorError,
    DamagedStoreError,
    HistoryImportError,
    InputError,
    MorphzError,
    NotFoundError,
    ParseError,
    ProtectedError,
    RecordNotFoundError,
    SchemaError,
    StaleVersionError,
    StoreBusyError,
    StoreError,
    TxError,
    ValidationError,
)
from morphz.events import Event
from morphz.mind import CLOCK_KINDS, DEFAULT_WINDOW, OBSERVATION_KINDS
from morphz.observe import Observation
from morphz.results import AuditReport, Mind, Receipt, Status
from morphz.txlang import parse_tx, print_tx, read_tx

if TYPE_CHECKING:
    from morphz import encoding

__version__ = "0.1.0"


if not TYPE_CHECKING:  # (a visible __getattr__ would make every morphz.NAME type-check)

    def __getattr__(name: str) -> Any:
        """``morphz.encoding`` on first use (it is only needed to compile requests, and takes
        a sixth of the package's import time)."""
        if name == "encoding":
            import morphz.encoding  # sets the attribute: later uses do not come here

            return morphz.encoding
        raise AttributeError(f"module 'morphz' has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), "encoding"})


__all__ = [
    "CLOCK_KINDS",
    "DEFAULT_CONTEXT",
    "DEFAULT_SESSION",
    "DEFAULT_WINDOW",
    "OBSERVATION_KINDS",
    "AuditReport",
    "BudgetError",
    "ConflictError",
    "Context",
    "ContextExistsError",
    "ContextNotFoundError",
    "CursorError",
    "DamagedStoreError",
    "Database",
    "Event",
    "HistoryImportError",
    "InputError",
    "Mind",
    "MorphzError",
    "NotFoundError",
    "Observation",
    "ParseError",
    "ProtectedError",
    "Receipt",
    "RecordNotFoundError",
    "SchemaError",
    "StaleVersionError",
    "Status",
    "StoreBusyError",
    "StoreError",
    "TxError",
    "ValidationError",
    "__version__",
    "capacity",
    "encoding",
    "open",
    "parse_tx",
    "print_tx",
    "read_tx",
]
