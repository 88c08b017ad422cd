"""Maintenance batches (DESIGN §10): which optional observations a batch adds to its minimum,
how the compiled batch is cut until it fits the hard limit, and what a failure says when the
frames in view, or the profile, are what does not fit. The engine decides when a batch is
needed and what its minimum holds (the current request and its dependencies)."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence

from morphz.capacity import LIMIT_KEYS, Batch, Item, select_batch
from morphz.encoding.compile import Encoding
from morphz.runtime.costs import directory_allowance, observation_costs, with_refs

Encode = Callable[[frozenset[int]], Awaitable[Encoding]]  # a maintenance compile showing these


def choose(
    full: Encoding,
    must: frozenset[int],
    room: int,
    factor: float,
    *,
    first: Sequence[int] = (),
) -> list[Item]:
    """With ``room`` tokens left beside the minimum (the observations ``must``), the optional
    observations of ``full`` that fit, each allowing for its directory ref: those of ``first``
    in its order, then the oldest (a later, smaller one may still fit after a larger one did
    not); none when even that allowance does not fit. Deterministic."""
    rest = [o for o in full.state.observations if o.seq not in must]
    order = {seq: n for n, seq in enumerate(dict.fromkeys(first))}  # as select_batch takes them
    considered = sorted(rest, key=lambda o: (order.get(o.seq, len(order)), o.seq))
    costs = with_refs(observation_costs(full, factor), considered, factor)
    optional = [Item(o.seq, costs[o.seq]) for o in rest]
    batch = select_batch(optional, directory_allowance(rest, factor), room, set(), first)
    shown = set(batch.seqs) if batch.fits else set()
    ahead = {seq: n for n, seq in enumerate(dict.fromkeys(first))}  # offered first, in order
    late = len(ahead)
    return sorted(
        (i for i in optional if i.seq in shown), key=lambda i: (ahead.get(i.seq, late), i.seq)
    )


async def fit(
    encode: Encode,
    minimum: Encoding,
    must: frozenset[int],
    chosen: list[Item],
    *,
    room: int,
    fits: Callable[[Encoding], bool],
) -> Encoding:
    """Compile the minimum plus ``chosen`` (in the order they were offered). While the result
    does not fit (``fits``: the hard limit, a refusal's ceiling), scale the estimates by what
    they really cost in it and leave out the last offered until the rest fits the ``room``
    beside the minimum (at least one each time; the minimum was measured to fit)."""
    while chosen:
        encoding = await encode(must | {i.seq for i in chosen})
        if fits(encoding):
            return encoding
        total = sum(i.tokens for i in chosen)
        scale = (encoding.tokens - minimum.tokens) / max(1, total)
        total -= chosen.pop().tokens  # at least one, whatever the estimates say
        while chosen and total * scale > room:
            total -= chosen.pop().tokens
    return minimum


def floor_reason(
    floor: Batch,
    minimum: Encoding,
    keys: Mapping[str, int],
    refusal: str | None = None,
    root: int | None = None,
    *,
    context: str,
) -> str:
    """What to say when even the minimum maintenance request (``floor``, compiled as
    ``minimum``: the current request, ``root``, and the protected observations) does not fit
    on ``context`` (the context id its advice names):
    what takes the room, and only the remedies that can help (unprotecting only when some
    observation beside the root is protected).
    ``refusal``: what the provider said when it refused a request as too long. When its ceiling,
    not the budget, is the limit the minimum is over, the model's window is too small for it and
    no budget can help; otherwise the budget is raised where it is set: the configuration's
    [budget] table when it gives the limit (it applies over the context's own budget), else the
    context's budget."""
    inbox = next((r.tokens for r in minimum.regions if r.name == "inbox"), 0)
    fixed = floor.tokens - inbox  # counted as the limit is: the figure, or as sent
    said = f"even the minimum maintenance request needs {floor.tokens} tokens of {floor.limit}"
    refused = "" if refusal is None else f" (the provider refused larger: {refusal})"
    if refusal is not None and floor.limit < minimum.pressure.budget.hard:  # the window binds
        window = (
            f"the model's context window (its provider's refusals put it at about {floor.limit})"
        )
        over, room = f", more than {window} leaves", f" {window}"
        remedy = larger = LARGER_WINDOW
    else:  # the budget binds: raised where it is set
        where = (
            "in the [budget] table of morphz.toml, which applies over the context's own budget"
            if LIMIT_KEYS & set(keys)
            else f"`morphz context budget {shlex.quote(context)} --limit N` or `--window N`"
        )
        over, room, remedy, larger = "", "", f"raise the budget ({where})", "raise the budget"
    shares = f"{mind_share(minimum, larger)}{profile_share(minimum, larger)}"
    if fixed > floor.limit:
        profile = ", the profile" if minimum.options.profile else ""
        return (
            f"{said}: the protocol{profile}, the frames in view, the kernel and the tool schemas "
            f"alone take about {fixed}{over}, so not even the current request fits: "
            f"{remedy}{shares}{refused}"
        )
    protected = sum(1 for o in minimum.state.observations if o.protected and o.seq != root)
    what, other = "the current request does not fit", "send a shorter request"
    if protected:
        plural = "s" if protected > 1 else ""
        what = f"the current request and {protected} protected observation{plural} do not fit"
        other = "unprotect observations (`unprotect`) so a batch may leave them out"
    return f"{said}: {what}{room}: {remedy}, or {other}{shares}{refused}"


# what helps when the provider's window, not the budget, is what a request does not fit
LARGER_WINDOW = "use a model with a larger context window"


def mind_share(minimum: Encoding, larger: str = "raise the budget") -> str:
    """What to say when the frames in view take most of a minimum that does not fit: then only
    shorter frames (or ``larger`` room) can help."""
    mind = next((r.tokens for r in minimum.regions if r.name == "mind"), 0)
    if mind * 2 < minimum.tokens:
        return ""
    return (
        f". The frames in view (the mind) take about {mind} of those tokens: retire, supersede "
        f"or revise frames shorter (`morphz context tx`), or {larger}"
    )


def profile_share(minimum: Encoding, larger: str = "raise the budget") -> str:
    """What to say when the profile bound to the agent (the evaluation-profile region) takes
    most of a minimum that does not fit: then only a shorter profile (or ``larger`` room) can
    help."""
    profile = next((r.tokens for r in minimum.regions if r.name == "evaluation-profile"), 0)
    if minimum.options.profile is None or profile * 2 < minimum.tokens:
        return ""
    return (
        f". The profile bound to the agent (the evaluation-profile region) takes about "
        f"{profile} of those tokens: give a shorter harness definition (`--profile FILE`, or "
        f"the file that `profile =` names in morphz.toml), or {larger}"
    )
