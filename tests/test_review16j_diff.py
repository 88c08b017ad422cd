"""Review 16j: the sixteenth session's later changes, read with fresh eyes (activations named
in results' payload, retired sessions restored by new work, the guessed ceiling, busy open,
damaged stores, recall's sources, folding and quoted passages, the adapters' key and URL
checks). Each test failed against the code as it was reviewed, and states what a user expects
once fixed."""

from __future__ import annotations

from pathlib import Path

import morphz


def test_a_quoted_passage_ranks_the_text_holding_it_above_the_next_turn(tmp_path: Path) -> None:
    """docs/cli.md ("Quoted passages"): a passage between double quotes "ranks the texts
    holding it as written first". The phrase is OR-ed into the match without a column filter
    (recall/search.py _match, the ``rare + phrases`` branch), so it also matches the ``near``
    column, which holds the *previous* observation's text. The observation right after the one
    that holds the passage therefore matches the phrase too, and when it is short it outranks
    the holder: here "Plan: rollback." comes first for the query '"rollback plan"', although
    only @e2 holds "rollback plan". Expected: the observation holding the passage ranks first
    (match the phrases in the body column only: ``{body} : "rollback plan"``)."""
    with morphz.open(tmp_path / "store.db") as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "Filler about lunch menus and weather.")
        holder = ctx.observe(
            "user_message",
            "Release notes: we wrote a rollback plan for the canary fleet and the database "
            "migration, reviewed by ops.",
        )
        ctx.observe("user_message", "Plan: rollback.")
        ctx.observe("user_message", "Another note about lunch.")
        page = ctx.recall.search(query='"rollback plan"')
        assert page.hits[0].ref == holder.ref, [(h.ref, h.preview) for h in page.hits]


def test_recall_frame_from_an_event_with_the_default_direction_walks_what_cites_it(
    tmp_path: Path,
) -> None:
    """Frames can now be walked from an event (review 16e: "recall frame can start from an
    event"), but the default direction stays ``ancestors`` (recall/api.py Recall.frame,
    traverse.py traverse), which _check_root refuses for an event: ``morphz context recall
    frame @e1`` and the agent's recall(op=frame, frame_id="@e1") -- the tool description does
    not say an event needs a direction -- always fail on the first try with "an event cites
    nothing". A default that can never succeed for one of the two kinds of root costs the
    agent a step each time. Expected: with no direction given, an event root is walked
    towards the frames citing it (descendants), a frame root towards its ancestors as today."""
    with morphz.open(tmp_path / "store.db") as db:
        ctx = db.context("c", create=True)
        seen = ctx.observe("user_message", "The staging deploy failed twice.")
        ctx.commit(
            f'(context-tx (base-version {ctx.version}) (reason "note") '
            f'(derive failure (from {seen.ref}) (body "staging deploy is flaky")))'
        )
        page = ctx.recall.frame(seen.ref)
        assert "failure" in [n.id for n in page.nodes], page
