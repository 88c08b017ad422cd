"""What Context.status and Context.mind read: the counts and pressure of a context, and its mind
as an operator is shown it, each from one read transaction."""

from __future__ import annotations

from typing import Any

from morphz.ids import make_ref
from morphz.mind import remaining_ticks
from morphz.results import FrameView, Mind, ObservationView, Status
from morphz.store.base import ReadTxn
from morphz.stored_settings import latest_calibration


def status(r: ReadTxn, context_id: str, local_time: str | None) -> Status:
    """Counts, versions and the pressure of the default encoding compiled at ``local_time``,
    under the calibration the context learnt most recently (:func:`pressure`)."""
    row = r.row
    frames, observations = r.frame_counts(), r.observation_counts()
    protected = {
        "frames": frames.pop("protected"),
        "observations": observations.pop("protected"),
    }
    return Status(
        context=context_id,
        version=row.version,
        clock=row.clock,
        last_seq=row.last_seq,
        window=row.window,
        head=row.head,
        frames=frames,
        observations=observations,
        protected=protected,
        sessions=sum(r.active.session_counts().values()),
        checkpoints=len(r.active.checkpoint_names()),
        running_activations=len(r.activations(running_only=True)),
        pressure=pressure(r, context_id, local_time),
    )


def pressure(r: ReadTxn, context_id: str, local_time: str | None) -> dict[str, Any]:
    """The pressure of the default encoding compiled at ``local_time``, counted under the
    calibration the context learnt most recently (the model the agent last ran with, named as
    ``model``; None and the plain estimate when it has learnt none), so status states the level
    the agent's requests are measured at, less what a request adds to the encoding (preamble,
    tool schemas)."""
    from morphz.encoding.compile import compile_encoding
    from morphz.encoding.options import EncodeOptions

    latest = latest_calibration(context_id, r.active.setting_rows())
    model, calibration = latest if latest is not None else (None, None)
    options = EncodeOptions(local_time=local_time or "unknown", calibration=calibration)
    return compile_encoding(r, options).pressure.to_dict() | {"model": model}


def mind(r: ReadTxn, context_id: str, all_observations: bool) -> Mind:
    """The frames in order, relations, checkpoints, the active observations (and the retired
    ones when ``all_observations``) and the sessions' attention."""
    clock = r.row.clock
    frames = tuple(
        FrameView(
            f.id,
            f.body,
            f.revision,
            f.lifecycle,
            remaining_ticks(f, clock),
            f.sources,
            f.protected,
            f.reason,
        )
        for f in r.ordered_frames()
    )
    observations = tuple(
        ObservationView(make_ref(o.seq), o.kind, o.lifecycle, o.protected, o.chars)
        for o in r.observations(active_only=not all_observations)
    )
    return Mind(
        context=context_id,
        version=r.row.version,
        clock=clock,
        frames=frames,
        relations=tuple(sorted(r.edges())),
        checkpoints=tuple(r.checkpoint_versions()),
        observations=observations,
        sessions=tuple((s.id, s.attention) for s in r.sessions()),
    )
