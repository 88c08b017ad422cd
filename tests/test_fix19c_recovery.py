"""Fix 19c: what recovery tells the agent of a call the log says more about than "may have run"
(morphz.recovery), and the commit's and reply's new parts (the call a commit answers, a
delivered reply in the write that ends its activation). Review 19c's tests kill a real process;
these write the log an activation leaves directly, for the branches those do not reach."""

from __future__ import annotations

from pathlib import Path

import pytest

import morphz
from morphz import events as ev
from morphz.errors import InputError

TX = "(context-tx (base-version 0) (create task/answer (value 42)))"


def _reply(ctx: morphz.Context, activation: str, *calls: tuple[str, str]) -> ev.Event:
    payload = {
        "activation": activation,
        "tool_calls": [{"id": c, "name": n, "arguments": "{}"} for c, n in calls],
    }
    return ctx.record(ev.MODEL_REPLY, None, payload=payload, session="s")


def _answers(ctx: morphz.Context, after: ev.Event) -> dict[str, str]:
    found = [e for e in ctx.events() if e.kind == "tool_result" and e.seq > after.seq]
    return {str((e.meta or {})["call"]): e.text or "" for e in found}


def _asked(ctx: morphz.Context, act: str, call: str, approved: bool | None) -> None:
    payload = {"tool": "exec", "arguments": {}, "call": call, "activation": act}
    asked = ctx.record(ev.APPROVAL_REQUEST, None, payload=payload, session="s")
    if approved is not None:
        meta = {"request": asked.ref, "approved": approved, "tool": "exec"}
        answer = morphz.Observation("approval_result", "exec: decided", meta=meta)
        ctx.observe_batch([answer], session="s", activation=act)


def test_a_transaction_no_commit_names_did_not_commit(tmp_path: Path) -> None:
    """A context_tx the process died before committing: no commit names its call, and none of
    the session names no call, so the log shows it did not commit (a transaction commits whole
    or not at all)."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "note the answer")
        reply = _reply(ctx, act, ("c1", "context_tx"))
        assert ctx.interrupt_running() == [act]
        text = _answers(ctx, reply)["c1"]
        assert "did not commit" in text and "may have" not in text, text
        assert ctx.audit().differences == []


def test_a_commit_naming_no_call_leaves_it_open_whether_the_transaction_committed(
    tmp_path: Path,
) -> None:
    """A commit of the session that names no call (an earlier release's runtime, or a person's
    `context tx`) may be the call's: recovery then neither says it committed nor that it did
    not, and still says a transaction never commits in part."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "note the answer")
        reply = _reply(ctx, act, ("c1", "context_tx"))
        ctx.commit(TX, session="s")
        assert ctx.interrupt_running() == [act]
        text = _answers(ctx, reply)["c1"]
        assert "may have committed" in text and "did not commit" not in text


def test_a_commit_names_its_call_and_recovery_answers_with_it(tmp_path: Path) -> None:
    """The runtime's commit keeps its activation and call in its event's payload (an old
    store's commits have neither: optional), and recovery answers the call with it."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "note the answer")
        reply = _reply(ctx, act, ("c1", "context_tx"), ("c2", "context_tx"))
        receipt = ctx.commit(TX, session="s", activation=act, call="c1")
        commit = ctx.event(receipt.event)
        assert (commit.payload or {})["call"] == "c1"
        assert (commit.payload or {})["activation"] == act
        assert ctx.interrupt_running() == [act]
        answers = _answers(ctx, reply)
        assert receipt.event in answers["c1"] and "tx-1" in answers["c1"]
        assert "did not commit" in answers["c2"]  # the other call named no commit
        assert ctx.audit().differences == []


def test_a_commit_names_a_call_of_its_own_activation_only(tmp_path: Path) -> None:
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "note the answer")
        with pytest.raises(InputError, match="give its activation too"):
            ctx.commit(TX, session="s", call="c1")
        with pytest.raises(InputError, match="runs in session 's'"):
            ctx.commit(TX, session="other", activation=act, call="c1")
        assert ctx.version == 0


@pytest.mark.parametrize(
    ("approved", "said"),
    [(None, "did not run"), (False, "was not approved"), (True, "may have run")],
)
def test_what_recovery_says_of_an_ask_call_follows_its_approval(
    tmp_path: Path, approved: bool | None, said: str
) -> None:
    """Asked and never answered: it did not run. Denied: not approved, as its batch would say.
    Approved: the tool then ran, so it may have."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "deploy")
        reply = _reply(ctx, act, ("c1", "exec"))
        _asked(ctx, act, "c1", approved)
        assert ctx.interrupt_running() == [act]
        assert said in _answers(ctx, reply)["c1"]
        assert ctx.audit().differences == []


def test_another_activations_pending_approval_says_nothing_of_this_call(tmp_path: Path) -> None:
    """The approval request names its activation: another activation of the session asking
    about a call with the same id does not make this one's call "did not run"."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "deploy")
        _, other = ctx.begin_activation("s", "deploy again")
        reply = _reply(ctx, act, ("c1", "exec"))
        _asked(ctx, other, "c1", None)
        ctx.finish_activation(other, "interrupted", "test")
        assert ctx.interrupt_running() == [act]
        assert "may have run" in _answers(ctx, reply)["c1"]


def test_finishing_appends_the_observations_given_in_the_same_write(tmp_path: Path) -> None:
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "hello")
        reply = morphz.Observation("agent_reply", "hi", meta={"activation": act})
        (event,) = ctx.finish_activation(act, "delivered", observations=[reply])
        end = ctx.events()[-1]
        assert end.kind == "activation_finished" and end.seq == event.seq + 1
        assert event.kind == "agent_reply" and event.session_id == "s"
        with pytest.raises(InputError):  # not running: nothing appended
            ctx.finish_activation(act, "delivered", observations=[reply])
        assert ctx.events()[-1].seq == end.seq
        assert ctx.audit().differences == []
