"""What the provider adapters share: their settings, the SDK client made without the SDK's own
retries, one call with our retries and backoff, and the translation of SDK exceptions into
:class:`~morphz.runtime.models.base.ProviderError` (the one place for it).

An adapter subclasses :class:`SdkAdapter`, says which SDK module and client class it uses, how
to name itself and which bodies are errors (``_error_body``), and implements ``request`` by mapping
the :class:`ModelRequest` to the provider's shape and handing a ``send`` coroutine (the raw HTTP
response) and a parser of the JSON body to :meth:`SdkAdapter._call`. The SDKs' exception classes
have the same names in ``openai`` and ``anthropic`` (``APIStatusError``, ``APIConnectionError``,
``APIResponseValidationError``).

Every error an adapter raises from :meth:`SdkAdapter._call` has the API key redacted: those
translated from the SDK's exceptions and from an error body that came with HTTP 200 (both in
``_translate``, so ``on_retry`` sees them redacted too), and a body that is not JSON or not of
the expected shape. None is chained to the SDK's exception, whose request holds the key in
its headers: what that exception said is a note on the error, the key hidden
(:func:`cause_summary`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any, TypeVar

import httpx2

from morphz.errors import InputError
from morphz.runtime.models.base import BadResponseError, ModelRequest, ProviderError
from morphz.runtime.models.loop_clients import LoopClients
from morphz.runtime.models.redaction import cut, hidden
from morphz.runtime.models.retry import (
    Backoff,
    Failure,
    Retry,
    Sleep,
    body_failure,
    call_with_retries,
    connection_failure,
    error_text,
    restate,
    stated_status,
    status_failure,
)

PREAMBLE = (
    "You are the agent described by the protocol region of the context encoding that follows; "
    "act only through the offered tools or a final reply."
)
NO_KEY = "none"  # sent when no key is configured: local servers ignore it, the SDKs want one
# A (non-streaming) request may take ten minutes to answer; connecting may not: an endpoint that
# drops packets (a wrong base URL, a firewall) is given up on after 5 seconds, as the SDKs' own
# default does. Both adapters pass it explicitly (Anthropic's SDK, given no timeout, refuses a
# large output budget before sending).
TIMEOUT = httpx2.Timeout(600.0, connect=5.0)
# what to do about an answer that is not JSON or not of the provider's shape
MALFORMED_ADVICE = (
    "check that the base URL names the provider's API (not a web page or another service), "
    "then run again"
)
T = TypeVar("T")


class ErrorBody(Exception):
    """An answer with a success status whose JSON body is an error: raised inside the retried
    call so that it is translated, retried and redacted as an HTTP error is (its text is not the
    body, which may quote the key)."""

    def __init__(self, body: Mapping[str, object], headers: Mapping[str, str]) -> None:
        super().__init__("a success status with an error body")
        self.body = body
        self.headers = headers


class SdkAdapter:
    """The settings, client, retries and error translation of one provider adapter."""

    prefix = ""  # the model spec's prefix: openai, anthropic
    provider = ""  # how errors name the other side: "Anthropic at URL answered HTTP 401"
    body_name = ""  # how errors name its answers: "the Anthropic response is not JSON"
    auth_hint = ""  # where a user fixes an authentication failure
    key_setting = ""  # the environment variable the configuration reads the API key from
    default_base_url = ""
    client_class = ""  # the SDK's async client: AsyncOpenAI, AsyncAnthropic

    def __init__(
        self,
        sdk: ModuleType,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        max_retries: int = 3,
        sleep: Sleep = asyncio.sleep,
        max_output_tokens: int | None = None,
        backoff: Backoff | None = None,
        on_retry: Callable[[Retry], None] | None = None,
    ) -> None:
        check_settings(model, max_retries, max_output_tokens)
        self._sdk = sdk
        self.model = model
        self.base_url = check_base_url(base_url or self.default_base_url, "base_url")
        self._key = check_key(api_key or NO_KEY, self.key_setting)
        self.max_retries = max_retries
        self.max_output_tokens = max_output_tokens
        self.backoff = backoff or Backoff()
        self.on_retry = on_retry
        self._sleep = sleep
        self._http_client = http_client
        first = self._new_client()  # made now: a setting the SDK refuses is refused here
        # an SDK client around the caller's HTTP client (kept in one loop by the caller), or
        # one SDK client, with its own connection pool, per event loop
        self._shared: Any = first if http_client is not None else None
        self._clients = LoopClients(self._new_client, first) if http_client is None else None

    def _new_client(self) -> Any:
        """A new SDK client of this adapter's settings (its own connection pool unless the
        caller gave an HTTP client)."""
        client = getattr(self._sdk, self.client_class)(
            base_url=self.base_url, api_key=self._key, http_client=self._http_client,
            timeout=TIMEOUT, max_retries=0,  # retries are ours (morphz.runtime.models.retry)
        )  # fmt: skip
        self._unset_environment(client)
        return client

    def _unset_environment(self, client: Any) -> None:
        """Undo what the SDK took from the environment when it made ``client`` (headers sent
        to whatever base URL is configured): an adapter is configured by its arguments only.
        Each adapter knows its SDK's habits."""

    @property
    def name(self) -> str:
        return f"{self.prefix}:{self.model}"

    def output_tokens(self, request: ModelRequest) -> int:
        """The request's output budget, capped by the adapter's when it has one."""
        cap = self.max_output_tokens
        return request.max_output_tokens if cap is None else min(cap, request.max_output_tokens)

    def _error_body(self, data: dict[str, Any]) -> Mapping[str, object] | None:
        """The error that ``data``, a body that came with a success status, is or carries
        (None: an answer), as an error body: ``{"error": {...}}`` or the provider's own."""
        raise NotImplementedError

    def _stated_status(self, data: Mapping[str, object]) -> int | None:
        """The HTTP status that ``data``, an error body that came with a success status,
        states (None: it states none). Each adapter knows its provider's way of saying it."""
        return stated_status(data)

    async def _call(
        self,
        send: Callable[[Any], Awaitable[httpx2.Response]],
        parse: Callable[[dict[str, Any]], T],
    ) -> T:
        """``send`` with retries and backoff, given the SDK client of the running event loop
        (:mod:`.loop_clients`); the body it returned, read as a JSON object and ``parse``-d.
        Every ProviderError raised here has the key redacted."""
        client = self._shared if self._clients is None else await self._clients.current()

        async def attempt() -> dict[str, Any]:
            response = await send(client)
            data = self._checked(load_json, response.content, self.body_name, self._key)
            error = self._error_body(data)
            if error is not None:
                raise ErrorBody(error, response.headers)
            return data

        try:
            data = await call_with_retries(
                attempt,
                self._translate,
                max_retries=self.max_retries,
                sleep=self._sleep,
                backoff=self.backoff,
                on_retry=self.on_retry,
            )
            return self._checked(parse, data)
        except ProviderError as exc:
            redact(exc, self._key)
            raise

    def _checked(self, read: Callable[..., T], *args: Any) -> T:
        """``read(*args)``, its BadResponseError saying where the answer came from and what to
        check."""
        try:
            return read(*args)
        except BadResponseError as exc:
            where = without_userinfo(self.base_url)
            restate(exc, f"{exc.message} ({self.provider} at {where}): {MALFORMED_ADVICE}")
            raise

    async def aclose(self) -> None:
        """Close the SDK client of the running event loop (or the caller's HTTP client); the
        clients of other loops are closed as those loops shut down."""
        if self._clients is None:
            await self._shared.close()
        else:
            await self._clients.aclose()

    def _translate(self, exc: Exception) -> Failure | None:
        """The one place where the SDK's exceptions become ProviderErrors (never showing the
        API key, which a server may quote in its refusal)."""
        failure = self._failure(exc)
        if failure is None:
            return None
        redact(failure.error, self._key)
        if isinstance(exc, ErrorBody):  # the body is in the message already
            return failure
        return dataclasses.replace(failure, cause=cause_summary(exc, self._key))

    def _failure(self, exc: Exception) -> Failure | None:
        sdk, where = self._sdk, without_userinfo(self.base_url)
        if isinstance(exc, ErrorBody):
            return body_failure(
                exc.body,
                exc.headers,
                status=self._stated_status(exc.body),
                key=self._key,
                provider=self.provider,
                where=where,
                auth_hint=self.auth_hint,
            )
        if isinstance(exc, sdk.APIStatusError):
            text = error_text(exc.message, exc.body, self._key)
            return status_failure(
                exc.status_code,
                text,
                exc.response.headers,
                provider=self.provider,
                where=where,
                auth_hint=self.auth_hint,
            )
        if isinstance(exc, sdk.APIConnectionError):
            kind = connection_kind(exc.__cause__)
            return connection_failure(exc, provider=self.provider, where=where, kind=kind)
        if isinstance(exc, sdk.APIResponseValidationError):
            said = f"a malformed response from {self.provider} at {where}: {exc}"
            return Failure(BadResponseError(f"{said}; {MALFORMED_ADVICE}"))
        return None


CAUSE_LIMIT = 300  # the characters of each exception's text in cause_summary


def cause_summary(exc: BaseException, key: str) -> str:
    """What ``exc`` and the exceptions it was raised from said, class and text, ``key`` hidden
    (in its escaped forms too: an HTTP client quotes a header it refused as bytes)."""
    said: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(said) < 3:
        kind = type(seen)
        said.append(cut(f"{kind.__module__}.{kind.__qualname__}: {seen}", CAUSE_LIMIT, key))
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return f"raised in place of {' <- '.join(said)}"


def connection_kind(cause: BaseException | None) -> str:
    """What went wrong on the way (retry.CONNECTION_WORDS), from the HTTP client's exception:
    the server was not reached (connect), it did not answer in time (timeout), or the connection
    broke off (broken)."""
    if isinstance(cause, httpx2.ConnectTimeout):
        return "connect"
    if isinstance(cause, httpx2.TimeoutException):
        return "timeout"
    if isinstance(cause, (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError)):
        return "broken"
    return "connect"


def redact(error: ProviderError, key: str) -> None:
    """``error``'s message with ``key`` (and ``Bearer KEY``) replaced by ``***``
    (:func:`.redaction.hidden`)."""
    said = hidden(error.message, key)
    if said != error.message:
        restate(error, said)


def check_settings(model: str, max_retries: int, max_output_tokens: int | None) -> None:
    if not model:
        raise InputError("a model name is required")
    if max_retries < 0:
        raise InputError(f"max_retries must be 0 or more, not {max_retries}")
    if max_output_tokens is not None and max_output_tokens < 1:
        raise InputError(f"max_output_tokens must be positive, not {max_output_tokens}")


def check_key(key: str, setting: str) -> str:
    """``key`` when an HTTP header can carry it as it is (printable ASCII, no space at either
    end); an InputError naming where it is set (``api_key``, the environment variable
    ``setting``) and what is wrong, never the key, otherwise: the HTTP client would refuse the
    header with the key in its message (a line break, a trailing space), or the SDK fail with a
    bare UnicodeEncodeError (an ellipsis, a non-breaking space pasted with the key)."""
    wrong = next(((i, c) for i, c in enumerate(key) if not " " <= c <= "~"), None)
    if wrong is not None:
        index, char = wrong
        kind = "a character outside ASCII" if ord(char) > 0x7F else "a control character"
        what = "a line break" if char in "\r\n" else f"{kind} (U+{ord(char):04X})"
        said = f"{what} at character {index + 1} of {len(key)}"
    elif key != key.strip(" "):
        said = "a space at its start or end"
    else:
        return key
    where = f"{setting} (api_key)" if setting else "api_key"
    raise InputError(
        f"the API key in {where} holds {said}, which an HTTP header cannot carry: set it to "
        "the key alone (copy it again from the provider's console)"
    )


def check_base_url(url: str, setting: str) -> str:
    """``url`` when it is an http:// or https:// URL with a host and, if it names one, a port
    from 1 to 65535; an InputError naming ``setting`` otherwise (before anything is sent: the
    HTTP client would raise its own error, or retry a URL it can never reach)."""
    shown = without_userinfo(url)
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # a broken IPv6 address
        raise InputError(f"{setting} {shown!r} is not a valid URL ({exc}): correct it") from exc
    if parts.scheme.lower() not in ("http", "https"):
        example = f"http://{shown}" if "://" not in url else "http://localhost:11434/v1"
        raise InputError(f"{setting} {shown!r} is not an http:// or https:// URL: e.g. {example}")
    try:
        port = parts.port
    except ValueError as exc:  # not a number, or out of range
        port, wrong = 0, f" ({exc})"
    else:
        wrong = ""
    if port == 0:
        raise InputError(
            f"{setting} {shown!r} has no valid port{wrong}: use a port from 1 to 65535"
        )
    try:
        httpx2.URL(url)
    except httpx2.InvalidURL as exc:
        raise InputError(f"{setting} {shown!r} is not a valid URL ({exc}): correct it") from exc
    if not parts.hostname:
        raise InputError(f"{setting} {shown!r} names no host: e.g. http://localhost:11434/v1")
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        raise InputError(f"{setting} {shown!r} {QUERY_REFUSED}")
    return url


# Why a base URL with a query is refused (the SDKs append the endpoint's path to the base URL as
# written, query included, so ``/v1?key=K`` becomes ``/v1?key=Kchat/completions``), and what to
# do instead: the key has its own setting, and Azure OpenAI's v1 API needs no api-version
QUERY_REFUSED = (
    "has a query or fragment (?... or #...): the endpoint's path is appended to the base URL as "
    "written, so every request would go astray. Give the base URL without it, and an API key in "
    "its own variable (OPENAI_API_KEY, ANTHROPIC_API_KEY). Azure OpenAI's v1 endpoint "
    "(https://RESOURCE.openai.azure.com/openai/v1) needs no api-version; a server that needs "
    "query parameters on every request is not supported"
)


PREVIEW_LIMIT = 200  # the characters of an answer that is not JSON shown in its error


def load_json(body: bytes, provider: str, key: str = "") -> dict[str, Any]:
    """``body`` as a JSON object; a BadResponseError that shows its start (``key`` hidden)
    otherwise."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        said = f"the {provider} response is not JSON ({exc}): {_preview(body, key)}"
        raise BadResponseError(said) from exc
    if not isinstance(data, dict):
        said = f"the {provider} response is not a JSON object: {_preview(body, key)}"
        raise BadResponseError(said)
    return data


def _preview(body: bytes, key: str) -> str:
    """The start of ``body`` as text, ``key`` hidden before it is cut (a key across the cut is
    read whole: the key's length more is decoded)."""
    start = body[: 4 * (PREVIEW_LIMIT + len(key))].decode("utf-8", "replace")
    return cut(start, PREVIEW_LIMIT, key)


def without_userinfo(url: str) -> str:
    """``url`` as errors may name it: credentials in it (``https://user:password@host``, which
    the HTTP client sends as a header) and the values of its query (``?key=SECRET``) and its
    fragment are left out, so no error, event or output shows them."""
    try:
        parts: urllib.parse.SplitResult | None = urllib.parse.urlsplit(url)
    except ValueError:
        parts = None
    if parts is not None and "://" in url:
        if "@" not in parts.netloc and not parts.query and not parts.fragment:
            return url
        if "@" in parts.netloc:
            netloc = parts.netloc.rpartition("@")[2]  # host[:port], as written
            parts = parts._replace(netloc=f"***@{netloc}")
        query = "&".join(_name_only(p) for p in parts.query.split("&") if p)
        fragment = "***" if parts.fragment else ""
        return urllib.parse.urlunsplit(parts._replace(query=query, fragment=fragment))
    # not a URL (a setting refused as one): what follows a ? or # and what precedes an @ hidden
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    end = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    if end >= 0:  # the query or fragment starts here
        rest = f"{rest[: end + 1]}***"
    if "@" in rest:
        rest = f"***@{rest.rpartition('@')[2]}"
    return f"{head}{sep}{rest}"


def _name_only(parameter: str) -> str:
    """A query parameter as errors show it: ``name=***`` (a bare value: ``***``)."""
    name, equals, _ = parameter.partition("=")
    return f"{name}=***" if equals else "***"
