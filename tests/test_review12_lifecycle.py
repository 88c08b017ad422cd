"""Review 12 (lifecycle): findings about the mind's lifecycle. Each test failed on the code it was
written against; its docstring states the behaviour expected once fixed.

The state machine that looked for them (random valid and invalid transactions, observation
batches with and without ticks, imports, activations, window changes, checkpoints, rollbacks and
reopenings, checking after every step that the audit passes, that the encoding compiled from a
replay of the log equals the live one, that a refused transaction changes nothing, that retiring
frames leave the view when their ticks say, that retired content stays recallable, that a
rollback restores its checkpoint and that receipts' immediate token figures match the store's
kept total) is tests/review12_lifecycle_machine.py; it is not collected by default (it runs for
minutes) and passes.
"""

from __future__ import annotations

import morphz


def test_start_activation_refuses_a_retired_root(ctx: morphz.Context) -> None:
    """An activation's root request is what the agent works on, and the store promises it is
    causally protected (kept in view) until the reply is delivered. ``start_activation`` with a
    root that is already retired must not start an activation on a request the model cannot
    see: it raises an InputError naming the root (restore it first), and records nothing.
    Today it starts the activation: the kernel lists ``(root @e1)`` under running-activations
    while the inbox is empty, and the "protected" root is nowhere in view."""
    ctx.observe("user_message", "deploy the service to hangzhou")
    ctx.commit('(context-tx (base-version 0) (reason "handled") (retire @e1))')
    events_before = len(ctx.events())
    try:
        ctx.start_activation("default", "@e1")
    except morphz.InputError as exc:
        assert "@e1" in str(exc)
    else:
        text = ctx.encode(local_time="unknown").text
        inbox = text[text.index("(inbox") : text.index("(observation-state")]
        raise AssertionError(
            "an activation started on a retired root: running activations "
            f"{ctx.activations(running_only=True)}, inbox {inbox!r}"
        )
    assert len(ctx.events()) == events_before
    assert ctx.activations(running_only=True) == []
