"""The runtime's rows of one context in SQLite: the sessions as the directory lists them, the
activations (the running ones, the latest started, one by id) and the tool calls' staged
outcomes (migration 0028), read inside a read or write unit of work (:class:`RuntimeRows`) and
written inside a write one (:class:`RuntimeWrites`).
Running activations are read through their partial index ``activations_running``: without it
SQLite reads every activation the context ever had (once per session when listing sessions)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from morphz.store.active_base import damaged_event, json_object
from morphz.store.base import ActivationRow, SessionRow, StagedResult
from morphz.store.sqlite_rows import ACTIVATION_COLS, activation_from_row, activation_params


class RuntimeRows:
    """Reads of the sessions and activations (part of :class:`~morphz.store.base.ReadTxn`)."""

    conn: sqlite3.Connection
    cid: str

    def session_rows(self) -> list[SessionRow]:
        rows = self.conn.execute(
            "SELECT s.session_id, s.attention, s.created_seq, s.last_seq, s.last_time, "
            "(SELECT count(*) FROM activations a INDEXED BY activations_running "
            " WHERE a.context_id = s.context_id AND a.session_id = s.session_id "
            " AND a.state = 'running') "
            "FROM sessions s WHERE s.context_id = ? ORDER BY s.last_seq DESC, s.session_id",
            (self.cid,),
        )
        return [SessionRow(*r) for r in rows]

    def activations(self, running_only: bool = False) -> list[ActivationRow]:
        source = "activations INDEXED BY activations_running" if running_only else "activations"
        where = " AND state = 'running'" if running_only else ""
        rows = self.conn.execute(
            f"SELECT {ACTIVATION_COLS} FROM {source} WHERE context_id = ?{where} "
            "ORDER BY started_seq",
            (self.cid,),
        )
        return [activation_from_row(r) for r in rows]

    def latest_activations(self, last: int) -> list[ActivationRow]:
        """The ``last`` most recently started activations, oldest first (a range of
        ``activations_started``, migration 0014)."""
        rows = self.conn.execute(
            f"SELECT {ACTIVATION_COLS} FROM activations INDEXED BY activations_started "
            "WHERE context_id = ? ORDER BY started_seq DESC LIMIT ?",
            (self.cid, min(last, 2**63 - 1)),
        )
        return [activation_from_row(r) for r in reversed(rows.fetchall())]

    def activation(self, activation_id: str) -> ActivationRow | None:
        row = self.conn.execute(
            f"SELECT {ACTIVATION_COLS} FROM activations WHERE context_id = ? AND activation_id = ?",
            (self.cid, activation_id),
        ).fetchone()
        return None if row is None else activation_from_row(row)

    def staged_results(self, activation_id: str | None = None) -> list[StagedResult]:
        where, params = "context_id = ?", [self.cid]
        if activation_id is not None:
            where, params = where + " AND activation_id = ?", [*params, activation_id]
        rows = self.conn.execute(
            f"SELECT {_STAGED_COLS} FROM staged_results WHERE {where} "
            "ORDER BY activation_id, reply_seq, position",
            params,
        )
        return [self._staged(row) for row in rows]

    def _staged(self, row: tuple[Any, ...]) -> StagedResult:
        activation, reply_seq, position, kind, text, meta, ticks = row
        value, why = json_object(meta)
        if value is None:
            where = f"the staged result of call {position} of @e{reply_seq} ({activation})"
            raise damaged_event(where, self.cid, f"its meta is {why}")
        return StagedResult(activation, reply_seq, position, kind, text, value, bool(ticks))


class RuntimeWrites(RuntimeRows):
    """What a write unit of work checks and writes of them (part of
    :class:`~morphz.store.base.WriteTxn`): a retire asks whether a session has running work or
    an observation is a running activation's root, at the cost of the running ones only."""

    def session_busy(self, session_id: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM activations INDEXED BY activations_running WHERE context_id = ? "
            "AND session_id = ? AND state = 'running' LIMIT 1",
            (self.cid, session_id),
        ).fetchone()
        return row is not None

    def causally_protected(self, seq: int) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM activations INDEXED BY activations_running WHERE context_id = ? "
            "AND root_seq = ? AND state = 'running' LIMIT 1",
            (self.cid, seq),
        ).fetchone()
        return row is not None

    def touch_session(self, session_id: str, seq: int, time: str) -> None:
        self.conn.execute(
            "UPDATE sessions SET last_seq = ?, last_time = ? WHERE context_id = ? "
            "AND session_id = ?",
            (seq, time, self.cid, session_id),
        )

    def put_activation(self, activation: ActivationRow) -> None:
        self.conn.execute(
            f"INSERT OR REPLACE INTO activations (context_id, {ACTIVATION_COLS}) "
            f"VALUES (?, {', '.join('?' * ACTIVATION_COLS.count(','))}, ?)",
            (self.cid, *activation_params(activation)),
        )

    def stage_result(self, staged: StagedResult) -> None:
        meta = json.dumps(staged.meta, ensure_ascii=False, sort_keys=True, allow_nan=False)
        self.conn.execute(
            f"INSERT OR REPLACE INTO staged_results (context_id, {_STAGED_COLS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.cid,
                staged.activation_id,
                staged.reply_seq,
                staged.position,
                staged.kind,
                staged.text,
                meta,
                int(staged.ticks),
            ),
        )

    def unstage_results(self, activation_id: str, reply_seq: int, positions: list[int]) -> set[int]:
        if not positions:
            return set()
        marks = ",".join("?" * len(positions))
        where = (
            "WHERE context_id = ? AND activation_id = ? AND reply_seq = ? "
            f"AND position IN ({marks})"
        )
        params = (self.cid, activation_id, reply_seq, *positions)
        found = {
            row[0]
            for row in self.conn.execute(f"SELECT position FROM staged_results {where}", params)
        }
        if found:  # inside the write's transaction: what was read is what is deleted
            self.conn.execute(f"DELETE FROM staged_results {where}", params)
        return found

    def unstage_activation(self, activation_id: str) -> None:
        self.conn.execute(
            "DELETE FROM staged_results WHERE context_id = ? AND activation_id = ?",
            (self.cid, activation_id),
        )


_STAGED_COLS = "activation_id, reply_seq, position, kind, text, meta, ticks"
