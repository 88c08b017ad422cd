"""The pure mind layer: value types, operation application, lifecycle and conflict rules.

No I/O, clocks or randomness here: the live commit and the audit replay call the same functions.
"""

from morphz.mind.apply import REPLAY_ENV, Env, apply_tx
from morphz.mind.conflicts import decide_rebase, tx_boundaries
from morphz.mind.lifecycle import (
    CLOCK_KINDS,
    DEFAULT_WINDOW,
    OBSERVATION_KINDS,
    advances_clock,
    ensure_session,
    finalize_due,
    remaining_ticks,
)
from morphz.mind.memory import MindState
from morphz.mind.state import (
    GENESIS_HEAD,
    Changes,
    Edge,
    Frame,
    MindView,
    ObsState,
    OpEffect,
    Overlay,
    SessionState,
    Snapshot,
    chain_head,
)

__all__ = [
    "CLOCK_KINDS",
    "DEFAULT_WINDOW",
    "GENESIS_HEAD",
    "OBSERVATION_KINDS",
    "REPLAY_ENV",
    "Changes",
    "Edge",
    "Env",
    "Frame",
    "MindState",
    "MindView",
    "ObsState",
    "OpEffect",
    "Overlay",
    "SessionState",
    "Snapshot",
    "advances_clock",
    "apply_tx",
    "chain_head",
    "decide_rebase",
    "ensure_session",
    "finalize_due",
    "remaining_ticks",
    "tx_boundaries",
]
