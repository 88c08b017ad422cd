"""Retries, backoff and HTTP error classification shared by the provider adapters.

The adapters build their SDK clients with ``max_retries=0`` and retry here instead, so every
retry is visible (an ``on_retry`` callback, an injectable ``sleep``) and testable. An adapter
turns each SDK exception into a :class:`Failure` (the typed :class:`ProviderError` to raise, and
whether trying again can help) in exactly one place, and an answer with a success status whose
body is an error too (:func:`body_failure`, as the status it states); :func:`call_with_retries`
does the rest:

- rate limits (429), request timeouts (408), server errors (5xx, including 529 "overloaded")
  and connection errors are retried up to ``max_retries`` times, waiting the server's
  ``Retry-After`` when it sent one above 0 s, otherwise an exponential backoff with jitter;
- everything else (authentication, context too long, other 4xx) is raised at once;
- the translated error is raised in place of the SDK exception, not chained to it: the SDK's
  exception holds the request, whose headers hold the API key, and its text may quote the key
  (any traceback of the error would print it). What it said, the key hidden, is kept as a note
  on the error (``Failure.cause``: tracebacks show it). The error's message says how many
  retries were made, and how long the provider asked to wait when that was more than is waited
  here (the engine records and prints only the message).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TypeVar

from morphz.runtime.models.base import (
    AuthError,
    BadResponseError,
    ContextTooLongError,
    ProviderError,
    RateLimitError,
)
from morphz.runtime.models.redaction import cut, hidden

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[object]]

# How the common servers say "the input does not fit the context window" (lower case).
# OpenAI: code context_length_exceeded, "This model's maximum context length is N tokens".
# vLLM: "maximum context length", "is too long to fit into the model", "longer than the maximum
# model length". Ollama: "input length exceeds maximum context length", "prompt too long".
# llama.cpp server: exceed_context_size_error, "exceeds the available context size".
# Anthropic: "prompt is too long: N tokens > M maximum", 413 request_too_large, and "input length
# and `max_tokens` exceed context limit: N + K > M". Any HTTP 413 (a proxy's body-size limit).
# Gemini: "The input token count (N) exceeds the maximum number of tokens allowed (M)".
# Hugging Face TGI (HTTP 422): "`inputs` tokens + `max_new_tokens` must be <= W. Given: N
# `inputs` tokens and K `max_new_tokens`", "`inputs` must have less than M tokens. Given: N".
# LM Studio: "Trying to keep the first N tokens when context the overflows. However, the model is
# loaded with context length of only M tokens", "The number of tokens to keep from the initial
# prompt is greater than the context length (n_keep: N>= n_ctx: M)", "Cannot truncate prompt with
# n_keep (N) >= n_ctx (M)".
_CONTEXT_TOO_LONG = re.compile(
    r"context_length_exceeded|maximum context length|context length exceeded"
    r"|exceeds? (?:the )?(?:maximum|max|available) context|exceed_context_size"
    r"|context window|too long to fit|longer than the maximum model length"
    r"|prompt is too long|prompt too long|input is too long|too many tokens"
    r"|input length exceeds|reduce the length of the messages|request_too_large"
    r"|exceed context limit|exceeds the maximum number of tokens"
    r"|tokens \+ `max_new_tokens` must be|`inputs` must have less than"
    r"|context the overflows|context length of only|tokens to keep from the initial prompt"
    r"|cannot truncate prompt with n_keep"
)
_TOO_LONG_STATUSES = frozenset({400, 422})  # 422: TGI's validation errors
_RETRY_STATUSES = frozenset({408, 409, 429})
_RETRY_ADVICE = "run again later"
_MESSAGE_LIMIT = 600
_TAGS = re.compile(r"<[^>]*>")


@dataclass(frozen=True, slots=True)
class Failure:
    """A provider exception translated: the error to raise and whether a retry can help."""

    error: ProviderError
    retryable: bool = False
    retry_after: float | None = None
    advice: str = _RETRY_ADVICE  # what to do once the retries are spent
    cause: str = ""  # what the provider's exception said, the key hidden (a note on the error)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry ``attempt`` (0-based): ``base * factor**attempt`` capped at
    ``max_delay``, stretched by up to ``jitter`` (a fraction) at random so that concurrent
    activations do not retry in lockstep. A server's Retry-After above 0 s is used as given; one
    longer than ``max_retry_after`` is not waited for (the error is raised for the caller to
    decide); one of 0 s or less, or not a number (NaN, infinity), is not a wait: the backoff is
    waited instead (an overloaded server that says "now" would get every retry at once)."""

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 30.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    rand: Callable[[], float] = field(default=random.random)

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            return retry_after if retry_after <= self.max_retry_after else None
        delay = min(self.max_delay, self.base * self.factor**attempt)
        return delay * (1.0 + self.jitter * self.rand())


@dataclass(frozen=True, slots=True)
class Retry:
    """What :func:`call_with_retries` tells ``on_retry`` before it sleeps."""

    attempt: int  # 1 for the first retry
    delay: float
    error: ProviderError


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    translate: Callable[[Exception], Failure | None],
    *,
    max_retries: int,
    sleep: Sleep,
    backoff: Backoff,
    on_retry: Callable[[Retry], None] | None = None,
) -> T:
    """``await call()``; translate its exceptions and retry the retryable ones.

    ``translate`` returns ``None`` for exceptions that are not provider failures: those are
    re-raised unchanged.
    """
    attempt, waited = 0, 0.0
    while True:
        try:
            return await call()
        except Exception as exc:
            failure = translate(exc)
            if failure is None:
                raise
            delay = _next_delay(failure, attempt, max_retries, backoff)
        if delay is None:  # raised out of the except: not chained to the SDK's exception
            raise given_up(failure, attempt, waited, backoff)
        attempt, waited = attempt + 1, waited + delay
        if on_retry is not None:
            on_retry(Retry(attempt, delay, failure.error))
        await sleep(delay)


def given_up(failure: Failure, retries: int, waited: float, backoff: Backoff) -> ProviderError:
    """``failure``'s error, its message saying what waiting was tried and what to do next: the
    retries made, the wait the provider asked for when it is more than is waited here."""
    error, asked = failure.error, failure.retry_after
    said = []
    if retries:
        times = "retry" if retries == 1 else "retries"
        said.append(f"gave up after {retries} {times} ({waited:.0f} s)")
    if failure.retryable and asked is not None and asked > backoff.max_retry_after:
        said.append(f"the provider asks to wait {_seconds(asked)}: run again after that")
    elif retries:
        said[-1] += f": {failure.advice}"
    elif failure.retryable:  # no retry was allowed (max_retries 0)
        said.append(failure.advice)
    if said:
        restate(error, f"{error.message.rstrip('.')}; {'; '.join(said)}")
    if failure.cause:
        error.add_note(failure.cause)
    return error


def _seconds(wait: float) -> str:
    """``wait`` as the message states it: whole seconds, a huge one in short (1e+09 s)."""
    return f"{wait:.0f} s" if wait < 1e7 else f"{wait:.3g} s"


def restate(error: ProviderError, message: str) -> None:
    """Make ``message`` ``error``'s message (what the engine records and prints)."""
    error.message = message
    error.args = (message,)


def _next_delay(failure: Failure, attempt: int, max_retries: int, backoff: Backoff) -> float | None:
    if not failure.retryable or attempt >= max_retries:
        return None
    return backoff.delay(attempt, failure.retry_after)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date);
    None when neither states a wait above 0 s (0, a negative number, a date already past, NaN or
    infinity: :class:`Backoff` then waits its own delay)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            wait = _a_wait(float(millis) / 1000.0)
        except ValueError:
            wait = None
        if wait is not None:
            return wait
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return _a_wait(float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return _a_wait(when.timestamp() - (time.time() if now is None else now))


def _a_wait(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) and seconds > 0 else None


# The numbers too-long refusals state, each form with the (used, maximum) input tokens they give:
# where the window must also hold the output budget, the input that fits is the window less it.
_SHARE_FORMS: tuple[tuple[re.Pattern[str], Callable[..., tuple[int, int]]], ...] = (
    # Anthropic: "input length and `max_tokens` exceed context limit: N + K > W"
    (re.compile(r"(\d+) \+ (\d+) > (\d+)"), lambda n, k, w: (n, w - k)),
    # vLLM: "maximum context length is W tokens. However, you requested T tokens (N in the
    # messages, K in the completion)"
    (
        re.compile(
            r"maximum context length is (\d+) tokens\. However, you requested \d+ tokens \((\d+) "
            r"in the messages, (\d+) in the completion\)"
        ),
        lambda w, n, k: (n, w - k),
    ),
    # TGI: "`inputs` tokens + `max_new_tokens` must be <= W. Given: N `inputs` tokens and K
    # `max_new_tokens`"
    (
        re.compile(r"must be <= (\d+)\. Given: (\d+) `inputs` tokens and (\d+) `max_new_tokens`"),
        lambda w, n, k: (n, w - k),
    ),
    # vLLM: "'max_tokens' or 'max_completion_tokens' is too large: K. This model's maximum
    # context length is W tokens and your request has N input tokens (K > W - N)"
    (
        re.compile(
            r"is too large: (\d+)\. This model's maximum context length is (\d+) tokens and your "
            r"request has (\d+) input tokens"
        ),
        lambda k, w, n: (n, w - k),
    ),
    # OpenRouter: "maximum context length is W tokens. However, you requested about T tokens
    # (X of text input, Y of tool input, K in the output)": the input is T - K
    (
        re.compile(
            r"maximum context length is (\d+) tokens\. However, you requested about (\d+) tokens "
            r"\([^()]*?(\d+) in the output\)"
        ),
        lambda w, t, k: (t - k, w - k),
    ),
    # Anthropic: "prompt is too long: N tokens > M maximum"
    (re.compile(r"(\d+) tokens > (\d+) maximum"), lambda n, m: (n, m)),
    # OpenAI, vLLM and others of their wording (vLLM today: "However, your request has N input
    # tokens")
    (
        re.compile(
            r"maximum context length is (\d+) tokens\. However, (?:your messages resulted in|you "
            r"requested|your request has) (\d+) (?:input )?tokens"
        ),
        lambda m, n: (n, m),
    ),
    # llama.cpp server: "request (N tokens) exceeds the available context size (W tokens)"
    (
        re.compile(r"\((\d+) tokens\) exceeds the available context size \((\d+) tokens\)"),
        lambda n, m: (n, m),
    ),
    # Gemini: "The input token count (N) exceeds the maximum number of tokens allowed (M)"
    (
        re.compile(
            r"input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)\)"
        ),
        lambda n, m: (n, m),
    ),
    # TGI: "`inputs` must have less than M tokens. Given: N"
    (re.compile(r"must have less than (\d+) tokens\. Given: (\d+)"), lambda m, n: (n, m)),
    # OpenAI, HTTP 429 (below): "Limit M, Requested N"
    (re.compile(r"Limit (\d+), Requested (\d+)"), lambda m, n: (n, m)),
    # llama.cpp server's fields, as error_text adds them (its older message states no numbers)
    (re.compile(r"n_prompt_tokens=(\d+), n_ctx=(\d+)"), lambda n, m: (n, m)),
)
# OpenAI, HTTP 429: "Request too large for MODEL ... (TPM): Limit 30000, Requested 31538. The
# input or output tokens must be reduced"
_TOO_LARGE_FOR_RATE = re.compile(r"request too large|must be reduced", re.IGNORECASE)
BACKOFF = 0.75  # of a refused request, when its refusal states no numbers


# LM Studio states the tokens it must keep (the start of the prompt: the system message and the
# first user message, a ContextDelta seed without its increments) and the window: (kept, window).
# The kept tokens are at most the input, so window / kept is the most of it the provider would
# take, not the share itself.
_KEPT_FORMS = (
    re.compile(
        r"keep the first (\d+) tokens when (?:the )?context (?:the )?overflows\. However, the "
        r"model is loaded with (?:a )?context length of only (\d+) tokens"
    ),
    re.compile(r"n_keep: ?(\d+) ?>= ?n_ctx: ?(\d+)"),
    re.compile(r"n_keep \((\d+)\) >= n_ctx \((\d+)\)"),
)


def refused_share(text: str, default: float = BACKOFF) -> float:
    """The share of a refused request the provider would have taken: maximum / used from the
    numbers its too-long message states (within 0.1-0.95), else ``default``. Where the numbers
    bound the share from above (LM Studio's), the lower of the bound and ``default``."""
    for form, read in _SHARE_FORMS:
        found = form.search(text)
        if found is not None:
            used, maximum = read(*(int(g) for g in found.groups()))
            return min(max(maximum / used, 0.1), 0.95) if used > 0 and maximum > 0 else default
    for form in _KEPT_FORMS:
        found = form.search(text)
        if found is not None:
            kept, window = (int(g) for g in found.groups())
            return min(max(window / kept, 0.1), default) if 0 < window < kept else default
    return default


def is_context_too_long(text: str) -> bool:
    """Whether an error text says the input does not fit the model's context window."""
    return _CONTEXT_TOO_LONG.search(text.lower()) is not None


def error_text(message: str, body: object, key: str = "") -> str:
    """The provider's own error message, with its type and code, as one short line, with the
    API ``key`` hidden (before the line is cut to its length: :mod:`.redaction`).

    ``body`` is the decoded error body as the SDK kept it (an OpenAI-style ``error`` object, an
    Anthropic ``{"type": "error", "error": {...}}``, or the raw text); ``message`` is the SDK's
    message, used when the body says nothing readable."""
    said, tags = _body_parts(body)
    text = hidden(said or message, key)  # (a key the server's own cut went through, too)
    if tags:
        text += f" [{', '.join(tags)}]"
    text = " ".join(_TAGS.sub(" ", text).split()) if text.lstrip().startswith("<") else text
    return cut(" ".join(text.split()), _MESSAGE_LIMIT, key)


def _body_parts(body: object, depth: int = 0) -> tuple[str | None, list[str]]:
    if isinstance(body, list) and len(body) == 1:  # Gemini: [{"error": {...}}]
        body = body[0]
    if isinstance(body, str):
        return body, []
    if not isinstance(body, dict):
        return None, []
    inner = body.get("error")
    if isinstance(inner, str):
        return inner, []
    if isinstance(inner, dict):
        body = inner
    said = body.get("message")
    said = said if isinstance(said, str) else json.dumps(body, default=str)
    tags = [str(body[k]) for k in ("type", "code") if body.get(k) not in (None, "")]
    # llama.cpp server: the tokens of a too-long prompt and the window, beside its message
    tags += [f"{k}={body[k]}" for k in _COUNT_FIELDS if isinstance(body.get(k), int)]
    upstream = _upstream(body.get("metadata"), depth)
    return (f"{said} ({upstream})" if upstream else said), tags


_COUNT_FIELDS = ("n_prompt_tokens", "n_ctx")


def _upstream(metadata: object, depth: int) -> str | None:
    """What the provider behind a gateway said: OpenRouter's ``metadata.raw`` (the upstream's
    body, as JSON text, an object or plain text), with ``metadata.provider_name``."""
    if not isinstance(metadata, dict) or depth > 1:
        return None
    raw = metadata.get("raw")
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):  # not JSON: the upstream's plain text
            raw = json.loads(raw)
    said, tags = _body_parts(raw, depth + 1)
    if not said or not said.strip():
        return None
    if said.lstrip().startswith("<"):  # an HTML page
        said = " ".join(_TAGS.sub(" ", said).split())
    said += f" [{', '.join(tags)}]" if tags else ""
    name = metadata.get("provider_name")
    return f"{name} said: {said}" if isinstance(name, str) and name else f"upstream: {said}"


def status_failure(
    status: int,
    text: str,
    headers: Mapping[str, str],
    *,
    provider: str,
    where: str,
    auth_hint: str,
    answered: str = "",
) -> Failure:
    """Translate an HTTP error status from ``provider`` at ``where`` (its base URL); ``answered``
    says how it came when that was not as the HTTP status (default: "HTTP <status>")."""
    said = f"{provider} at {where} answered {answered or f'HTTP {status}'}: {text}"
    if status in (401, 403):
        return Failure(AuthError(f"{said}. Check the API key and the base URL ({auth_hint})."))
    if status == 413 or (status in _TOO_LONG_STATUSES and is_context_too_long(text)):
        return Failure(ContextTooLongError(f"the input is too long for the model: {said}"))
    retry_after = parse_retry_after(headers)
    if status == 429 and _TOO_LARGE_FOR_RATE.search(text):
        # OpenAI: a request over the tokens-per-minute limit is refused however long one waits;
        # a smaller request is the way on
        return Failure(ContextTooLongError(f"the input is too large for the rate limit: {said}"))
    if status == 429:
        if "insufficient_quota" in text:  # OpenAI: an exhausted quota does not come back by waiting
            said += ". The account's quota is used up: check its plan and billing"
            return Failure(RateLimitError(f"rate limited: {said}", retry_after), False, retry_after)
        return Failure(RateLimitError(f"rate limited: {said}", retry_after), True, retry_after)
    if status in _RETRY_STATUSES or status >= 500:
        advice = f"{_RETRY_ADVICE} (the provider is overloaded or failing)"
        return Failure(ProviderError(f"the provider failed: {said}"), True, retry_after, advice)
    if status == 404:
        said += " (check the model name and the base URL)"
    return Failure(ProviderError(f"the provider refused the request: {said}"))


def body_failure(
    body: Mapping[str, object],
    headers: Mapping[str, str],
    *,
    status: int | None,
    key: str,
    provider: str,
    where: str,
    auth_hint: str,
) -> Failure:
    """Translate an answer with a success status whose body is an error (some proxies and local
    servers answer so): as the HTTP ``status`` the error states (the adapter reads it:
    :func:`stated_status`), retried as that status would be; without one, by its words: too
    long, else a bad response (nothing says that waiting helps). ``key`` is hidden."""
    text = error_text("an error with no message", body, key)
    answered = "HTTP 200 with an error" + (f" (status {status})" if status is not None else "")
    if status is not None:
        return status_failure(
            status,
            text,
            headers,
            provider=provider,
            where=where,
            auth_hint=auth_hint,
            answered=answered,
        )
    said = f"{provider} at {where} answered {answered}: {text}"
    if is_context_too_long(text):
        return Failure(ContextTooLongError(f"the input is too long for the model: {said}"))
    return Failure(BadResponseError(f"{said}. {BAD_ANSWER_ADVICE}"))


BAD_ANSWER_ADVICE = "Run again; if it keeps failing, check the server's log"


def stated_status(body: Mapping[str, object]) -> int | None:
    """The HTTP error status an error body states: its error object's numeric ``code`` or
    ``status`` from 400 to 599 (llama.cpp, vLLM, OpenRouter and Gemini put it there)."""
    inner = body.get("error")
    if not isinstance(inner, dict):
        return None
    for name in ("code", "status"):
        value = inner.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    return None


# What went wrong on the way to the provider (the adapter tells them apart), as the error says
# it and what to do once the retries are spent
CONNECTION_WORDS = {
    "connect": (
        "cannot reach {provider} at {where}",
        "check that the server is running and that the base URL is right, then run again",
    ),
    "timeout": ("{provider} at {where} did not answer in time", _RETRY_ADVICE),
    "broken": ("the connection to {provider} at {where} broke off", _RETRY_ADVICE),
}


def connection_failure(
    exc: Exception, *, provider: str, where: str, kind: str = "connect"
) -> Failure:
    """A connection error (``kind`` connect), a timeout waiting for the answer (timeout) or a
    connection that broke off (broken): retryable, then a ProviderError."""
    headline, advice = CONNECTION_WORDS[kind]
    reason = exc.__cause__
    cause = f": {str(reason) or type(reason).__name__}" if reason is not None else ""
    said = f"{headline.format(provider=provider, where=where)}: {str(exc).rstrip('.')}{cause}"
    return Failure(ProviderError(said), retryable=True, advice=advice)
