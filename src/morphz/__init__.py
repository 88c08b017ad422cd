"""Morphz: a runtime for long-running LLM agents that keep a finite context through context
transactions.

>>> import morphz
>>> db = morphz.open("morphz.db")                      # doctest: +SKIP
>>> ctx = db.context("context-default", create=True)   # doctest: +SKIP
"""

from morphz.contextdb import DEFAULT_CONTEXT, DEFAULT_SESSION, Context
from morphz.database import Database, open
from morphz.errors import (
    BudgetError,
    ConflictError,
    ContextExistsError,
    ContextNotFoundError,
    InputError,
    MorphzError,
    NotFoundError,
    ParseError,
    ProtectedError,
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

__version__ = "0.1.0"

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
    "Database",
    "Event",
    "InputError",
    "Mind",
    "MorphzError",
    "NotFoundError",
    "Observation",
    "ParseError",
    "ProtectedError",
    "Receipt",
    "SchemaError",
    "StaleVersionError",
    "Status",
    "StoreBusyError",
    "StoreError",
    "TxError",
    "ValidationError",
    "__version__",
    "open",
    "parse_tx",
    "print_tx",
    "read_tx",
]
