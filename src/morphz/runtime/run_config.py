"""What an :class:`~morphz.runtime.engine.Engine` runs with: :class:`RuntimeConfig`, checked as
it is made, so a value of the wrong type is an InputError naming the field before an activation
writes anything (a str workspace is taken as the path it names, as every path of the API is)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from morphz.capacity import Budget, check_budget_keys
from morphz.checks import check_id, check_whole
from morphz.errors import InputError
from morphz.observe import check_setting
from morphz.runtime.tools.base import Tool

Approver = Callable[[Tool, dict[str, Any]], Awaitable[bool]]


PathArg = str | os.PathLike[str]  # what a path may be given as
_NO_KEYS: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True, init=False)
class RuntimeConfig:
    """The fields hold what they say; ``__init__`` is annotated with what it accepts for them
    (a str or other path-like for a path, a list or tuple of them for ``protected_paths``) and
    converts it once, so that a type checker accepts what the runtime does."""

    workspace: Path
    step_limit: int
    protected_paths: tuple[Path, ...]
    budget: Budget | None  # None: the context's stored budget
    budget_keys: Mapping[str, int]  # Budget fields set over it
    approver: Approver | None  # None: "ask" tools follow ask_default
    ask_default: bool  # non-interactive answer to "ask" (False: deny)
    delta: bool  # ContextDelta for this model
    delta_messages: bool  # ... with each increment in a message of its own
    max_output_tokens: int
    exact_tokens: bool  # count with the model's tokenizer when one is installed
    profile: str | None  # the harness definition bound to the agent (evaluation-profile)

    def __init__(  # noqa: PLR0917 - positional, as the dataclass-made one was
        self,
        workspace: PathArg,
        step_limit: int = 24,
        protected_paths: Sequence[PathArg] = (),
        budget: Budget | None = None,
        budget_keys: Mapping[str, int] = _NO_KEYS,
        approver: Approver | None = None,
        ask_default: bool = False,
        delta: bool = False,
        delta_messages: bool = True,
        max_output_tokens: int = 4096,
        exact_tokens: bool = True,
        profile: str | None = None,
    ) -> None:
        given = dict(locals())
        del given["self"]
        for name, value in given.items():  # frozen: each field is set once, here
            object.__setattr__(self, name, value)
        object.__setattr__(self, "workspace", _path(workspace, "workspace"))
        object.__setattr__(self, "protected_paths", _paths(protected_paths))
        if budget_keys is _NO_KEYS:
            object.__setattr__(self, "budget_keys", {})
        self._check()

    def _check(self) -> None:
        check_whole(
            self.step_limit, "RuntimeConfig step_limit", 1, unit="model calls per activation"
        )
        check_whole(self.max_output_tokens, "RuntimeConfig max_output_tokens", 1, unit="tokens")
        if self.budget is not None:
            check_setting(self.budget, "budget")
        check_budget_keys(self.budget_keys, "RuntimeConfig budget_keys")
        if self.approver is not None and not callable(self.approver):
            raise InputError(
                f"RuntimeConfig approver is an async function (tool, args) -> bool, or None, "
                f"not {self.approver!r}"
            )
        for name in ("ask_default", "delta", "delta_messages", "exact_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(
                    f"RuntimeConfig {name} is True or False, not {getattr(self, name)!r}"
                )
        if self.profile is not None and not isinstance(self.profile, str):
            raise InputError(f"RuntimeConfig profile is text or None, not {self.profile!r}")


def _paths(paths: object) -> tuple[Path, ...]:
    if not isinstance(paths, Sequence) or isinstance(paths, str | bytes):
        raise InputError(
            f"RuntimeConfig protected_paths is a tuple or list of paths, not {type(paths).__name__}"
        )
    return tuple(_path(p, "protected_paths") for p in paths)


def _path(value: object, name: str) -> Path:
    if not isinstance(value, str | os.PathLike) or not str(value):
        raise InputError(
            f"RuntimeConfig {name} takes a folder or file path (a Path or a str), not {value!r}"
        )
    return Path(value)


def check_run(prompt: object, session: str, objective: object) -> None:
    """What Engine.run is given, checked before anything is written (InputError)."""
    if not isinstance(prompt, str):
        raise InputError(f"Engine.run's prompt is the user message's text, not {prompt!r}")
    if objective is not None and not isinstance(objective, str):
        raise InputError(
            f"Engine.run's objective is text (what the activation is for) or None, "
            f"not {objective!r}"
        )
    check_id(session, "session id")
