"""Both context-tx examples of the seed documents, verbatim."""

from __future__ import annotations

import morphz

SEED_TX_1 = """(context-tx
  (base-version 42)
  (reason "replace an outdated assumption with verified evidence")
  (derive deployment/current
    (from @e42)
    (fact (region cn-hangzhou)))
  (relate deployment/current supersedes deployment/old)
  (retire deployment/old))"""

SEED_TX_2 = """(context-tx
  (base-version 17)
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2
    (from @e42 deployment/target-v1)
    (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire @e42))"""


def _history(ctx: morphz.Context, old_frame: str, old_body: str, version: int, config: str) -> None:
    """@e1-@e40 build logs, @e41 the commit creating ``old_frame``, @e42 the configuration
    check, then commits of unrelated notes until the mind is at ``version``."""
    for i in range(40):
        ctx.observe("tool_result", f"build log {i}: ok")
    ctx.commit(f"(context-tx (base-version 0) (create {old_frame} {old_body}))")
    assert ctx.observe("tool_result", config).ref == "@e42"
    for i in range(version - 1):
        ctx.commit(f"(context-tx (base-version {ctx.version}) (create note/{i} (note {i})))")
    assert ctx.version == version


def test_seed_document_one_commits_verbatim(ctx: morphz.Context) -> None:
    _history(ctx, "deployment/old", "(fact (region cn-beijing))", 42, "region: cn-hangzhou")
    receipt = ctx.commit(SEED_TX_1)
    assert receipt.after_version == 43 and not receipt.rebased
    mind = ctx.mind()
    old, new = mind.frame("deployment/old"), mind.frame("deployment/current")
    assert old is not None and new is not None
    assert new.lifecycle == "active" and new.sources == ("@e42",)
    # deployment/current cites only @e42, not deployment/old: no fast path, the window applies.
    assert old.lifecycle == "retiring" and old.remaining_ticks == 8
    assert ("deployment/current", "supersedes", "deployment/old") in mind.relations
    assert ctx.audit().ok


def test_seed_document_two_before_after_table(ctx: morphz.Context) -> None:
    _history(
        ctx,
        "deployment/target-v1",
        "(fact (region cn-hangzhou))",
        17,
        "production.yaml: region: cn-shanghai",
    )
    before = ctx.mind()
    receipt = ctx.commit(SEED_TX_2)
    after = ctx.mind()
    assert receipt.rebased is False and receipt.before_version == 17 and receipt.after_version == 18

    old_before, old_after = (
        before.frame("deployment/target-v1"),
        after.frame("deployment/target-v1"),
    )
    assert old_before is not None and old_before.lifecycle == "active"
    assert old_after is not None and old_after.lifecycle == "retired"  # fast path: at once
    assert old_after.body == "(fact (region cn-hangzhou))"  # its history remains

    assert before.frame("deployment/target-v2") is None
    new = after.frame("deployment/target-v2")
    assert new is not None and new.lifecycle == "active"
    assert new.body == "(fact (region cn-shanghai))"
    assert new.sources == ("@e42", "deployment/target-v1")
    assert ("deployment/target-v2", "supersedes", "deployment/target-v1") in after.relations

    assert before.observation("@e42") is not None
    assert after.observation("@e42") is None  # out of the active state
    assert ctx.event("@e42").text == "production.yaml: region: cn-shanghai"  # still readable

    unchanged = [f for f in before.frames if f.id != "deployment/target-v1"]
    for frame in unchanged:
        assert after.frame(frame.id) == frame
    assert ctx.audit().ok
