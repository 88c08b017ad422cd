"""What a context's activations sent to their models, read back from the events: the requests,
their bytes as a provider's cache sees them, the share of those bytes that began the previous
request the same engine sent (the prefix-reuse meter, :class:`~morphz.encoding.PrefixMeter`, which
the engine records in each ``model_reply`` event), and the input and cached tokens the provider
reported. A request the provider refused as too long counts as sent (its figures are recorded with
the reply that follows it, or with the activation's end when none does) and is also counted apart
as refused. So does a request that got no reply (a provider error, an interruption, an unexpected
error ended the activation: its end records the request's figures as ``failed_sent``), not
counted apart. With ContextDelta, each request is
also counted as an increment or as a seed, with the reason it was one
(:attr:`~morphz.encoding.DeltaEncoder.last`, or the engine's own: ``tool-set``,
``maintenance-batch``, ``too-long``). Reading an activation reads only the events between its start
and its end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from morphz import events as ev
from morphz.errors import InputError
from morphz.runtime.replies import whole
from morphz.store.base import ActivationRow

if TYPE_CHECKING:
    from morphz.contextdb import Context


@dataclass(slots=True)
class RequestStats:
    """The requests of one activation (or of several, added up)."""

    activation: str
    session: str
    state: str
    requests: int = 0  # requests sent: model replies recorded, refused ones, one that failed
    refused: int = 0  # of those, refused by the provider as too long
    measured: int = 0  # requests that followed an earlier request of the same engine
    bytes: int = 0  # of the measured requests
    reused: int = 0  # of those bytes, how many began the previous request
    input_tokens: int | None = None  # as the provider reported them (None: never reported)
    cached_tokens: int | None = None
    unrecorded: int = 0  # replies recorded before requests were measured
    increments: int = 0  # ContextDelta requests that were the previous one plus an increment
    seeds: dict[str, int] = field(default_factory=dict)  # ContextDelta seeds, by why

    @property
    def rate(self) -> float | None:
        return self.reused / self.bytes if self.bytes else None

    def add_reply(self, payload: dict[str, Any]) -> None:
        """Count a ``model_reply`` event's request, and the refused requests before it."""
        sent = payload.get("request")
        if not isinstance(sent, dict):
            self.requests += 1
            self.unrecorded += 1
        else:
            self.add_refused(sent)
            self.add_sent(sent)
        usage = payload.get("usage")
        if isinstance(usage, dict):  # a figure recorded null (no whole number) adds nothing
            self.add_usage(whole(usage.get("input", 0)), whole(usage.get("cached", 0)))

    def add_sent(self, sent: dict[str, Any]) -> None:
        """Count one request, with what the engine recorded of it: its meter figures (``bytes``,
        and ``prefix`` unless it was the engine's first) and its ContextDelta ``delta``."""
        self.requests += 1
        if sent.get("prefix") is not None:
            self.measured += 1
            self.bytes += int(sent["bytes"])
            self.reused += int(sent["prefix"])
        self.add_delta(sent.get("delta"))

    def add_refused(self, sent: dict[str, Any]) -> None:
        """Count the requests refused as too long before ``sent``: each with its figures
        (``refused_sent``), or, as recorded before those were, only their number (``refused``)."""
        each = sent.get("refused_sent")
        if isinstance(each, list):
            for one in each:
                self.add_sent(one if isinstance(one, dict) else {})
            self.refused += len(each)
        elif isinstance(sent.get("refused"), int):
            self.requests += sent["refused"]
            self.refused += sent["refused"]

    def add_unanswered(self, unanswered: object) -> None:
        """Count the requests no reply followed, as the activation's end records them
        (``unanswered``, absent from ends recorded before it was): those refused as too long,
        and the one a provider error or an interruption left without a reply (``failed_sent``,
        absent from ends recorded before it was)."""
        if isinstance(unanswered, dict):
            self.add_refused(unanswered)
            failed = unanswered.get("failed_sent")
            if isinstance(failed, dict):
                self.add_sent(failed)

    def add_delta(self, kind: object, n: int = 1) -> None:
        """Count a ContextDelta request: ``"increment"``, or the reason it was a seed."""
        if kind == "increment":
            self.increments += n
        elif isinstance(kind, str):
            self.seeds[kind] = self.seeds.get(kind, 0) + n

    def add_usage(self, input_tokens: int | None, cached_tokens: int | None) -> None:
        if input_tokens is not None:
            self.input_tokens = (self.input_tokens or 0) + input_tokens
        if cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + cached_tokens

    def to_dict(self) -> dict[str, Any]:
        rate = self.rate
        return {
            "activation": self.activation,
            "session": self.session,
            "state": self.state,
            "requests": self.requests,
            "refused": self.refused,
            "measured": self.measured,
            "bytes": self.bytes,
            "reused": self.reused,
            "prefix_reuse": None if rate is None else round(rate, 4),
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,
            "unrecorded": self.unrecorded,
            "delta": {"increments": self.increments, "seeds": dict(sorted(self.seeds.items()))}
            if self.increments or self.seeds
            else None,
        }


def pick_activations(
    ctx: Context, activation: str | None = None, last: int = 1
) -> list[ActivationRow]:
    """The activation named, or the ``last`` most recently started ones (oldest first): a
    key lookup or a range of the store's index, not a read of every activation."""
    if activation is None and last < 1:
        raise InputError(f"last must be at least 1, not {last}")
    with ctx.db.store.read(ctx.id) as r:
        if activation is None:
            return r.latest_activations(last)
        found = r.activation(activation)
    if found is None:
        raise InputError(
            f"no activation {activation!r} in context '{ctx.id}': "
            f"`morphz context requests {ctx.id} --last 10` lists the latest ones; run one with "
            "`morphz exec`"
        )
    return [found]


def request_stats(ctx: Context, activations: Sequence[ActivationRow]) -> list[RequestStats]:
    """The requests of each of ``activations``, from their ``model_reply`` events and their
    ends (the refused requests no reply followed)."""
    out = []
    for act in activations:
        stats = RequestStats(act.activation_id, act.session_id, act.state)
        span = None if act.finished_seq is None else act.finished_seq - act.started_seq + 1
        for event in ctx.events(after=act.started_seq - 1, limit=span):
            payload = event.payload or {}
            if payload.get("activation") != act.activation_id:
                continue
            if event.kind == ev.MODEL_REPLY:
                stats.add_reply(payload)
            elif event.kind == ev.ACTIVATION_FINISHED:
                stats.add_unanswered(payload.get("unanswered"))
        out.append(stats)
    return out


def total(stats: Sequence[RequestStats]) -> RequestStats:
    """``stats`` added up."""
    out = RequestStats("all", "-", "-")
    for s in stats:
        out.requests += s.requests
        out.refused += s.refused
        out.measured += s.measured
        out.bytes += s.bytes
        out.reused += s.reused
        out.unrecorded += s.unrecorded
        out.add_usage(s.input_tokens, s.cached_tokens)
        out.add_delta("increment", s.increments)
        for reason, n in s.seeds.items():
            out.add_delta(reason, n)
    return out
