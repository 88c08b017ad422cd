"""Lifecycle rules: which events tick the cognitive clock, the organizing window, finalization.

- The clock advances by one for each appended batch that holds a user message, an external
  event or a real tool result. Recall results, approvals, receipts and inspection do not tick.
- Retiring a frame starts an organizing window of ``window`` ticks (default 8, per context):
  the frame stays visible, marked retiring, until the clock reaches its deadline.
- When the clock reaches a deadline, :func:`finalize_due` retires the frame for good. The store
  runs it in the same database transaction that advances the clock and records the result as a
  runtime commit, so the audit replay finalizes exactly the same frames.
"""

from __future__ import annotations

from morphz.mind.lines import edge_units, frame_text, framing_units, line_units
from morphz.mind.state import Changes, Frame, MindView, ObsState, OpEffect, SessionState
from morphz.token_estimate import text_units, tokens

DEFAULT_WINDOW = 8
MAX_WINDOW = 1_000_000

OBSERVATION_KINDS: frozenset[str] = frozenset(
    {
        "user_message",
        "tool_result",
        "external_event",
        "recall_result",
        "approval_result",
        "tx_receipt",  # the outcome of the agent's own context_tx call: never ticks the clock
        "agent_reply",  # what the agent answered the user (a delivered reply): never ticks
    }
)
CLOCK_KINDS: frozenset[str] = frozenset({"user_message", "tool_result", "external_event"})


def advances_clock(kinds: list[str]) -> bool:
    """True when a batch of observations of these kinds ticks the cognitive clock."""
    return any(kind in CLOCK_KINDS for kind in kinds)


def frame_tokens(frame: Frame) -> int:
    """What ``frame`` counts in the mind region as the encoding's estimate counts it, without
    the marks of a retiring frame (mind.lines.frame_text): every frame effect and the kept
    total count it."""
    return tokens(line_units(frame_text(frame, None, marks=False)))


def edge_tokens(edge: tuple[str, str, str]) -> int:
    """What a relation counts in the mind region while its subject is in view: `` (S R O)``."""
    return tokens(edge_units(edge))


def in_view(frame: Frame | None) -> bool:
    """Whether ``frame`` is shown in the mind region (active or retiring)."""
    return frame is not None and frame.lifecycle != "retired"


# the ticks a retiring frame's marks count as left: the line shows the ticks left until its
# deadline, which changes every tick, so the kept total counts the widest a window can show
MARKED_TICKS = MAX_WINDOW


def kept_tokens(frame: Frame | None) -> int:
    """What ``frame`` counts in the kept total of the frames in view (the `budget` refusal's
    measure): its tokens, and while it retires the marks the mind region shows with it."""
    return view_tokens(frame) + retiring_marks(frame)


def retiring_marks(frame: Frame | None) -> int:
    """The tokens ``(lifecycle retiring) (remaining-ticks N) (reason "...")`` add to a retiring
    frame's line (its reason as the mind region shows it, N stood in by MARKED_TICKS); 0 for
    any other frame."""
    if frame is None or frame.lifecycle != "retiring":
        return 0
    marked = tokens(line_units(frame_text(frame, MARKED_TICKS)))
    return max(0, marked - frame_tokens(frame))


def view_tokens(frame: Frame | None) -> int:
    """What ``frame`` counts among the frames in view: its tokens while active or retiring, 0
    once retired or gone (receipts, the store's kept total and the audit all count so)."""
    return 0 if frame is None or frame.lifecycle == "retired" else frame_tokens(frame)


# An observation longer than the preview threshold is shown as its first HEAD_CHARS and last
# TAIL_CHARS characters (at most half and a quarter of the threshold) and a marker
DEFAULT_PREVIEW_THRESHOLD = 16_000
HEAD_CHARS = 2_000
TAIL_CHARS = 1_000
PREVIEW_MARKER_CHARS = 160  # the preview's framing and its "read @eN with recall" note


def shown_chars(chars: int, threshold: int = DEFAULT_PREVIEW_THRESHOLD) -> int:
    """About how many characters of an observation of ``chars`` the inbox shows."""
    if chars <= threshold:
        return chars
    return min(HEAD_CHARS, threshold // 2) + min(TAIL_CHARS, threshold // 4) + PREVIEW_MARKER_CHARS


# what a preview adds to an entry: its framing and its "read @eN with recall" note
PREVIEW_MARKER = (
    '(preview (total-chars 100000) (head "") (omitted "97000 characters: read @e1000 with '
    'recall for the full text") (tail ""))'
)


def obs_tokens(obs: ObsState, threshold: int = DEFAULT_PREVIEW_THRESHOLD) -> int:
    """What ``obs`` counts in the inbox: its entry's framing and text, or its preview when
    longer than ``threshold`` (receipts state what retiring or restoring it changes in a
    request), as kept with it (mind.lines.observation_units); a preview's head and tail count
    the text's units per character, beside its marker."""
    units = obs.units
    if obs.chars > threshold:  # a preview (shown_chars)
        framing = framing_units(obs.seq, obs.kind)
        text = shown_chars(obs.chars, threshold) - PREVIEW_MARKER_CHARS
        units = (units - framing) * text // obs.chars + framing + text_units(PREVIEW_MARKER)
    return tokens(units)


def remaining_ticks(frame: Frame, clock: int) -> int | None:
    """Ticks left in a retiring frame's organizing window; None when it is not retiring."""
    if frame.lifecycle != "retiring" or frame.deadline is None:
        return None
    return max(0, frame.deadline - clock)


def ensure_session(view: MindView, changes: Changes, session_id: str) -> None:
    """Every event records its session; the first event of a new session creates it."""
    if session_id not in changes.sessions and view.session(session_id) is None:
        changes.sessions[session_id] = SessionState(session_id, "active")


def finalize_due(view: MindView, clock: int) -> Changes:
    """Retire every retiring frame whose deadline is at or before ``clock``."""
    changes = Changes()
    for index, fid in enumerate(view.due_retirements(clock)):
        frame = view.frame(fid)
        if frame is None or frame.lifecycle != "retiring":  # pragma: no cover - view invariant
            continue
        changes.frames[fid] = frame.with_life("retired", None, frame.reason)
        changes.written.add(f"life:{fid}")
        tokens = frame_tokens(frame)
        changes.effects.append(
            OpEffect(index, "finalize", fid, "organizing window ended: retired", tokens, 0)
        )
    return changes
