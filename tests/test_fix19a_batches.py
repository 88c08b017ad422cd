"""Review 19a: what a maintenance batch, its minimum and the resuming of work are measured
against. The hard limit: a batch counts the tools it sends (``context_tx`` and ``recall``), not
the work tools (docs/decisions.md said otherwise; the first test pins it). A provider's
too-long ceiling: it is learnt from the refused request counted as sent, the figures' slack
out (Engine.sent_tokens), and was applied to the pressure figures of a batch's minimum and of
the work request, which count that slack (PRESSURE_SLACK less the figures' own text, about 18
tokens here): a minimum under the ceiling as sent failed the activation ("needs T tokens of
C"), and work stayed in maintenance though its request was under the ceiling. The figures of a
run are measured on a first store, then a second, identical store is refused at a ceiling
between the two counts."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import import_log_lines, make_engine
from histories import Clock
from morphz.capacity import Budget
from morphz.encoding.compile import Encoding
from morphz.runtime.engine import Engine
from morphz.runtime.floor import empty_request, request_options
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

_BATCH = re.compile(r'\(batch "(\d+) of (\d+) shown, (\d+) left out"\)')
_CEILING = re.compile(r'\(refused-above "(\d+)"\)')
_FIGURE = re.compile(r"\(pressure \(level \w+\) \(tokens (\d+)\)")
LINES = 12  # log lines of about 150 tokens each, in session feed: what a batch may leave out


def _sent(engine: Engine, request: ModelRequest) -> int:
    """``request``'s tokens as the engine counts a refused one."""
    return engine.sent_tokens(request.encoding, [t.text for t in request.tools])


def _figure(request: ModelRequest) -> int:
    """The pressure figure ``request``'s kernel states."""
    found = _FIGURE.search(request.encoding)
    assert found is not None
    return int(found.group(1))


def _ceiling(text: str) -> int:
    found = _CEILING.search(text)
    assert found is not None, "no refused-above fact"
    return int(found.group(1))


def test_a_batch_is_fitted_with_the_maintenance_tools_it_sends(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A hard limit below an empty context's work request but above the maintenance one: a
    request counting the work tools can never fit, one sending only context_tx and recall can.
    The activation is shown a batch (a maintenance request) that fits and uses its room: the
    root and as many log lines as fit, less than two lines' worth left unused."""
    import_log_lines(ctx, LINES)
    sent: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        sent.append(request)
        return ModelResponse("seen", ())

    engine = make_engine(ctx, FunctionModel(model), workspace)
    work, maintenance = (
        empty_request(request_options(engine.tools, maintenance=m, model=engine.model.name))
        for m in (False, True)
    )
    hard = maintenance + 700  # room for the root, the kernel's activation and a few lines
    assert work > hard  # counted with the work tools, not even an empty context fits
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=hard, reserve=200))
    result = asyncio.run(engine.run("hello", session="s"))
    assert result.state == "delivered", result.reason
    (request,) = sent
    assert {t.name for t in request.tools} == {"context_tx", "recall"}
    found = _BATCH.search(request.encoding)
    assert found is not None
    shown, total, left = (int(g) for g in found.groups())
    assert (total, shown + left) == (LINES + 1, LINES + 1)
    assert shown >= 3  # the root and at least two lines
    assert _sent(engine, request) <= _figure(request) <= hard
    line = (_figure(request) - maintenance) // shown  # a line's share, the root's spread in
    assert hard - _figure(request) < 2 * line


class Run:
    """One activation ("hello" in session s) on a fresh store of ``LINES`` log lines whose
    provider refuses the first request as too long, stating ``maximum``; ``steps`` answer the
    requests after it (``None``: "done"). Keeps the requests sent and every batch compiled."""

    def __init__(
        self,
        path: Path,
        workspace: Path,
        maximum: Callable[[int], int],
        steps: Callable[[int, ModelRequest], ModelResponse | None] = lambda n, r: None,
    ) -> None:
        self.db = morphz.open(path, now=Clock())
        self.ctx = self.db.context("context-default", create=True)
        import_log_lines(self.ctx, LINES)
        self.sent: list[ModelRequest] = []
        self.batches: list[Encoding] = []
        self.maximum, self.steps = maximum, steps
        self.engine = make_engine(self.ctx, FunctionModel(self._answer), workspace)
        compile_encoding = self.ctx.encode

        def recording(*args: Any, **kwargs: Any) -> Encoding:
            encoding = compile_encoding(*args, **kwargs)
            if encoding.options.only_observations is not None:
                self.batches.append(encoding)
            return encoding

        self.ctx.encode = recording  # type: ignore[method-assign]
        try:
            self.result = asyncio.run(self.engine.run("hello", session="s"))
        finally:
            self.db.close()

    def _answer(self, request: ModelRequest) -> ModelResponse:
        self.sent.append(request)
        if len(self.sent) == 1:
            figure = _sent(self.engine, request)  # the share stated is maximum / figure
            raise ContextTooLongError(
                f"prompt is too long: {figure} tokens > {self.maximum(figure)} maximum"
            )
        return self.steps(len(self.sent), request) or ModelResponse("done", ())

    def counted(self, encoding: Encoding) -> int:
        """A maintenance compile's tokens counted as sent, the way the refused request was."""
        schemas = [t.schema.text for t in self.engine.tools.offered(True)]
        return self.engine.sent_tokens(encoding.text, schemas)


def test_a_minimum_under_the_ceiling_as_sent_is_sent(tmp_path: Path, workspace: Path) -> None:
    """The minimum batch (the root, the twelve lines left out) is under the provider's ceiling
    counted as the refused request was, though its figure, slack in, is over it: the activation
    sends it. It failed with "even the minimum maintenance request needs T tokens of C"."""
    measured = Run(tmp_path / "measured.db", workspace, lambda figure: figure // 2)
    assert measured.result.state == "failed"  # a ceiling far below any request
    minimum = measured.batches[0]
    sent, figure = measured.counted(minimum), minimum.tokens
    assert sent < figure - 2  # the slack: room for a ceiling between them
    run = Run(tmp_path / "refused.db", workspace, lambda _: (sent + figure) // 2)
    (again,) = run.batches  # the same minimum, under a ceiling of as many digits
    ceiling = _ceiling(again.text)
    assert (run.counted(again), again.tokens) == (sent, figure)
    assert sent <= ceiling < figure
    assert run.result.state == "delivered", run.result.reason
    request = run.sent[1]
    assert _BATCH.search(request.encoding) is not None
    assert f'"1 of {LINES + 1} shown, {LINES} left out"' in request.encoding
    assert _sent(run.engine, request) <= ceiling


def test_a_batch_fills_the_room_under_the_ceiling_as_sent(tmp_path: Path, workspace: Path) -> None:
    """With room for a few lines under the ceiling beside the minimum, counted as sent: the
    batch shows the root and lines, is under the ceiling as sent, and leaves less than two
    lines' worth of it unused."""
    measured = Run(tmp_path / "measured.db", workspace, lambda figure: figure // 2)
    sent = measured.counted(measured.batches[0])
    run = Run(tmp_path / "refused.db", workspace, lambda _: sent + 600)
    assert run.result.state == "delivered", run.result.reason
    request = run.sent[1]
    found = _BATCH.search(request.encoding)
    assert found is not None
    shown = int(found.group(1))
    assert shown >= 3  # the root and at least two lines
    batch, ceiling = _sent(run.engine, request), _ceiling(request.encoding)
    assert batch <= ceiling
    line = (batch - sent) / (shown - 1)
    assert ceiling - batch < 2 * line


def _retire_the_lines(n: int, request: ModelRequest) -> ModelResponse | None:
    """The second request (the first after the refusal) retires the log lines."""
    if n != 2:
        return None
    version = re.findall(r"\(mind-version (\d+)\)", request.encoding)[-1]
    refs = " ".join(f"@e{i}" for i in range(1, LINES + 1))
    tx = f'(context-tx (base-version {version}) (reason "processed") (retire {refs}))'
    return ModelResponse(None, (ToolCall("c1", "context_tx", json.dumps({"tx": tx})),))


@pytest.mark.parametrize("between", [True, False])
def test_work_resumes_when_its_request_as_sent_is_under_the_ceiling(
    tmp_path: Path, workspace: Path, between: bool
) -> None:
    """After the refusal the agent retires the lines; the work request would then be under the
    ceiling as sent (``between``: its figure, slack in, over it): work resumes, its external
    tools offered again. It stayed in maintenance while the figure was over. Not ``between``,
    a ceiling below the work request as sent: still maintenance."""
    measured = Run(
        tmp_path / "measured.db", workspace, lambda figure: figure - 1_000, _retire_the_lines
    )
    resumed = measured.sent[2]  # the ceiling was far above: work resumed
    assert len(resumed.tools) > 2
    sent, figure = _sent(measured.engine, resumed), _figure(resumed)
    assert sent < figure - 2
    ceiling = (sent + figure) // 2 if between else sent - 2
    run = Run(tmp_path / "refused.db", workspace, lambda _: ceiling, _retire_the_lines)
    assert run.result.state == "delivered", run.result.reason
    third = run.sent[2]
    assert _ceiling(third.encoding) in (ceiling, ceiling - 1)  # the share, floored
    assert (len(third.tools) > 2) is between
    assert _sent(run.engine, third) <= _ceiling(third.encoding)
