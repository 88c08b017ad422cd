"""A real HTTP server on loopback for the provider end-to-end tests, and a fixture that lifts the
suite's network guard for loopback addresses only."""

from __future__ import annotations

import _socket
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import pytest

_CREATE_CONNECTION = socket.create_connection  # the real one, before the network guard

Request = tuple[str, dict[str, str], dict[str, Any]]  # path, headers (lower-case), JSON body

# the scripted work of the end-to-end tests: read a file, record what it says, reply
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "production.yaml"}),
    (
        "context_tx",
        {
            "tx": "(context-tx (base-version 0) (derive deployment/target (from @e1 @e4) "
            "(fact (region cn-shanghai))))"
        },
    ),
]
REPLY = "Deploying to cn-shanghai."


def _loopback(address: object) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    return host in ("127.0.0.1", "::1", "localhost")


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lift the suite's network guard for loopback addresses only."""

    def connect(self: socket.socket, address: Any) -> None:
        if not _loopback(address):
            raise RuntimeError(f"tests must not open network connections ({address!r})")
        _socket.socket.connect(self, address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        if not _loopback(address):
            raise RuntimeError(f"tests must not open network connections ({address!r})")
        return _CREATE_CONNECTION(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "create_connection", create_connection)


class Loopback:
    """A threading HTTP server on 127.0.0.1 (a free port) with ``handler``; started and
    stopped as a context manager."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Server(Loopback):
    """Answers each POST with ``answer(request)`` (a JSON object, bytes sent as they are, or None
    for "no more answers": HTTP 500); keeps every request it was sent."""

    def __init__(
        self,
        answer: Callable[[Request], dict[str, Any] | bytes | None],
        status: Callable[[Any], int] = lambda _answer: 200,
    ) -> None:
        """``status``: the HTTP status to send with an answer (200 unless it says otherwise)."""
        self.requests: list[Request] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = (self.path, headers, body)
                outer.requests.append(request)
                data = answer(request)
                if data is None:
                    self._send(500, {"error": {"message": "no more recorded answers"}})
                    return
                self._send(status(data), data)

            def _send(self, status: int, data: dict[str, Any] | bytes) -> None:
                raw = data if isinstance(data, bytes) else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                return

        super().__init__(Handler)


def openai_completion(
    content: str = "ok", prompt_tokens: int = 3, completion_tokens: int = 1
) -> dict[str, Any]:
    """An OpenAI chat completion answering ``content``, reporting this usage."""
    return {
        "id": "chatcmpl-loop",
        "object": "chat.completion",
        "created": 1_764_460_000,
        "model": "loop-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def answer_ok(_request: Any) -> dict[str, Any]:
    """A server's handler that answers every request "ok"."""
    return openai_completion()


def anthropic_message(content: list[dict[str, Any]]) -> dict[str, Any]:
    """An Anthropic Messages answer holding ``content`` blocks."""
    return {
        "id": "msg_loop",
        "type": "message",
        "role": "assistant",
        "model": "claude-loop",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3000, "output_tokens": 5},
    }


def keep_alive(server: Server) -> Server:
    """The loopback server speaking HTTP/1.1 with keep-alive, as every real provider does (the
    stdlib handler's default, HTTP/1.0, closes each connection after one answer, so the client
    never reuses one)."""
    server.httpd.RequestHandlerClass.protocol_version = "HTTP/1.1"  # type: ignore[attr-defined]
    return server
