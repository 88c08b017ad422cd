"""The runtime configuration (morphz.toml): every bad value is an InputError that names the key
and what it takes, never a TypeError or ValueError from deeper down."""

from __future__ import annotations

from typing import Any

import pytest

import morphz
from morphz.capacity import Budget
from morphz.runtime.config import _settings


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"step_limit": "x"}, "step_limit must be a whole number of at least 1, not 'x'"),
        ({"step_limit": 0}, "step_limit must be a whole number of at least 1, not 0"),
        ({"step_limit": True}, "step_limit must be a whole number"),
        ({"model": 4}, "model must be a model spec"),
        ({"ask_default": "maybe"}, "ask_default must be deny or allow, not 'maybe'"),
        ({"tokenizer": "tiktoken"}, "tokenizer must be auto or estimate"),
        ({"exec_ends": "session"}, "exec_ends must be all or group, not 'session'"),
        ({"profile": ["a.md"]}, "profile must be a file path"),
        ({"budget": 5}, "[budget] must be a table"),
        ({"budget": {"windw": 1000}}, "unknown keys ['windw'] in [budget]"),
        ({"budget": {"window": "big"}}, "[budget] window must be a whole number of at least 1"),
        ({"budget": {"limit": 1.5}}, "[budget] limit must be a whole number of at least 1 (tok"),
        ({"budget": {"reserve": -1}}, "[budget] reserve must be a whole number of at least 0"),
        ({"budget": {"window": True}}, "[budget] window must be a whole number"),
        ({"policies": "allow"}, "[policies] must be a table"),
        ({"policies": {"exec": "sure"}}, "policy for exec must be allow, ask or deny"),
        ({"openai": "http://x"}, "[openai] must be a table"),
        ({"anthropic": {"prompt_cache": "2h"}}, "prompt_cache must be 5m, 1h or off"),
        ({"models": {"openai:x": {"delta": "yes"}}}, "delta must be true or false"),
        ({"surprise": 1}, "unknown configuration keys ['surprise']"),
    ],
)
def test_bad_configuration_is_an_input_error(data: dict[str, Any], says: str) -> None:
    with pytest.raises(morphz.InputError) as caught:
        _settings(data, {}, ())
    assert says in caught.value.message


def test_good_configuration() -> None:
    settings = _settings(
        {
            "model": "openai:m",
            "step_limit": 8,
            "ask_default": "allow",
            "tokenizer": "estimate",
            "budget": {"window": 32_000, "output_reserve": 2_000, "limit": 20_000},
            "policies": {"exec": "deny"},
            "openai": {"base_url": "http://localhost:11434/v1"},
        },
        {},
        (),
    )
    assert (settings.model, settings.step_limit, settings.ask_default) == ("openai:m", 8, True)
    assert settings.exact_tokens is False
    # the keys the table names, as Budget fields (applied over the context's own budget)
    assert settings.budget == {"window": 32_000, "output_reserve": 2_000, "configured": 20_000}
    assert settings.policies["exec"] == "deny"
    assert settings.openai_base_url == "http://localhost:11434/v1"


@pytest.mark.parametrize(
    "fields",
    [{"window": 1.5}, {"reserve": None}, {"configured": "10"}, {"notice_ratio": "half"}],
)
def test_a_budget_of_the_wrong_type_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(morphz.InputError, match="must be a"):
        Budget(**fields)
