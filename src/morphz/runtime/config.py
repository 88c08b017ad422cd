"""Runtime configuration: the TOML file and the environment, read here and nowhere deeper.

Files, later ones overriding earlier ones: ``~/.morphz/morphz.toml`` (the user's), then
``morphz.toml`` in the project folder (the current directory). The project's file comes with
whatever folder the user runs in (a cloned repository), so it may not decide where the user's
data and keys go or what runs without asking (:func:`_project_limits`): no ``base_url``, no
policy or ``ask_default`` of ``"allow"`` that loosens what the user's file (or the default)
gives, no ``profile`` outside the project folder. Secrets
come only from the environment (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``) and are never
written to events; ``OPENAI_BASE_URL`` points the OpenAI-compatible adapter at vLLM, Ollama,
llama.cpp server or a hosted endpoint, and wins over ``[openai] base_url`` (flags, then the
environment, then the files).

::

    model = "openai:gpt-4o-mini"      # or anthropic:NAME, scripted:PATH
    step_limit = 24
    ask_default = "deny"              # non-interactive answer to "ask" policies
    tokenizer = "auto"                # auto: exact counts when tiktoken knows the model; estimate
    profile = "agent.md"              # the harness definition bound to the agent (a UTF-8 file,
                                      # relative to this file): its evaluation-profile region
    exec_ends = "all"                 # all: exec ends every process its command started; group:
                                      # only the command's process group (setsid ones run on)
    [budget]                          # tokens, over the context's own budget (the keys named)
    window = 128000
    output_reserve = 8000
    limit = 60000
    reserve = 4000
    [policies]                        # allow | ask | deny, per tool ("allow": the user's file,
                                      # or a project's restating one that applies)
    exec = "ask"
    [openai]
    base_url = "http://localhost:11434/v1"   # the user's file only; OPENAI_BASE_URL wins
    [anthropic]
    prompt_cache = "5m"               # 5m | 1h | off: marks for Anthropic's prompt cache
    [models."openai:gpt-4o-mini"]     # per model spec
    delta = true                      # ContextDelta: requests extend the previous one
    delta_messages = true             # each increment its own user message (false: one message)
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from morphz.checks import check_whole
from morphz.errors import InputError
from morphz.runtime.models.anthropic_messages import PROMPT_CACHE
from morphz.runtime.models.base import Model
from morphz.runtime.models.sdk import check_base_url
from morphz.runtime.tools.base import POLICIES, Policy

DEFAULT_POLICIES: dict[str, Policy] = {
    "list_files": "allow",
    "search_files": "allow",
    "read_file": "allow",
    "write_file": "ask",
    "edit_file": "ask",
    "exec": "ask",
}


@dataclass(frozen=True, slots=True)
class Settings:
    model: str | None = None  # None: no model is configured
    step_limit: int = 24
    ask_default: bool = False
    budget: dict[str, int] = field(default_factory=dict)  # Budget fields the [budget] table sets
    policies: dict[str, Policy] = field(default_factory=lambda: dict(DEFAULT_POLICIES))
    openai_base_url: str | None = None
    anthropic_base_url: str | None = None
    anthropic_prompt_cache: str = "5m"
    exact_tokens: bool = True  # tokenizer = "auto" (False: "estimate")
    # the bound harness definition's file (protected from the agent's writes), read only when
    # it is used (profile_text): --profile replaces it unread
    profile_path: Path | None = None
    profile_source: Path | None = None  # ... and the configuration file that names it
    files: tuple[Path, ...] = ()  # the configuration files that were read (protected paths)
    # the file each configured policy (a tool's name, or "ask_default") comes from: what a note
    # about a denied call names (a project's "ask" wins over the user's "allow")
    policy_sources: dict[str, Path] = field(default_factory=dict)
    delta_models: frozenset[str] = frozenset()  # model specs with ContextDelta turned on
    delta_inline: frozenset[str] = frozenset()  # ... whose increments share the seed's message
    exec_ends_all: bool = True  # exec_ends = "all" (False: "group": setsid processes run on)

    def profile_text(self) -> str | None:
        """The configured profile's text (None: no ``profile`` is configured); an InputError
        that names the configuration file setting it when it cannot be read."""
        if self.profile_path is None:
            return None
        try:
            return read_profile(self.profile_path)
        except InputError as exc:
            raise InputError(
                f"{exc.message} (profile = {str(self.profile_path)!r} in {self.profile_source}): "
                f"write the file, change or remove the setting in {self.profile_source}, or give "
                "--profile FILE to use another"
            ) from exc

    def delta_for(self, spec: str) -> bool:
        """Whether requests to the model ``spec`` (e.g. ``openai:NAME``) use ContextDelta."""
        return spec in self.delta_models

    def delta_messages_for(self, spec: str) -> bool:
        """Whether ContextDelta increments to ``spec`` go in messages of their own."""
        return spec not in self.delta_inline


def config_paths(home: Path, project: Path) -> list[Path]:
    """Where the configuration is read from, whether or not the files exist yet (an agent must
    not be able to create one: the next run would read it)."""
    return [home / ".morphz" / "morphz.toml", project / "morphz.toml"]


def config_files(home: Path, project: Path) -> list[Path]:
    return [p for p in config_paths(home, project) if p.is_file()]


def _read(path: Path) -> dict[str, Any]:
    try:  # utf-8-sig: a byte-order mark (an editor's "UTF-8 with BOM") is no statement
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise InputError(
            f"cannot read the configuration {path}: it is not UTF-8 ({exc.reason} at byte "
            f"{exc.start}); save it as UTF-8"
        ) from exc
    except RecursionError:  # arrays or inline tables nested thousands deep
        raise InputError(
            f"cannot read the configuration {path}: its arrays or tables are nested too deeply "
            "for a configuration; fix the file"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read the configuration {path}: {exc}") from exc


def load(home: Path, project: Path, env: Mapping[str, str]) -> Settings:
    """Settings from the configuration files and the environment. The project's file is held
    to :func:`_project_limits` (unless it is the user's own file, reached from ~/.morphz)."""
    merged: dict[str, Any] = {}
    files = config_files(home, project)
    user = config_paths(home, project)[0]
    source: Path | None = None  # the file whose ``profile`` applies
    asks: dict[str, Path] = {}  # the file each policy (and ask_default) that applies comes from
    for path in files:
        data = _read(path)
        _known_keys(data, f" in {path}")  # named with its file: there may be two
        if isinstance(data.get("profile"), str):  # a path relative to the file that names it
            data["profile"] = str(path.parent / Path(data["profile"]).expanduser())
        if not _same_file(path, user):
            _project_limits(data, path, user, _Before(merged, env))
        if "profile" in data:
            source = path
        policies = data.get("policies")
        asks |= dict.fromkeys(policies if isinstance(policies, dict) else (), path)
        asks |= dict.fromkeys(("ask_default",) if "ask_default" in data else (), path)
        merged = _merged(merged, data)
    return replace(_settings(merged, env, tuple(files), source), policy_sources=asks)


def _same_file(path: Path, other: Path) -> bool:
    try:
        return path.samefile(other)
    except OSError:  # ``other`` does not exist: ``path`` (which does) is another file
        return False


@dataclass(frozen=True, slots=True)
class _Before:
    """What applies before a project's file is read: the user's file (``merged``) over the
    defaults, and the environment."""

    merged: dict[str, Any]
    env: Mapping[str, str]

    def allows(self, tool: str) -> bool:
        """Whether ``tool`` runs without asking already (the user's policy, else the default)."""
        policies = self.merged.get("policies")
        given = policies.get(tool) if isinstance(policies, dict) else None
        return (given if given is not None else DEFAULT_POLICIES.get(tool)) == "allow"


def _project_limits(data: dict[str, Any], path: Path, user: Path, before: _Before) -> None:
    """Refuse what a project's morphz.toml (a cloned repository's) may not set: where the
    user's key and requests go (a ``base_url``, even one OPENAI_BASE_URL overrides), what runs
    without asking (a policy or ``ask_default`` of ``"allow"`` where the user's file, else the
    default, does not allow it already; ``"ask"`` and ``"deny"`` only make things stricter),
    and a ``profile`` outside the project folder (it is sent with every request:
    ``~/.ssh/id_rsa``). Values of the wrong type are left to the checks every file gets."""
    _project_base_urls(data, path, user, before.env)
    policies = data.get("policies")
    allowed = [t for t, p in policies.items() if p == "allow"] if isinstance(policies, dict) else []
    for tool in allowed:
        if not before.allows(str(tool)):
            _refuse(path, f'[policies] {tool} = "allow"', _UNASKED, user, "")
    if data.get("ask_default") == "allow" and before.merged.get("ask_default") != "allow":
        _refuse(path, 'ask_default = "allow"', _UNASKED, user, "")
    if isinstance(data.get("profile"), str):
        _project_profile(data["profile"], path, user)


def _project_base_urls(
    data: dict[str, Any], path: Path, user: Path, env: Mapping[str, str]
) -> None:
    """Refuse a project file's ``[openai]`` or ``[anthropic]`` ``base_url``. One that
    OPENAI_BASE_URL overrides could never be used, but a file that tries to send the user's
    keys elsewhere is refused all the same (ignoring it would hide it): saying so."""
    for provider, alternative in (("openai", " or set OPENAI_BASE_URL"), ("anthropic", "")):
        section = data.get(provider)
        if not isinstance(section, dict) or "base_url" not in section:
            continue
        if provider == "openai" and env.get("OPENAI_BASE_URL"):
            raise InputError(
                f"{path} sets [openai] base_url: a project's morphz.toml may not set where "
                "requests and keys go. OPENAI_BASE_URL is set, so the file's value would be "
                f"ignored anyway: remove [openai] base_url from {path}"
            )
        _refuse(path, f"[{provider}] base_url", "where requests and keys go", user, alternative)


def _project_profile(profile: str, path: Path, user: Path) -> None:
    """A project file's ``profile`` (made absolute) is in the project's folder, symbolic links
    followed (``realpath``, which leaves a loop as it is: reading it fails later)."""
    folder = Path(os.path.realpath(path.parent))
    if not Path(os.path.realpath(profile)).is_relative_to(folder):
        what = f"a profile outside its folder {folder} (it is sent with every request)"
        # no "or give --profile": the file is refused before the option would replace it
        _refuse(path, f"profile = {profile!r}", what, user, "")


_UNASKED = (
    "what runs without asking (a project's file may only make policies stricter, ask or deny, "
    "or restate an allow that applies already)"
)


def _refuse(path: Path, setting: str, what: str, user: Path, alternative: str) -> NoReturn:
    raise InputError(
        f"{path} sets {setting}: a project's morphz.toml may not set {what}; put it in your "
        f"own {user}{alternative}, or remove it from {path}"
    )


def _known_keys(data: dict[str, Any], where: str) -> None:
    unknown = set(data) - _KEYS
    if unknown:
        use = ", ".join(sorted(_KEYS))
        raise InputError(f"unknown configuration keys {sorted(unknown)}{where}: use {use}")


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``, table by table at every depth: a later file's [models."SPEC"]
    changes the keys it names and keeps the others, as its [budget] does."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


_KEYS = frozenset(
    {"model", "step_limit", "ask_default", "tokenizer", "profile", "budget", "policies", "openai",
     "anthropic", "models", "exec_ends"}
)  # fmt: skip


def _settings(
    data: dict[str, Any],
    env: Mapping[str, str],
    files: tuple[Path, ...],
    source: Path | None = None,
) -> Settings:
    _known_keys(data, "")
    policies = dict(DEFAULT_POLICIES)
    for tool, policy in _table(data, "policies", 'exec = "ask"').items():
        if policy not in POLICIES:
            raise InputError(f"policy for {tool} must be allow, ask or deny, not {policy!r}")
        policies[str(tool)] = policy
    anthropic = _anthropic(data)
    openai = _text_table(data, "openai", ("base_url",), 'base_url = "http://localhost:11434/v1"')
    if openai.get("base_url"):
        check_base_url(openai["base_url"], "[openai] base_url")
    profile = _profile_path(data.get("profile"))
    return Settings(
        model=_model(data.get("model")),
        step_limit=_step_limit(data.get("step_limit", 24)),
        ask_default=_one_of(data, "ask_default", ("deny", "allow")) == "allow",
        budget=_budget(_table(data, "budget", "window = 128000")),
        policies=policies,
        openai_base_url=env.get("OPENAI_BASE_URL") or openai.get("base_url"),  # env first
        anthropic_base_url=anthropic.get("base_url"),
        anthropic_prompt_cache=anthropic.get("prompt_cache", PROMPT_CACHE[0]),
        exact_tokens=_one_of(data, "tokenizer", ("auto", "estimate")) == "auto",
        profile_path=profile,
        profile_source=source,
        files=files,
        delta_models=_delta_models(data.get("models", {}), "delta", False),
        delta_inline=_delta_models(data.get("models", {}), "delta_messages", True),
        exec_ends_all=_one_of(data, "exec_ends", ("all", "group")) == "all",
    )


def _one_of(data: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
    """``key``'s value, one of ``choices`` (the first is the default)."""
    value = data.get(key, choices[0])
    if value not in choices:
        raise InputError(f"{key} must be {' or '.join(choices)}, not {value!r}")
    return str(value)


def _model(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise InputError(f'model must be a model spec, e.g. model = "openai:NAME", not {value!r}')
    if value is not None:
        _spec_in(value, f"model = {value!r}")
    return value


def _spec_in(spec: str, where: str) -> None:
    """``spec``, found at ``where`` in a configuration file, checked as a model spec (a bare
    name or a misspelled prefix would never match a model the runtime makes)."""
    try:
        check_model_spec(spec)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from exc


def _step_limit(value: Any) -> int:
    return check_whole(value, "step_limit", 1)


def _profile_path(value: Any) -> Path | None:
    if value is not None and not isinstance(value, str):
        raise InputError(f'profile must be a file path, e.g. profile = "agent.md", not {value!r}')
    return None if value is None else Path(value)


def _table(data: dict[str, Any], key: str, example: str) -> dict[str, Any]:
    """The ``[key]`` table of the configuration (empty when absent)."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise InputError(f"[{key}] must be a table, e.g. [{key}] {example}, not {value!r}")
    return value


def _text_table(
    data: dict[str, Any], key: str, keys: tuple[str, ...], example: str
) -> dict[str, str]:
    """The ``[key]`` table, whose values are all text and whose keys are ``keys`` (a typo such
    as base-url would otherwise send the context to the default endpoint)."""
    section = _table(data, key, example)
    unknown = set(section) - set(keys)
    if unknown:
        raise InputError(f"unknown keys {sorted(unknown)} in [{key}]: use {', '.join(keys)}")
    for name, value in section.items():
        if not isinstance(value, str):
            raise InputError(f"[{key}] {name} must be text, e.g. [{key}] {example}, not {value!r}")
    return dict(section)


def _budget(section: dict[str, Any]) -> dict[str, int]:
    """The ``[budget]`` table: window, output_reserve, limit, reserve (tokens), as the
    :class:`Budget` fields it sets. Only those: the others stay the context's own
    (``RuntimeConfig.budget_keys``), so whether they make a budget is known only with it."""
    spec = dict(section)
    unknown = set(spec) - {"window", "output_reserve", "limit", "reserve"}
    if unknown:
        use = "window, output_reserve, limit, reserve"
        raise InputError(f"unknown keys {sorted(unknown)} in [budget]: use {use}")
    for key, value in spec.items():  # named as the file names them, before Budget checks more
        check_whole(value, f"[budget] {key}", 1 if key in ("window", "limit") else 0, unit="tokens")
    if "limit" in spec:
        spec["configured"] = spec.pop("limit")
    return spec


PROFILE_CAP = 1 << 20  # bytes: a profile goes into every request; 1 MiB is beyond any window


def read_profile(path: Path) -> str:
    """The harness definition in ``path``: UTF-8 text of at most :data:`PROFILE_CAP` bytes, not
    empty (InputError otherwise). No more than the cap and one byte is read (``/dev/zero`` never
    ends); a pipe (``--profile <(...)``) is read as a file is. Line ends read as ``\n``."""
    try:
        with path.open("rb") as file:
            data = file.read(PROFILE_CAP + 1)
        if len(data) > PROFILE_CAP:
            raise InputError(
                f"the profile {path} is larger than {PROFILE_CAP:,} bytes (1 MiB), more than any "
                "request has room for: give a shorter harness definition"
            )
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the profile {path}: {exc}") from exc
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as read_text read it
    if not text.strip():
        raise InputError(f"the profile {path} is empty: write the agent's harness definition in it")
    return text


def _anthropic(data: dict[str, Any]) -> dict[str, str]:
    """The ``[anthropic]`` table: ``base_url`` and ``prompt_cache`` (5m, 1h or off)."""
    section = _text_table(data, "anthropic", ("base_url", "prompt_cache"), 'prompt_cache = "1h"')
    cache = section.get("prompt_cache", PROMPT_CACHE[0])
    if cache not in PROMPT_CACHE:
        raise InputError(
            f"[anthropic] prompt_cache must be {', '.join(PROMPT_CACHE[:-1])} or "
            f"{PROMPT_CACHE[-1]}, not {cache!r}"
        )
    if section.get("base_url"):
        check_base_url(section["base_url"], "[anthropic] base_url")
    return section


def _delta_models(models: Any, key: str, default: bool) -> frozenset[str]:
    """The model specs whose ``[models."SPEC"]`` section sets ``key`` (``delta`` or
    ``delta_messages``, both true or false) to the opposite of ``default``."""
    if not isinstance(models, dict):
        raise InputError('models must be a table of model sections: [models."openai:NAME"]')
    out: set[str] = set()
    for spec, section in models.items():
        if not isinstance(section, dict):
            raise InputError(f'[models."{spec}"] must be a table, e.g. delta = true')
        _spec_in(str(spec), f'[models."{spec}"]')
        unknown = set(section) - {"delta", "delta_messages"}
        if unknown:
            raise InputError(
                f'unknown keys {sorted(unknown)} in [models."{spec}"]: use delta, delta_messages'
            )
        value = section.get(key, default)
        if not isinstance(value, bool):
            raise InputError(f'[models."{spec}"] {key} must be true or false')
        if value != default:
            out.add(str(spec))
    return frozenset(out)


MODEL_KINDS = ("openai", "anthropic", "scripted")  # the model spec's prefixes


def check_model_spec(spec: str) -> tuple[str, str]:
    """``spec``'s kind and name when it is ``openai:NAME``, ``anthropic:NAME`` or
    ``scripted:PATH``; an InputError naming the prefixes otherwise (a typo such as
    ``opnai:gpt-4o``, or a name without a prefix)."""
    kind, colon, name = spec.partition(":")
    if spec == "builtin":  # README's evaluation scripts take it: exec and chat do not
        raise InputError(
            "model spec 'builtin' is the evaluation scripts' own deterministic agent "
            "(benchmarks/*_eval.py --model builtin, docs/evals.md), not a model exec and chat "
            "can run: to run offline give scripted:PATH (a JSON list of the model's steps, "
            'docs/cli.md "A scripted model"), else openai:NAME or anthropic:NAME'
        )
    if not colon or kind not in MODEL_KINDS:
        prefixes = ", ".join(f"{k}:" for k in MODEL_KINDS)
        if colon:
            raise InputError(
                f"unknown model kind {kind!r} in the model spec {spec!r}: use one of the "
                f"prefixes {prefixes} (e.g. openai:gpt-4o-mini)"
            )
        guess = "anthropic" if spec.startswith("claude") else "openai"
        example = f"{guess}:{spec}" if spec.strip() else "openai:gpt-4o-mini"
        what = "names no provider" if spec.strip() else "is empty"
        raise InputError(
            f"model spec {spec!r} {what}: write PREFIX:NAME with one of the prefixes "
            f"{prefixes}, e.g. {example}"
        )
    if not name:
        what = "PATH" if kind == "scripted" else "NAME"
        raise InputError(f"model spec {spec!r} needs a name after the prefix: {kind}:{what}")
    return kind, name


def model_name(spec: str) -> str:
    """The name the runtime gives the model of ``spec`` (what its requests' encodings state,
    and what its calibration is kept under): the spec itself, a scripted model's by its file's
    name (ScriptedModel.from_file)."""
    kind, name = check_model_spec(spec)
    if kind != "scripted":
        return spec
    from morphz.runtime.models.scripted import script_name

    return script_name(name)


def make_model(spec: str, settings: Settings, env: Mapping[str, str]) -> Model:
    """``openai:NAME``, ``anthropic:NAME`` or ``scripted:PATH``."""
    kind, name = check_model_spec(spec)
    if kind == "scripted":
        from morphz.runtime.models.scripted import ScriptedModel

        return ScriptedModel.from_file(name)
    if kind == "openai":
        from morphz.runtime.models.openai_compat import OpenAIChatModel

        key = _key(env, "OPENAI_API_KEY") or ("none" if settings.openai_base_url else None)
        if key is None:
            raise InputError(
                "set OPENAI_API_KEY (or OPENAI_BASE_URL / [openai] base_url for a local server)"
            )
        if settings.openai_base_url:  # [openai] base_url was checked as the file was read
            check_base_url(settings.openai_base_url, "OPENAI_BASE_URL")
        return OpenAIChatModel(name, base_url=settings.openai_base_url, api_key=key)
    if kind == "anthropic":
        from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel

        key = _key(env, "ANTHROPIC_API_KEY")  # empty (an unset CI secret): missing
        if key is None:
            raise InputError("set ANTHROPIC_API_KEY to use anthropic:NAME")
        return AnthropicMessagesModel(
            name,
            base_url=settings.anthropic_base_url,
            api_key=key,
            prompt_cache=settings.anthropic_prompt_cache,
        )
    raise AssertionError(kind)  # MODEL_KINDS names no other


def _key(env: Mapping[str, str], name: str) -> str | None:
    """The API key in ``env[name]`` without the blanks around it (a secret mounted from a file,
    an env file an editor ended with a line break); None when it is unset or blank."""
    return env.get(name, "").strip() or None
