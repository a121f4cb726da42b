"""The loopback API server the tests drive through the real ``openai`` and ``anthropic`` SDK clients.

It is :class:`memaudit.backends.server.ChatServer` (the server behind ``memaudit
serve``, speaking the OpenAI Chat Completions and Anthropic Messages wire
formats) answering from a :class:`~memaudit.backends.scripted.ScriptedResponder`,
on 127.0.0.1 with an OS-chosen port. Every request is logged
(``server.records``: arrival and finish times, status, the parsed request and the
Authorization header), so a test counts exactly what reached the "network".

The constructors below script the faults real APIs produce.
"""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

from memaudit.backends.scripted import ScriptedResponder
from memaudit.backends.server import ChatReply, ChatServer, Fault, Stall

__all__ = ["ChatReply", "ChatServer", "Fault", "ScriptedResponder", "Stall", "loopback", "rate_limited",
           "server_error", "overloaded", "malformed_json", "error_object_200", "stall", "refusal_text",
           "provider_refusal", "unauthorized", "bad_request", "reply_with_top"]


@contextlib.contextmanager
def loopback(replies: dict | None = None, *, latency: float = 0.0) -> Iterator[ChatServer]:
    """A started server answering from a script (``server.responder.queue(...)`` adds faults)."""
    with ChatServer(ScriptedResponder(replies), latency=latency) as server:
        yield server


def rate_limited(retry_after: float | None = None, *, retry_after_ms: int | None = None) -> Fault:
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = f"{retry_after:g}"
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    return Fault(429, "Rate limit reached for requests", headers)


def server_error(status: int = 500) -> Fault:
    return Fault(status, "The server had an error while processing your request")


def overloaded() -> Fault:
    """Anthropic's 529."""
    return Fault(529, "Overloaded")


def unauthorized(echo: str) -> Fault:
    """A 401 whose message echoes the key it was given, as OpenAI's 'Incorrect API key provided: ...' does."""
    return Fault(401, f"Incorrect API key provided: {echo}. You can find your API key at https://example.invalid")


def bad_request(message: str = "Invalid value for 'temperature'") -> Fault:
    return Fault(400, message)


def malformed_json() -> Fault:
    """A 200 whose body is cut off mid-JSON (a proxy dropped the connection)."""
    return Fault(raw=b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mess')


def error_object_200(message: str = "The model is overloaded") -> Fault:
    """Valid JSON, status 200, but an error object instead of a completion (some compatible servers)."""
    return Fault(raw=json.dumps({"error": {"message": message, "type": "server_error"}}).encode())


def stall(seconds: float) -> Stall:
    return Stall(seconds)


def refusal_text() -> str:
    return "I'm sorry, but I can't provide verbatim excerpts of copyrighted text."


def provider_refusal(text: str = "I cannot help with that request.") -> ChatReply:
    """A refusal flagged by the provider (OpenAI ``message.refusal``, Anthropic ``stop_reason: refusal``)."""
    return ChatReply(text, refusal=True, input_tokens=5, output_tokens=7)


def reply_with_top(text: str, first_top: list[tuple[str, float]], *, input_tokens: int = 10) -> ChatReply:
    """A one-token answer whose first position lists ``first_top`` as its top log-probabilities."""
    return ChatReply(text, tokens=[(text, first_top[0][1])], top_logprobs=[first_top], input_tokens=input_tokens,
                     output_tokens=1)
