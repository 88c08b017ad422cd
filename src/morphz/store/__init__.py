"""ContextDB storage: the one package that speaks SQL. Backends implement :class:`Store`."""

from morphz.store.base import ActivationRow, ContextRow, ReadTxn, SessionRow, Store, WriteTxn
from morphz.store.sqlite import SqliteStore

__all__ = [
    "ActivationRow",
    "ContextRow",
    "ReadTxn",
    "SessionRow",
    "SqliteStore",
    "Store",
    "WriteTxn",
]
