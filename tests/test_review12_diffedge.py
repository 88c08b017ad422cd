"""Review 12, this session's changes to the edges (`git diff 46ef271 HEAD` over encoding/,
runtime/, interfaces/, docs/cli.md): `morphz context encoding` reading the configuration, model
specs, and the protocol's increments entry against what ContextDelta emits. Each test failed
when written."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import morphz
from morphz.encoding import DeltaEncoder, EncodeOptions
from morphz.encoding.protocol import PROTOCOL
from morphz.errors import InputError
from morphz.runtime.config import load, make_model
from test_encoding_cli import _run, _store

OPTS = EncodeOptions(local_time="2026-08-04T10:00:00+00:00")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_context_encoding_shows_the_configured_profile_it_reads(env: Path) -> None:
    """`context encoding` now reads the configuration "as exec and chat read it" and prints
    "the encoding itself, as a model receives it". With `profile = "agent.md"` in morphz.toml,
    every request exec and chat send carries that text as the evaluation-profile region (and
    its tokens count toward the pressure). Today `context encoding` reads the profile file (a
    missing one makes the command fail with "cannot read the profile") and then leaves it out:
    the encoding shows `(evaluation-profile none)` and a pressure figure below the runtime's.
    Expected: the configured profile is the encoding's evaluation-profile, as in exec/chat."""
    db = _store(env)
    (env / "agent.md").write_text("You are the deployment bot of team Kestrel.\n", "utf-8")
    (env / "morphz.toml").write_text('profile = "agent.md"\n', "utf-8")
    out = json.loads(_run(db, "context", "encoding", "--format", "json"))
    region = next(r for r in out["regions"] if r["name"] == "evaluation-profile")
    shown = out["text"].encode("utf-8")[region["start"] : region["end"]].decode("utf-8")
    assert "team Kestrel" in shown, shown


def test_context_encoding_names_a_scripted_model_as_the_runtime_does(env: Path) -> None:
    """`--model` takes "a spec as exec takes it" (now including `scripted:PATH`) and the text
    output is the encoding "as a model receives it". The runtime's scripted model is named
    `scripted:<file name>` (ScriptedModel.from_file), so exec's requests say
    `(model "scripted:replies.json")`, while `context encoding --model scripted:sub/replies.json`
    says `(model "scripted:sub/replies.json")`: other bytes, other tokens than the request
    exec sends. Expected: the encoding names the model as the runtime would."""
    db = _store(env)
    (env / "sub").mkdir()
    (env / "sub" / "replies.json").write_text('[{"reply": "ok"}]', "utf-8")
    spec = "scripted:sub/replies.json"
    runtime_name = make_model(spec, load(env / "home", env, os.environ), os.environ).name
    text = _run(db, "context", "encoding", "--model", spec)
    assert f'(model "{runtime_name}")' in text, re.findall(r"\(model [^)]*\)", text)


def test_a_models_section_for_a_bare_model_name_is_refused(env: Path) -> None:
    """Bare model names are now refused by `exec`, `chat` and `context encoding --model`
    (check_model_spec). A `[models."gpt-4o-mini"]` section (or a typo such as
    `[models."opnai:gpt-4o-mini"]`) can never match a spec the runtime accepts, so its
    `delta = true` is silently never applied: ContextDelta stays off and nothing says why.
    Expected: the configuration refuses a [models] section whose name is not a model spec,
    with an InputError naming it (as it refuses unknown keys)."""
    (env / "morphz.toml").write_text('[models."gpt-4o-mini"]\ndelta = true\n', "utf-8")
    with pytest.raises(InputError, match="gpt-4o-mini"):
        load(env / "home", env, {})


def test_the_protocol_says_what_derived_means_for_a_frame_that_comes_back(
    db: morphz.Database,
) -> None:
    """The protocol's increments entry says "derived: a new frame" (and create refuses an id
    that belongs to any frame, retired ones included). But a frame an increment brought, then
    retired ("(retired b)"), then restored comes back in a later increment as
    `(derived (frame b (revision 1) ...))`: the same id, not a new frame. A model following the
    contract literally reads a second frame b being created. Expected: either the increment
    states a frame that comes back in a form the protocol defines for it, or the protocol's
    `derived` entry says it also brings back a frame that returns (restored, rolled back)."""
    ctx = db.context("c", create=True, window=1)

    def tx(ops: str, reason: str | None = None) -> None:
        why = f' (reason "{reason}")' if reason else ""
        ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")

    tx("(create a (x 1))")
    encoder = DeltaEncoder()
    encoder.next(ctx.encode(OPTS))
    tx("(create b (x 2))")
    encoder.next(ctx.encode(OPTS))
    tx("(retire b)", "done with it")
    for n in range(2):  # the organizing window (1 tick) ends: b is retired
        ctx.observe("user_message", f"tick {n}")
    encoder.next(ctx.encode(OPTS))
    assert "(retired b)" in encoder.text
    tx("(restore b)", "needed again")
    request = encoder.next(ctx.encode(OPTS))
    assert encoder.last == "increment"
    last = request[request.rindex("(context-delta") :]
    line = next(x.strip() for x in last.splitlines() if "(frame b " in x)
    said = " ".join(PROTOCOL.split())
    derived = said.split(" derived: ")[1].split(" updated: ")[0]
    assert not line.startswith("(derived") or re.search(r"restor|back|return", derived), (
        line,
        derived,
    )


def test_cli_md_encoding_budget_default_is_not_the_contexts_own_under_a_budget_table() -> None:
    """docs/cli.md, morphz context encoding, says the configuration's `[budget]` keys apply over
    the context's budget, yet its option table says `--budget N` defaults to "the context's
    own" (and the option's --help: "instead of the context's configured one"): with
    `[budget] limit = 1000` and no --budget the compile's limit is 1000, not the context's.
    Expected: the table row states the default as the configuration's [budget] over the
    context's budget."""
    doc = DOCS.read_text(encoding="utf-8")
    section = doc[doc.index("## morphz context encoding") : doc.index("## morphz context budget")]
    row = next(line for line in section.splitlines() if line.startswith("| `--budget N`"))
    assert "context's own)" not in row or "[budget]" in row or "configuration" in row, row
