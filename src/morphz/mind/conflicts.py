"""Conflict boundaries and the rebase decision (DESIGN §6).

Boundaries are strings: ``content:F``, ``life:F`` / ``life:@e42``, ``edge:S R O``, ``order``,
``checkpoint:C`` and ``session:S``. The set a transaction reads or writes follows from its text
alone, so the store can look up the last version that changed each one before applying anything.
A rollback raises a barrier: no transaction based before it can be rebased across it.
"""

from __future__ import annotations

from collections.abc import Mapping

from morphz.errors import ConflictError, StaleVersionError, ValidationError
from morphz.txlang import ops as o
from morphz.txlang.sexpr import line_col


def edge_key(subject: str, relation: str, obj: str) -> str:
    return f"edge:{subject} {relation} {obj}"


def op_boundaries(op: o.Op) -> list[str]:
    """Every boundary ``op`` reads or writes."""
    if isinstance(op, o.Create):
        return [f"content:{op.id}", f"life:{op.id}"]
    if isinstance(op, o.Derive | o.Revise):
        out = [f"content:{op.id}", f"life:{op.id}"]
        out.extend(f"content:{s}" for s in op.sources or () if not s.startswith("@"))
        return out
    if isinstance(op, o.Retire | o.Restore | o.Protect | o.Unprotect):
        return [f"life:{t}" for t in op.targets]
    if isinstance(op, o.Relate | o.Unrelate):
        edge = [edge_key(op.subject, op.relation, op.object)]
        # a supersedes edge may retire its object at once if the subject cites it: it reads that
        # (an unrelate adds no edge, so it never fires the fast path and reads no content)
        reads = isinstance(op, o.Relate) and op.relation == "supersedes"
        return [*edge, f"content:{op.subject}"] if reads else edge
    if isinstance(op, o.Place):
        return ["order"]
    if isinstance(op, o.Checkpoint | o.Rollback):
        return [f"checkpoint:{op.checkpoint}"]
    if isinstance(op, o.DropCheckpoint):
        return [f"checkpoint:{c}" for c in op.checkpoints]
    return [f"session:{s}" for s in op.sessions]


def tx_boundaries(tx: o.Tx) -> list[str]:
    """The boundaries of the whole transaction, deduplicated, in first-use order."""
    seen: dict[str, None] = {}
    for op in tx.ops:
        for boundary in op_boundaries(op):
            seen.setdefault(boundary, None)
    return list(seen)


def decide_rebase(
    tx: o.Tx,
    current_version: int,
    barrier_version: int,
    changed: Mapping[str, int],
) -> bool:
    """Decide whether ``tx`` may commit on ``current_version``; True when it is rebased.

    ``changed`` maps each boundary of the tx that changed after ``tx.base_version`` to the
    version that last changed it. Raises the typed refusal otherwise.
    """
    base = tx.base_version
    if base == current_version:
        return False
    if base > current_version:
        line, column = line_col(tx.source, tx.base_pos)
        raise ValidationError(
            f"base-version {base} is ahead of the current mind version {current_version}: "
            "read the mind again and use its version",
            line=line,
            column=column,
            details={"current_version": current_version},
        )
    if tx.needs_exact_version:
        exact = next(op for op in tx.ops if op.name in o.EXACT_VERSION)
        line, column = line_col(tx.source, exact.pos)
        raise StaleVersionError(
            f"{exact.name} needs the exact current version: base-version is {base} but the mind "
            f"is at {current_version}; read the mind again and resubmit with "
            f"(base-version {current_version})",
            op=exact.name,
            op_index=tx.ops.index(exact),
            line=line,
            column=column,
            details={
                "current_version": current_version,
                "changed_boundaries": sorted(changed),
            },
        )
    names = sorted(changed)
    if barrier_version > base:
        names = ["mind (rolled back)", *names]
    if names:
        shown = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")
        # the first operation that reads or writes what changed (after a rollback: the first)
        index = next(
            (i for i, op in enumerate(tx.ops) if set(op_boundaries(op)) & changed.keys()), 0
        )
        first = tx.ops[index] if tx.ops else None
        where: tuple[int | None, int | None] = (None, None)
        if first is not None:
            where = line_col(tx.source, first.pos)
        raise ConflictError(
            f"changed since base-version {base} (now {current_version}): {shown}; re-read "
            "these, merge your change with theirs and resubmit",
            op=None if first is None else first.name,
            op_index=None if first is None else index,
            line=where[0],
            column=where[1],
            details={"current_version": current_version, "changed_boundaries": names},
        )
    return True
