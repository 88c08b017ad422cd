"""Frame traversal: follow a frame's reasoning back to its evidence, or forward to what cites it.

Links are of two sorts: a *source* link (frame F cites S: F -> S) and a *relation* edge
(S R O: S -> O). ``ancestors`` follows links forwards (what F was derived from, what it relates
to: F supersedes old -> old); ``descendants`` follows them backwards (frames citing F, frames
relating to F); ``both`` does both. Breadth-first, neighbours in a fixed order, so the same mind
always gives the same node order; pages of at most ``budget`` nodes. A cursor is pinned to the
mind version the traversal started at: if the mind changes in between, it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from morphz.checks import check_whole
from morphz.errors import CursorError, InputError, RecordNotFoundError
from morphz.ids import is_id, ref_seq
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


def _neighbours(r: ReadTxn, node: str, direction: Direction) -> list[tuple[str, Link]]:
    out: list[tuple[str, Link]] = []
    frame = None if node.startswith("@") else r.frame(node)
    if direction in ("ancestors", "both") and frame is not None:
        out.extend((src, Link(node, src, "source")) for src in frame.sources)
        out.extend((o, Link(s, o, rel)) for s, rel, o in r.edges_of(node) if s == node)
    if direction in ("descendants", "both"):
        out.extend((f, Link(f, node, "source")) for f in r.citing(node))
        if frame is not None:
            out.extend((s, Link(s, o, rel)) for s, rel, o in r.edges_of(node) if o == node)
    return out


def _walk(
    r: ReadTxn, root: str, direction: Direction, depth: int, events: bool
) -> tuple[list[tuple[str, int, Link | None]], list[Link]]:
    order: list[tuple[str, int, Link | None]] = [(root, 0, None)]
    seen = {root}
    links: list[Link] = []
    frontier = [root]
    for level in range(1, depth + 1):
        nxt: list[str] = []
        for node in frontier:
            for other, link in _neighbours(r, node, direction):
                if other.startswith("@") and not events:
                    continue
                links.append(link)
                if other not in seen:
                    seen.add(other)
                    order.append((other, level, link))
                    nxt.append(other)
        frontier = nxt
    for node in frontier:  # the last depth: its links among the nodes found, no new nodes
        for other, link in _neighbours(r, node, direction):
            if other in seen and not node.startswith("@"):
                links.append(link)
    return order, list(dict.fromkeys(links))


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


def traverse(
    r: ReadTxn,
    key: bytes,
    frame_id: str,
    *,
    depth: int = 2,
    direction: Direction = "ancestors",
    include_events: bool = False,
    include_bodies: bool = False,
    budget: int = 50,
    cursor: str | None = None,
) -> TraversalPage:
    if direction not in ("ancestors", "descendants", "both"):
        raise InputError("direction must be ancestors, descendants or both")
    check_whole(depth, "depth", 1, MAX_DEPTH)
    check_whole(budget, "the node budget", 1, MAX_BUDGET, unit="nodes")
    if not isinstance(frame_id, str):
        raise InputError(f"a frame id is text, not {frame_id!r}")
    if not is_id(frame_id) or r.frame(frame_id) is None:
        raise RecordNotFoundError(f"no frame '{frame_id}' in context '{r.row.context_id}'")
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
    order, links = _walk(r, frame_id, direction, depth, include_events)
    page = order[offset : offset + budget]
    nodes = []
    for node, level, via in page:
        kind, info = _details(r, node, include_bodies, include_events)
        nodes.append(Node(node, kind, level, via, info))
    end = offset + len(page)
    # each link once, on the page that shows the later of its two ends: a page's links shrink
    # with its nodes (a much-cited frame does not carry every link of the walk on its page)
    before = {node for node, _, _ in order[:offset]}
    upto = before | {n.id for n in nodes}
    page_links = tuple(
        link
        for link in links
        if link.source in upto
        and link.target in upto
        and not (link.source in before and link.target in before)
    )
    next_cursor = None
    if end < len(order):
        next_cursor = cursors.encode(key, {"q": digest, "v": version, "o": end})
    return TraversalPage(frame_id, direction, depth, version, tuple(nodes), page_links, next_cursor)


__all__ = ["Direction", "Link", "Node", "TraversalPage", "traverse"]
