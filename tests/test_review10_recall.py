"""Review 10, recall: traversal links, the end of a capped ranked walk, kinds that can never
match, non-text filter values and cursors, and previews that cut a character in two.

Each test fails on the code it was written against (d7b1c7b) and states the expected behaviour.
"""

from __future__ import annotations

from typing import Any

import pytest

import morphz
from morphz.errors import CursorError, InputError
from morphz.interfaces import render
from morphz.recall import search as search_module
from test_recall import commit, keys, say

# ------------------------------------------------------------------ traversal links


def _links(page: Any) -> set[tuple[str, str, str]]:
    return {(link.source, link.label, link.target) for link in page.links}


def test_a_traversal_lists_the_links_between_nodes_at_its_last_depth(ctx: morphz.Context) -> None:
    """docs/cli.md: a traversal's `links` are "every link among the page's nodes". With
    depth 1, a root derived from two frames that relate to each other shows three nodes, so the
    relation between the two sources belongs on the page. Expected: the links between nodes of
    the walk are listed whatever their depth (in the walk's direction). Today the nodes at the
    last depth are never expanded, so the link between them is missing at depth 1 and appears
    only at depth 2, with the very same nodes."""
    commit(ctx, "(create a/x (fact one))", "(create a/y (fact two))")
    commit(ctx, "(derive a/root (from a/x a/y) (fact root))", "(relate a/x depends-on a/y)")
    shallow = ctx.recall.frame("a/root", depth=1)
    deep = ctx.recall.frame("a/root", depth=2)
    assert [n.id for n in shallow.nodes] == [n.id for n in deep.nodes] == ["a/root", "a/x", "a/y"]
    assert ("a/x", "depends-on", "a/y") in _links(deep)
    assert ("a/x", "depends-on", "a/y") in _links(shallow), _links(shallow)


def test_descendants_list_the_citation_between_two_nodes_of_the_last_depth(
    ctx: morphz.Context,
) -> None:
    """The same for descendants: from a/y, depth 1 reaches a/root (which cites a/y) and a/x
    (which relates to a/y); a/root also cites a/x, a link between two nodes of the page.
    Expected: it is listed. Today it is not (it is found only by expanding a depth-1 node)."""
    commit(ctx, "(create a/x (fact one))", "(create a/y (fact two))")
    commit(ctx, "(derive a/root (from a/x a/y) (fact root))", "(relate a/x depends-on a/y)")
    page = ctx.recall.frame("a/y", depth=1, direction="descendants")
    assert {n.id for n in page.nodes} == {"a/y", "a/root", "a/x"}
    assert ("a/root", "source", "a/x") in _links(page), _links(page)


# ------------------------------------------------------------------ the capped ranked walk


def test_a_ranked_walk_stopped_by_its_cap_does_not_claim_there_are_no_more_results(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ranked cursor walks at most MAX_PAGED_RESULTS (2,000) documents (docs/decisions.md),
    but docs/cli.md promises that following the cursors "returns every matching document" and
    the text output of the last page says "no more results (no next cursor)". Expected: a walk
    that stops at the cap while matching documents remain says so (e.g. a field of the page and
    its rendering: search again with a narrower query or a time range), or it goes on. Today the
    page at the cap has next_cursor None, exactly like a real last page, and the text claims
    there are no more results. (The cap is scaled down to 4 here: 6 documents match.)"""
    monkeypatch.setattr(search_module, "MAX_PAGED_RESULTS", 4)
    every = {say(ctx, f"walrus sighting {i}") for i in range(6)}
    walked: list[str] = []
    cursor = None
    last = None
    for _ in range(10):
        last = ctx.recall.search("walrus", limit=2, cursor=cursor)
        walked.extend(keys(last))
        cursor = last.next_cursor
        if cursor is None:
            break
    assert last is not None
    assert set(walked) == every or "no more results" not in render.search_page(last), (
        f"walked {len(walked)} of {len(every)}; the last page says: "
        f"{render.search_page(last).splitlines()[-1]}"
    )


# ------------------------------------------------------------------ kinds that never match


def test_a_kind_that_is_never_indexed_is_refused_not_silently_empty(ctx: morphz.Context) -> None:
    """`recall_result` is offered as a search kind (docs/cli.md lists it for --kind, and the CLI
    accepts it), but recall results are never indexed (docs/decisions.md: they copy evidence
    that is), so the filter can only ever give "no hits": a user looking for what the agent
    recalled is told nothing matched. `tool_call`, also never indexed, is refused. Expected:
    the same InputError for recall_result, saying recall results are not searchable (search the
    evidence they copy). Today the search succeeds with no hits."""
    ctx.observe("recall_result", "the walrus evidence, recalled")
    say(ctx, "walrus evidence")
    with pytest.raises(InputError, match="recall_result"):
        ctx.recall.search("walrus", kinds=["recall_result"])


# ------------------------------------------------------------------ typed errors


@pytest.mark.parametrize(
    "params",
    [
        {"kinds": [["observations"]]},
        {"lifecycle": [["retired"]]},
        {"lifecycle": [1, "x"]},
    ],
    ids=["kinds-list-item", "lifecycle-list-item", "lifecycle-mixed-types"],
)
def test_non_text_kinds_or_lifecycles_are_an_input_error(
    ctx: morphz.Context, params: dict[str, Any]
) -> None:
    """A kind or lifecycle that is not text (a nested list from a caller's JSON, a number) is
    an InputError naming the accepted values, as an unknown word is (docs/decisions.md: every
    refusal is typed). Today a list item raises TypeError (unhashable type) and a number beside
    an unknown word raises TypeError while the error message is being sorted."""
    say(ctx, "walrus")
    with pytest.raises(InputError):
        ctx.recall.search("walrus", **params)


@pytest.mark.parametrize("op", ["search", "frame"])
def test_a_cursor_given_as_bytes_is_a_typed_error(ctx: morphz.Context, op: str) -> None:
    """A cursor read back from a file or socket as bytes is refused as a CursorError (as any
    other malformed cursor, e.g. the int 123, already is) or an InputError. Today
    `token.split(".")` on bytes raises TypeError out of the recall API."""
    say(ctx, "walrus")
    commit(ctx, "(create w/a (walrus))")
    page = ctx.recall.search("walrus", limit=1)
    assert page.next_cursor is not None
    token = page.next_cursor.encode()
    with pytest.raises((CursorError, InputError)):
        if op == "search":
            ctx.recall.search("walrus", limit=1, cursor=token)  # type: ignore[arg-type]
        else:
            ctx.recall.frame("w/a", cursor=token)  # type: ignore[arg-type]


# ------------------------------------------------------------------ previews


FLAG = "\U0001f1fa\U0001f1f8"  # the flag of the United States: two regional indicators


def test_a_hit_preview_does_not_cut_a_flag_in_two(ctx: morphz.Context) -> None:
    """A hit's preview is cut at 240 characters. The inbox previews keep what a reader sees as
    one character whole (review 10, encoding: marks, keycaps, emoji tags and flags); a recall
    preview, which the agent reads in its delivered results, must too. Expected: the preview
    holds the whole flag or none of it. Today the cut falls between the two regional indicators
    and the preview ends in a lone "U" indicator, which renders as a different glyph."""
    ref = say(ctx, "walrus " + "a" * 231 + FLAG + " more text after the cut")
    (hit,) = ctx.recall.search("walrus").hits
    assert hit.ref == ref and hit.preview.endswith("…")
    body = hit.preview[:-1]
    assert FLAG in body or "\U0001f1fa" not in body, ascii(body[-4:])


def test_a_hit_preview_does_not_split_a_letter_from_its_accent(ctx: morphz.Context) -> None:
    """The same for a combining mark (decomposed text, as macOS file names and some tools
    produce): the cut must not leave the accent to begin nowhere or drop it from its letter.
    Expected: the preview keeps "e" with its U+0301 or drops both. Today it ends with a bare
    "e" whose accent was cut off."""
    say(ctx, "walrus " + "a" * 231 + "e\u0301" + "tude and more")
    (hit,) = ctx.recall.search("walrus").hits
    body = hit.preview[:-1]
    assert not body.endswith("e"), ascii(body[-4:])
