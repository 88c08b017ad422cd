"""The fixes of review 16f beyond the reviewer's tests: tool results name the activation whose
work they record, and recovery matches a killed activation's calls with its own results only
(events written before that still match by session and call id); new work in a retired
session restores it, as a commit the audit replays; a stale retire-session's refusal in text
shows no empty list. Work recorded for an activation that has ended is kept (seventeenth
session)."""

from __future__ import annotations

import json

import pytest

import morphz
from morphz import activating
from morphz.errors import InputError, StaleVersionError
from morphz.interfaces import render
from stores import run_sql

CALL = {"id": "call_0_0", "name": "exec", "arguments": "{}"}  # the same id in every reply


def _asks(ctx: morphz.Context, activation: str) -> None:
    """The model reply of ``activation`` asking for CALL (ids are unique only per reply)."""
    payload = {"activation": activation, "tool_calls": [CALL]}
    ctx.record("model_reply", payload=payload, session="ops")


def _told(ctx: morphz.Context) -> list[morphz.Event]:
    return [e for e in ctx.events() if "has no result" in (e.text or "")]


def _two_asking(ctx: morphz.Context) -> tuple[str, str]:
    """Activations A and B of session ops, each asking for CALL."""
    root = ctx.observe("user_message", "deploy v2", session="ops")
    a = ctx.start_activation("ops", root.ref)
    b = ctx.start_activation("ops", root.ref)
    _asks(ctx, a)
    _asks(ctx, b)
    return a, b


def test_another_activations_result_of_the_same_call_id_answers_nothing(
    ctx: morphz.Context,
) -> None:
    a, b = _two_asking(ctx)
    result = morphz.Observation("tool_result", "ok", meta={"tool": "exec", "call": "call_0_0"})
    (landed,) = ctx.observe_batch([result], session="ops", activation=b)
    assert landed.payload == {"activation": b, "tick": True}  # the tick marker kept beside it
    assert activating.interrupt(ctx, a, "its process died")
    (told,) = _told(ctx)
    assert (told.meta or {})["call"] == "call_0_0" and told.payload == {"activation": a}
    assert activating.interrupt(ctx, b, "its process died")
    assert len(_told(ctx)) == 1  # B's call had its own result
    report = ctx.audit()
    assert report.ok, report.differences


def test_a_result_that_names_no_activation_still_answers_by_session_and_call_id(
    ctx: morphz.Context,
) -> None:
    """Results written before they named their activation (older stores, or a caller of
    observe_batch that names none) match as before."""
    a, _ = _two_asking(ctx)
    ctx.observe("tool_result", "ok", meta={"tool": "exec", "call": "call_0_0"}, session="ops")
    assert activating.interrupt(ctx, a, "its process died")
    assert _told(ctx) == []


def test_observe_batch_refuses_an_activation_that_is_not_of_its_session(
    ctx: morphz.Context,
) -> None:
    root = ctx.observe("user_message", "deploy", session="ops")
    mine = ctx.start_activation("ops", root.ref)
    item = morphz.Observation("tool_result", "ok")
    last = ctx.events()[-1].seq
    with pytest.raises(InputError, match="runs in session 'ops', not 'other'"):
        ctx.observe_batch([item], session="other", activation=mine)
    with pytest.raises(InputError, match="is not an activation of context"):
        ctx.observe_batch([item], session="ops", activation="act-000000000000")
    with pytest.raises(InputError, match="an activation id is text"):
        ctx.observe_batch([item], session="ops", activation=7)  # type: ignore[arg-type]
    assert ctx.events()[-1].seq == last  # nothing written


def test_the_audit_finds_a_result_naming_an_activation_that_never_started(
    db: morphz.Database, ctx: morphz.Context
) -> None:
    root = ctx.observe("user_message", "deploy", session="ops")
    mine = ctx.start_activation("ops", root.ref)
    (landed,) = ctx.observe_batch(
        [morphz.Observation("tool_result", "ok")], session="ops", activation=mine
    )
    payload = json.dumps({"activation": "act-000000000000", "tick": True})
    run_sql(db.store.path, f"UPDATE events SET payload = '{payload}' WHERE seq = {landed.seq}")
    report = ctx.audit()
    assert any(
        "names activation 'act-000000000000', which did not start" in d for d in report.differences
    ), report.differences


def _retired_ops(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "first task", session="ops")
    ctx.commit(
        f'(context-tx (base-version {ctx.version}) (reason "done") (retire-session ops))',
        session="main",
    )
    assert dict(ctx.mind().sessions)["ops"] == "retired"


def test_a_request_in_a_retired_session_restores_it_in_the_same_write(
    ctx: morphz.Context,
) -> None:
    _retired_ops(ctx)
    before = ctx.version
    message, _ = ctx.begin_activation("ops", "a new task")
    assert dict(ctx.mind().sessions)["ops"] == "active"
    restored = ctx.events()[message.seq - 2]  # the restore, the request, the start
    assert restored.kind == "context_tx_committed" and restored.session_id == "ops"
    assert "(restore-session ops)" in (restored.text or "")
    assert (restored.payload or {})["reason"] == activating.RESTORED_REASON
    assert ctx.version == before + 1
    report = ctx.audit()
    assert report.ok, report.differences
    ctx.begin_activation("ops", "and another")  # an active session: nothing more to commit
    assert ctx.version == before + 1


def test_an_activation_rooted_in_a_retired_session_restores_it(ctx: morphz.Context) -> None:
    root = ctx.observe("user_message", "first task", session="ops")
    ctx.commit(
        f'(context-tx (base-version {ctx.version}) (reason "done") (retire-session ops))',
        session="main",
    )
    ctx.start_activation("ops", root.ref)
    assert dict(ctx.mind().sessions)["ops"] == "active"
    assert ctx.audit().ok


def test_a_stale_retire_session_in_text_shows_no_empty_list(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "task", session="ops")
    stale = ctx.version
    ctx.commit(f'(context-tx (base-version {stale}) (create plan/a (fact "a")))')
    with pytest.raises(StaleVersionError) as refused:
        ctx.commit(
            f'(context-tx (base-version {stale}) (reason "r") (retire-session ops))', session="main"
        )
    assert refused.value.details["changed_boundaries"] == []  # JSON keeps the key
    shown = render.error(refused.value)
    assert "changed_boundaries" not in shown and "current_version: " in shown


def test_work_recorded_for_an_activation_that_has_ended_is_kept_and_audits_clean(
    ctx: morphz.Context,
) -> None:
    """An activation another process marked interrupted (``context recover --activation`` for
    a process on another host) while its engine still runs: the engine goes on recording what
    its calls did, naming the activation, and history keeps it (review 17l: refusing it, as a
    first version of the seventeenth session did, lost what the calls did, and its audit check
    failed stores of the previous release)."""
    root = ctx.observe("user_message", "deploy", session="ops")
    mine = ctx.start_activation("ops", root.ref)
    ctx.finish_activation(mine, "interrupted", "marked by another process")
    result = morphz.Observation("tool_result", "ok")
    (landed,) = ctx.observe_batch([result], session="ops", activation=mine)
    assert landed.payload is not None and landed.payload["activation"] == mine
    assert ctx.audit().ok
