"""Overlay neighbours (review 17c): a place steps the base only past frames its transaction
moved or deleted, each once, and finds the changed frames by bisection. Whatever the writes,
including a frame put back where the base has it (which a remembered step must not pass), the
neighbour is the one the whole order gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from morphz.mind.memory import MindState
from morphz.mind.state import Changes, Frame, Overlay

IDS = [f"f{i}" for i in range(12)]


def _frame(fid: str, pos: float, lifecycle: str = "active") -> Frame:
    return Frame(fid, "(v)", (), 1, lifecycle, False, pos)  # type: ignore[arg-type]


def _base(count: int) -> MindState:
    base = MindState()
    base.apply(
        Changes(frames={f"f{i}": _frame(f"f{i}", float(i)) for i in range(count)}), commit=True
    )
    return base


def _expected(view: Overlay, key: tuple[float, str], after: bool) -> str | None:
    keys = sorted((f.pos, f.id) for f in view.frames())
    side = [k for k in keys if (k > key if after else k < key)]
    if not side:
        return None
    return (side[0] if after else side[-1])[1]


_WRITE = st.tuples(
    st.sampled_from(IDS),
    st.one_of(
        st.none(),  # deleted
        st.sampled_from(["home", "retired"]),  # back at its base place; retired in place
        st.floats(-2.0, 14.0, allow_nan=False),  # moved
    ),
)
_QUERY = st.tuples(
    st.floats(-2.0, 14.0, allow_nan=False), st.sampled_from(["", *IDS]), st.booleans()
)


@settings(max_examples=300)
@given(st.integers(0, 12), st.lists(st.one_of(_WRITE, _QUERY), max_size=40))
def test_the_neighbour_is_the_whole_orders(count: int, steps: list[tuple[object, ...]]) -> None:
    base = _base(count)
    view = Overlay(base, Changes())
    for step in steps:
        if isinstance(step[0], str):  # a write
            fid, what = step
            assert isinstance(fid, str)
            home = float(fid[1:])
            if what is None:
                view.put_frame(fid, None)
            elif what == "home":
                view.put_frame(fid, _frame(fid, home))
            elif what == "retired":
                view.put_frame(fid, _frame(fid, home, "retired"))
            else:
                assert isinstance(what, float)
                view.put_frame(fid, _frame(fid, what))
            continue
        pos, fid, after = step
        assert isinstance(pos, float) and isinstance(fid, str) and isinstance(after, bool)
        found = view.frame_after(pos, fid) if after else view.frame_before(pos, fid)
        assert (None if found is None else found.id) == _expected(view, (pos, fid), after)
        if found is not None:
            assert found == view.frame(found.id)  # as the changes have it, not the base row
