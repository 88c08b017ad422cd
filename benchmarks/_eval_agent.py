"""The builtin agent of the evaluations: a deterministic function model with a simple but real
maintenance policy, so both evaluations run offline and are tested. It reads only the encoding it
is sent (it keeps no state of its own between requests):

1. every planted fact in view that its mind does not yet hold becomes a frame
   ``fact/<key>/<n>`` derived from the observation that carries it; a newer value of a known key
   becomes ``fact/<key>/<n+1>``, derived from the observation and the old frame, related to it by
   ``supersedes`` (the old frame retires at once), its body keeping the earlier values;
2. while the runtime holds it in maintenance (critical pressure, or only ``context_tx`` and
   ``recall`` offered), it retires every observation in view except its root request, with a
   reason, in the same transaction (everything in view has been read at that point);
3. otherwise it replies: to a question, from its mind; to anything else, with a short note.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from _eval_world import CURRENT_Q, FACT, HISTORY_Q, slug
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.txlang.sexpr import Atom, SExpr, SList, Str, quote, read, to_text

AGENT_TOOLS = frozenset({"context_tx", "recall"})

# --------------------------------------------------------------------------- reading encodings


@dataclass(frozen=True, slots=True)
class Seen:
    """An inbox entry: its ref and seq, kind, session, and text (head + tail of a preview)."""

    ref: str
    seq: int
    kind: str
    session: str
    text: str
    protected: bool = False


@dataclass(frozen=True, slots=True)
class FrameSeen:
    id: str
    revision: int
    lifecycle: str
    sources: tuple[str, ...]
    body: tuple[SExpr, ...]


@dataclass(frozen=True, slots=True)
class View:
    """An encoding as the builtin agent reads it."""

    session: str
    version: int
    level: str
    tokens: int
    mode: str
    inbox: tuple[Seen, ...]
    frames: tuple[FrameSeen, ...]

    @classmethod
    def parse(cls, encoding: str) -> View:
        """The encoding, or with ContextDelta the seed with every increment applied in order
        (the protocol's ``increments`` rules)."""
        forms = read(encoding)
        root = forms[0]
        if not isinstance(root, SList) or root.head != "context-encoding":
            raise ValueError("not a context encoding")
        regions = {item.head: item for item in root.items if isinstance(item, SList)}
        kernel = _entries(regions["kernel"])
        state = _entries(regions["observation-state"])
        inbox = [i for i in regions["inbox"].items[1:] if isinstance(i, SList)]
        frames = {
            _atom(i.items[1]): i
            for i in regions["mind"].items[1:]
            if isinstance(i, SList) and i.head == "frame"
        }
        for form in forms[1:]:
            if isinstance(form, SList) and form.head == "context-delta":
                _apply(form, inbox, frames, kernel, state)
        protected = {key for key, item in state.items() if _child(item, "protected") is not None}
        pressure = kernel.get("pressure")
        scheduling = kernel.get("scheduling")
        mode = _child(scheduling, "mode") if scheduling is not None else None
        return cls(
            session=_atom(kernel["session"].items[1]),
            version=int(_atom(kernel["mind-version"].items[1])),
            level=_atom(_value(pressure, "level")) if pressure else "normal",
            tokens=int(_atom(_value(pressure, "tokens"))) if pressure else 0,
            mode=_text(mode.items[1]) if mode is not None and len(mode.items) > 1 else "work",
            inbox=tuple(_seen(item, protected) for item in inbox if item.head == "observation"),
            frames=tuple(_frame(item) for item in frames.values()),
        )

    def root(self) -> Seen | None:
        """The current request: the newest user message of this session."""
        mine = [s for s in self.inbox if s.kind == "user_message" and s.session == self.session]
        return mine[-1] if mine else None


def _entries(region: SList) -> dict[str, SList]:
    """A region's entries by their head (``(@e12 ...)`` by its ref)."""
    out: dict[str, SList] = {}
    for item in region.items[1:]:
        if isinstance(item, SList) and item.items:
            out[to_text(item.items[0])] = item
    return out


def _apply(
    delta: SList,
    inbox: list[SList],
    frames: dict[str, SList],
    kernel: dict[str, SList],
    state: dict[str, SList],
) -> None:
    """One ``(context-delta ...)``: what arrived, what changed, what left the view."""
    for item in delta.items[1:]:
        if not isinstance(item, SList):
            continue
        if item.head == "arrived" and isinstance(item.items[1], SList):
            inbox.append(item.items[1])
        elif item.head in ("derived", "updated"):
            frame = item.items[1]
            assert isinstance(frame, SList)
            frames[_atom(frame.items[1])] = frame
        elif item.head == "retired":
            gone = {_atom(x) for x in item.items[1:]}
            inbox[:] = [o for o in inbox if _atom(o.items[1]) not in gone]
            for fid in gone & frames.keys():
                del frames[fid]
        elif item.head in ("kernel-update", "observation-state-update"):
            target = kernel if item.head == "kernel-update" else state
            for entry in item.items[1:]:
                if isinstance(entry, SList) and entry.items:
                    key = to_text(entry.items[0])
                    if len(entry.items) == 1:  # withdrawn
                        target.pop(key, None)
                    else:
                        target[key] = entry


def _child(lst: SList | None, name: str) -> SList | None:
    if lst is None:
        return None
    for item in lst.items[1:]:
        if isinstance(item, SList) and item.head == name:
            return item
    return None


def _value(lst: SList | None, name: str) -> SExpr:
    child = _child(lst, name)
    if child is None or len(child.items) < 2:
        raise ValueError(f"the encoding has no ({name} ...)")
    return child.items[1]


def _atom(node: SExpr) -> str:
    if isinstance(node, Atom):
        return node.text
    raise ValueError(f"expected an atom, got {to_text(node)[:80]}")


def _text(node: SExpr) -> str:
    return node.value if isinstance(node, Str) else to_text(node)


def _seen(item: SList, protected: set[str]) -> Seen:
    ref = _atom(item.items[1])
    text_node = _child(item, "text")
    if text_node is not None:
        text = _text(text_node.items[1])
    else:  # a preview: the head and the tail are what the agent can read without recall
        preview = _child(item, "preview")
        parts = [_child(preview, "head"), _child(preview, "tail")]
        text = "\n".join(_text(p.items[1]) for p in parts if p is not None)
    return Seen(
        ref,
        int(ref.removeprefix("@e")),
        _atom(_value(item, "kind")),
        _atom(_value(item, "session")),
        text,
        ref in protected,
    )


def _frame(item: SList) -> FrameSeen:
    sources = _child(item, "sources")
    body = _child(item, "body")
    lifecycle = _child(item, "lifecycle")  # stated only when not active
    return FrameSeen(
        _atom(item.items[1]),
        int(_atom(_value(item, "revision"))),
        _atom(lifecycle.items[1]) if lifecycle is not None else "active",
        tuple(_atom(s) for s in sources.items[1:]) if sources else (),
        body.items[1:] if body else (),
    )


# --------------------------------------------------------------------------- the builtin agent


@dataclass(frozen=True, slots=True)
class Known:
    """A fact the builtin agent holds in a ``fact/<key>/<n>`` frame."""

    frame: str
    number: int
    key: str
    value: str
    previous: tuple[str, ...]
    newest_source: int  # the highest @e seq among the frame's sources

    def body(self) -> str:
        previous = " ".join(quote(v) for v in self.previous)
        return f"(fact (key {quote(self.key)}) (value {quote(self.value)}) (previous {previous}))"


def known_facts(frames: Sequence[FrameSeen]) -> dict[str, Known]:
    out: dict[str, Known] = {}
    for f in frames:
        parts = f.id.split("/")
        if len(parts) != 3 or parts[0] != "fact" or not parts[2].isdigit():
            continue
        if f.lifecycle != "active" or not f.body or not isinstance(f.body[0], SList):
            continue
        fields = {
            c.head: c.items[1:] for c in f.body[0].items[1:] if isinstance(c, SList) and c.head
        }
        if not fields.get("key") or not fields.get("value"):
            continue
        key = _text(fields["key"][0])
        seqs = [int(s[2:]) for s in f.sources if s.startswith("@e")]
        candidate = Known(
            f.id,
            int(parts[2]),
            key,
            _text(fields["value"][0]),
            tuple(_text(v) for v in fields.get("previous", ())),
            max(seqs, default=0),
        )
        if key not in out or candidate.number > out[key].number:
            out[key] = candidate
    return out


class BuiltinAgent:
    """The deterministic agent of the evaluations (policy in the module docstring)."""

    name = "builtin"

    def __call__(self, request: ModelRequest) -> ModelResponse:
        view = View.parse(request.encoding)
        offered = {t.name for t in request.tools}
        maintaining = view.mode == "maintenance" or view.level == "critical"
        maintaining = maintaining or offered == AGENT_TOOLS
        root = view.root()
        ops = self.fact_ops(view)
        done = [s for s in view.inbox if s is not root and not s.protected]
        # its own receipts alone are not worth a transaction (each commit makes a new one)
        if maintaining and any(s.kind != "tx_receipt" for s in done):
            ops.append(f"(retire {' '.join(s.ref for s in done)})")
        if ops:
            reason = "keep the planted facts as frames; retire what has been read"
            tx = (
                f"(context-tx (base-version {view.version}) (reason {quote(reason)})\n  "
                + "\n  ".join(ops)
                + ")"
            )
            call = ToolCall(f"builtin-{view.version}", "context_tx", json.dumps({"tx": tx}))
            return ModelResponse(None, (call,))
        return ModelResponse(self.answer(view, root))

    @staticmethod
    def fact_ops(view: View) -> list[str]:
        known = known_facts(view.frames)
        ops: list[str] = []
        for seen in sorted(view.inbox, key=lambda s: s.seq):
            for match in FACT.finditer(seen.text):
                key, value = match.group("key"), match.group("value")
                old = known.get(key)
                if old is not None and (old.value == value or seen.seq < old.newest_source):
                    continue  # already held, or older than what is held
                if old is None:
                    new = Known(f"fact/{slug(key)}/1", 1, key, value, (), seen.seq)
                    ops.append(f"(derive {new.frame} (from {seen.ref}) {new.body()})")
                else:
                    number = old.number + 1
                    new = Known(
                        f"fact/{slug(key)}/{number}",
                        number,
                        key,
                        value,
                        (*old.previous, old.value),
                        seen.seq,
                    )
                    ops.append(f"(derive {new.frame} (from {seen.ref} {old.frame}) {new.body()})")
                    ops.append(f"(relate {new.frame} supersedes {old.frame})")
                    ops.append(f"(retire {old.frame})")
                known[key] = new
        return ops

    @staticmethod
    def answer(view: View, root: Seen | None) -> str:
        text = root.text if root is not None else ""
        known = known_facts(view.frames)
        current, history = CURRENT_Q.search(text), HISTORY_Q.search(text)
        if current is None and history is None:
            return f"Noted; {len(known)} facts are in my mind."
        match = current if current is not None else history
        key = match.group("key") if match is not None else ""
        fact = known.get(key)
        if fact is None:
            return f"I do not know the {key}: it is not in my mind."
        if current is not None:
            return f"The {key} is {fact.value}."
        values = ", then ".join([*fact.previous, fact.value])
        return f"The {key} has been {values} (current)."
