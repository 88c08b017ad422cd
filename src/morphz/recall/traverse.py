"""Frame traversal: follow a frame's reasoning back to its evidence, or forward to what cites it.

Links are of two sorts: a *source* link (frame F cites S: F -> S) and a *relation* edge
(S R O: S -> O). ``ancestors`` follows links forwards (what F was derived from, what it relates
to: F supersedes old -> old); ``descendants`` follows them backwards (frames citing F, frames
relating to F); ``both`` does both. Breadth-first, neighbours in a fixed order, so the same mind
always gives the same node order; pages of at most ``budget`` nodes. A cursor is pinned to the
mind version the traversal started at: if the mind changes in between, it is refused.

The root may also be an event (``@e12``) walked ``descendants`` or ``both``: the frames citing it
and what builds on them (an event cites nothing, so it has no ancestors).
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from morphz.checks import check_whole
from morphz.errors import CursorError, InputError, RecordNotFoundError
from morphz.ids import is_ref, is_stored_id, ref_seq
from morphz.mind.state import Frame
from morphz.recall import cursors
from morphz.recall.read import event_content
from morphz.recall.search import preview
from morphz.store.base import ReadTxn

Direction = Literal["ancestors", "descendants", "both"]
MAX_DEPTH = 4
MAX_BUDGET = 500


@dataclass(frozen=True, slots=True)
class Link:
    source: str  # from (the citing frame, or the relation's subject)
    target: str
    label: str  # "source" or the relation name

    def to_dict(self) -> dict[str, str]:
        return {"from": self.source, "to": self.target, "label": self.label}


@dataclass(frozen=True, slots=True)
class Node:
    id: str  # frame id or @e ref
    type: str  # "frame" or "event"
    depth: int
    via: Link | None
    details: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "depth": self.depth,
            "via": self.via.to_dict() if self.via else None,
            **self.details,
        }


@dataclass(frozen=True, slots=True)
class TraversalPage:
    root: str
    direction: str
    depth: int
    version: int
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "direction": self.direction,
            "depth": self.depth,
            "version": self.version,
            "nodes": [n.to_dict() for n in self.nodes],
            "links": [link.to_dict() for link in self.links],
            "next_cursor": self.next_cursor,
        }


class _Graph:
    """The reads a traversal makes, each at most once per node."""

    def __init__(self, r: ReadTxn) -> None:
        self.r = r
        self._citing: dict[str, list[str]] = {}
        self._edges: dict[str, list[tuple[str, str, str]]] = {}

    def frame(self, node: str) -> Frame | None:
        return None if node.startswith("@") else self.r.frame(node)

    def citing(self, node: str) -> list[str]:
        if node not in self._citing:
            self._citing[node] = self.r.citing(node)
        return self._citing[node]

    def edges(self, node: str) -> list[tuple[str, str, str]]:
        """The relations of ``node`` either way (none for an event or a missing frame)."""
        if node not in self._edges:
            self._edges[node] = self.r.edges_of(node) if self.frame(node) is not None else []
        return self._edges[node]


def _neighbours(g: _Graph, node: str, direction: Direction) -> list[tuple[str, Link]]:
    out: list[tuple[str, Link]] = []
    frame = g.frame(node)
    if direction in ("ancestors", "both") and frame is not None:
        out.extend((src, Link(node, src, "source")) for src in frame.sources)
        out.extend((o, Link(s, o, rel)) for s, rel, o in g.edges(node) if s == node)
    if direction in ("descendants", "both"):
        out.extend((f, Link(f, node, "source")) for f in g.citing(node))
        if frame is not None:
            out.extend((s, Link(s, o, rel)) for s, rel, o in g.edges(node) if o == node)
    return out


def _walk(
    g: _Graph, root: str, direction: Direction, depth: int, events: bool, *, want: int
) -> list[tuple[str, int, Link | None]]:
    """Breadth-first from ``root``: (node, depth, link it was reached by), stopping once at
    least ``want`` nodes are known (the order's first ones are the same either way)."""
    order: list[tuple[str, int, Link | None]] = [(root, 0, None)]
    seen = {root}
    frontier = [root]
    for level in range(1, depth + 1):
        nxt: list[str] = []
        for node in frontier:
            if len(order) >= want:
                return order
            for other, link in _neighbours(g, node, direction):
                if other.startswith("@") and not events:
                    continue
                if other not in seen:
                    seen.add(other)
                    order.append((other, level, link))
                    nxt.append(other)
        frontier = nxt
    return order


# Where a walk of every node lists a link first: by the position of the node that lists it,
# then the section of that node's links (ancestors first: 0 the sources it cites, 1 the
# relations it is the subject of; then descendants: 2 the frames citing it, 3 the relations it
# is the object of), then its place in that section.
_Key = tuple[int, int, Any]
_Listing = tuple[Link, str, int, Any]  # a link, a node that lists it, the section, the place


def _listings(
    g: _Graph, node: str, direction: Direction, known: Container[str]
) -> Iterator[_Listing]:
    """The links between ``node`` and the ``known`` nodes (either way), with each end that
    lists them walking ``direction``."""
    up, down = direction in ("ancestors", "both"), direction in ("descendants", "both")
    frame = g.frame(node)
    for i, src in enumerate(frame.sources if frame is not None else ()):
        if src in known:
            yield from _sourced(Link(node, src, "source"), i, up, down)
    for f in g.citing(node):
        if f in known:
            citing = g.frame(f)
            place = citing.sources.index(node) if citing is not None else None
            yield from _sourced(Link(f, node, "source"), place, up, down)
    for s, rel, o in g.edges(node):
        if (o if s == node else s) in known:
            link = Link(s, o, rel)
            if up and g.frame(s) is not None:
                yield link, s, 1, (rel, o)
            if down and g.frame(o) is not None:
                yield link, o, 3, (s, rel)


def _sourced(link: Link, place: int | None, up: bool, down: bool) -> Iterator[_Listing]:
    """A source link (``link.source`` cites ``link.target`` as its ``place``-th source)."""
    if up and place is not None:
        yield link, link.source, 0, place
    if down:
        yield link, link.target, 2, link.source


def _page_links(
    g: _Graph, order: list[tuple[str, int, Link | None]], page: range, walk: tuple[Direction, int]
) -> tuple[Link, ...]:
    """Each link between two nodes up to the page's end, on the page that shows the later of
    its two ends (a page's links shrink with its nodes), in the order a walk of every node lists
    them first, as :func:`_neighbours` lists them: found from the links of the page's nodes.
    An event at the walk's last depth lists none (its links lead out of the walk)."""
    direction, depth = walk
    upto = order[: page.stop]
    position = {node: i for i, (node, _, _) in enumerate(upto)}
    mute = {node for node, level, _ in upto if level == depth and node.startswith("@")}
    keys: dict[Link, _Key] = {}
    for node, _, _ in order[page.start : page.stop]:
        for link, lister, section, place in _listings(g, node, direction, position):
            if lister in mute:
                continue
            key = (position[lister], section, place)
            if link not in keys or key < keys[link]:
                keys[link] = key
    return tuple(sorted(keys, key=keys.__getitem__))


def _details(r: ReadTxn, node: str, bodies: bool, events: bool) -> tuple[str, dict[str, Any]]:
    if node.startswith("@"):
        event = r.event(ref_seq(node))
        if event is None:  # pragma: no cover - sources are validated at commit
            return "event", {"missing": True}
        obs = r.observation(event.seq)
        info: dict[str, Any] = {
            "kind": event.kind,
            "time": event.time,
            "lifecycle": obs.lifecycle if obs is not None else None,
        }
        if events:
            info["preview"] = preview(event_content(event), 500)
        return "event", info
    frame = r.frame(node)
    assert frame is not None
    info = {
        "lifecycle": frame.lifecycle,
        "revision": frame.revision,
        "protected": frame.protected,
        "sources": list(frame.sources),
    }
    if bodies:
        info["body"] = frame.body
    return "frame", info


def _check_root(r: ReadTxn, root: object, direction: Direction) -> None:
    """``root`` is a frame of the mind, or an event walked towards what cites it."""
    if not isinstance(root, str):
        raise InputError(f"a frame id or event ref is text, not {root!r}")
    if is_ref(root):
        if r.event(ref_seq(root)) is None:
            raise RecordNotFoundError(f"no event {root} in context '{r.row.context_id}'")
        if direction == "ancestors":
            raise InputError(
                f"an event cites nothing, so {root} has no ancestors: walk direction "
                "descendants (the frames citing it) or both"
            )
    elif not is_stored_id(root) or r.frame(root) is None:
        raise RecordNotFoundError(f"no frame '{root}' in context '{r.row.context_id}'")


def traverse(
    r: ReadTxn,
    key: bytes,
    frame_id: str,
    *,
    depth: int = 2,
    direction: Direction | None = None,
    include_events: bool = False,
    include_bodies: bool = False,
    budget: int = 50,
    cursor: str | None = None,
) -> TraversalPage:
    if direction is None:  # the way that can walk from the root: what an event's citers are
        direction = "descendants" if isinstance(frame_id, str) and is_ref(frame_id) else "ancestors"
    if direction not in ("ancestors", "descendants", "both"):
        raise InputError("direction must be ancestors, descendants or both")
    for name, flag in (("include_events", include_events), ("include_bodies", include_bodies)):
        if not isinstance(flag, bool):
            raise InputError(f"{name} is True or False, not {flag!r:.80}")
    check_whole(depth, "depth", 1, MAX_DEPTH)
    check_whole(budget, "the node budget", 1, MAX_BUDGET, unit="nodes")
    _check_root(r, frame_id, direction)
    version = r.row.version
    params = {
        "root": frame_id,
        "direction": direction,
        "depth": depth,
        "events": include_events,
        "bodies": include_bodies,
        "context": r.row.context_id,
    }
    digest = cursors.fingerprint(params)
    offset = 0
    if cursor is not None:
        state = cursors.decode(key, cursor, digest)
        if state["v"] != version:
            raise CursorError(
                f"the mind changed since this traversal started (version {state['v']} -> "
                f"{version}): start the traversal again without the cursor"
            )
        offset = int(state["o"])
    g = _Graph(r)
    order = _walk(g, frame_id, direction, depth, include_events, want=offset + budget + 1)
    page = order[offset : offset + budget]
    nodes = []
    for node, level, via in page:
        kind, info = _details(r, node, include_bodies, include_events)
        nodes.append(Node(node, kind, level, via, info))
    end = offset + len(page)
    page_links = _page_links(g, order, range(offset, end), (direction, depth))
    next_cursor = None
    if end < len(order):
        next_cursor = cursors.encode(key, {"q": digest, "v": version, "o": end})
    return TraversalPage(frame_id, direction, depth, version, tuple(nodes), page_links, next_cursor)


__all__ = ["Direction", "Link", "Node", "TraversalPage", "traverse"]
