"""Review 13 (b), today's runtime changes read for bugs: the maintenance resume rule and the
floor measured in a temporary store (runtime/floor.py), `context budget`'s floor note, the
engine's caches, graphemes. Each test fails on the code it was written against because of the
defect its docstring describes."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

import morphz
from agents import invoke, make_engine
from morphz.graphemes import boundary
from morphz.runtime.models.base import ModelRequest, ModelResponse, Usage
from morphz.runtime.models.scripted import FunctionModel


def _no_temp_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As in a container whose root file system is read-only (the store on a mounted volume):
    no folder tempfile can use."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-folder"))


def test_an_activation_runs_where_no_temporary_folder_can_be_written(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Engine.run measures its floors (runtime/floor.py:50, ``empty_request``) by creating a
    SQLite store in ``tempfile.TemporaryDirectory``. Where no temporary folder can be written
    (a read-only root file system with the store on a volume, a full /tmp), every activation
    fails at once with a bare FileNotFoundError/OSError (no MorphzError, no event written),
    though the store the user gave is writable and nothing else needs the temp folder.
    Expected: the activation runs (the floor of an empty context needs no file)."""
    _no_temp_folder(monkeypatch, tmp_path)
    engine = make_engine(ctx, FunctionModel(lambda request: ModelResponse("done")), workspace)
    result = asyncio.run(engine.run("hello"))
    assert result.state == "delivered", result.reason


def test_context_tx_commits_where_no_temporary_folder_can_be_written(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`morphz context tx` now measures the maintenance floor (cli_encoding.py:65,
    ``runtime_floor`` -> ``empty_request``) in a temporary store. Without a usable temporary
    folder a plain commit crashes with an uncaught FileNotFoundError (a traceback, not the
    JSON error object docs/cli.md promises). Expected: the commit is made (exit 0)."""
    db = str(env / "m.db")
    assert invoke(["context", "create", "--db", db]).exit_code == 0
    with morphz.open(db) as opened:
        seen = opened.context("context-default").observe("user_message", "note this")
    (env / "ok.tx").write_text(
        f'(context-tx (base-version 0) (derive n1 (from {seen.ref}) "a short note"))',
        encoding="utf-8",
    )
    _no_temp_folder(monkeypatch, env)
    result = invoke(["context", "tx", "--file", str(env / "ok.tx"), "--db", db, "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 0, result.output


def test_context_budget_that_exits_1_leaves_the_budget_unchanged(env: Path) -> None:
    """`morphz context budget CTX --limit N` writes the new budget (cli_encoding.py,
    ``ctx.update_budget``) and only then loads the configuration for the floor note
    (``_note_floor`` -> ``load`` / ``build_tools``). A configuration error there (here an
    unknown tool under [policies]) makes the command print an error and exit 1 while the new
    limit is already stored: the user is told it failed, yet it took effect (docs/cli.md: a
    refused command leaves the store as it was). Expected: either the change is refused
    before it is written, or the command succeeds (the note is advisory)."""
    db = str(env / "m.db")
    assert invoke(["context", "create", "--db", db]).exit_code == 0
    (env / "morphz.toml").write_text('[policies]\nno_such_tool = "allow"\n', encoding="utf-8")
    result = invoke(["context", "budget", "--limit", "50000", "--db", db])
    with morphz.open(db) as store:
        stored = store.context(morphz.DEFAULT_CONTEXT).budget().configured
    assert result.exit_code == 0 or stored != 50000, (result.exit_code, stored, result.output)


def test_a_long_lived_engine_keeps_a_bounded_number_of_floors(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The engine's floors are cached by calibration factor (runtime/floor.py:67, key
    ``(maintenance, cal.factor)``), and the factor changes with every provider report, so
    each activation adds two entries that are never used again (and measures two temporary
    stores): a long-lived engine (chat, a server) grows without bound, the kind of growth the
    prefix meter's fix of this session removed. Expected: only the current floors are kept."""
    reported = iter(range(3000, 100_000, 137))

    def model(request: ModelRequest) -> ModelResponse:
        return ModelResponse("done", (), Usage(next(reported), 10))

    engine = make_engine(ctx, FunctionModel(model), workspace)
    for i in range(6):
        assert asyncio.run(engine.run(f"question {i}")).state == "delivered"
    assert len(engine.measured._known) <= 2, list(engine.measured._known)


@pytest.mark.parametrize("word", ["\u0e17\u0e33", "\u0e19\u0e49\u0e33", "\u0e81\u0eb3"])
def test_a_cut_never_separates_sara_am_from_its_consonant(word: str) -> None:
    """graphemes.py says a cut keeps "an Indic or Thai vowel sign" with its letter, but tests
    only category M (graphemes.py:23): THAI CHARACTER SARA AM (U+0E33) and LAO VOWEL SIGN AM
    (U+0EB3) are category Lo with Grapheme_Cluster_Break=SpacingMark, so a preview or a read
    page cut before one (in ทำ "do", น้ำ "water") shows it alone on a dotted circle.
    Expected: the cut moves off the place before the vowel sign."""
    text = f"ab {word} cd"
    cut = text.index(word) + len(word) - 1  # just before the vowel sign
    assert boundary(text, cut, -1) != cut
    assert boundary(text, cut, +1) != cut


@pytest.mark.parametrize("factor", [1.0, 1.7, 0.63])
@pytest.mark.parametrize("maintenance", [False, True])
def test_a_derived_calibrated_floor_is_the_one_measured_calibrated(
    factor: float, maintenance: bool
) -> None:
    """Floors measures each mode once, uncalibrated, and derives calibrated floors from it: the
    figure must be what compiling the empty request with that calibration gives."""
    from dataclasses import replace

    from morphz.encoding.tokens import Calibration
    from morphz.interfaces.cli_agent import build_tools
    from morphz.runtime.config import Settings
    from morphz.runtime.floor import Floors, empty_request, request_options

    calibration = Calibration(factor, 3) if factor != 1.0 else Calibration()
    options = request_options(
        build_tools(Settings()), maintenance=maintenance, model="m", calibration=calibration
    )
    floors = Floors()
    floors.get(replace(options, calibration=Calibration(2.5, 1)), maintenance)  # measured here
    assert floors.get(options, maintenance) == empty_request(options)
