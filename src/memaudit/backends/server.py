"""A loopback HTTP server speaking the OpenAI Chat Completions and Anthropic Messages wire formats.

A :class:`ChatServer` answers each request with what its responder returns:
:class:`HFResponder` generates with a local model (``memaudit serve``, see
:mod:`memaudit.backends.serve`); :class:`memaudit.backends.scripted.ScriptedResponder`
answers from a script, which is what the tests and the API benchmark talk to
through the real SDK clients. A responder may also return a :class:`Fault`
(an error response or malformed JSON) or a :class:`Stall` (an answer held past
the client's timeout). The server adds a fixed per-request latency if asked
and logs every request it received.

Endpoints (JSON, non-streaming):

- ``POST /v1/chat/completions`` -- OpenAI Chat Completions: ``messages``,
  ``max_tokens``/``max_completion_tokens``, ``temperature``, ``top_p``, ``stop``,
  ``seed``, ``logprobs`` + ``top_logprobs`` (at most 20, as OpenAI), and vLLM's
  ``repetition_penalty``;
- ``POST /v1/messages`` -- Anthropic Messages: ``messages``, ``system``,
  ``max_tokens``, ``temperature``, ``top_p``, ``stop_sequences``, ``thinking`` (checked and logged only);
- ``GET /v1/models`` -- the served model's name.

Log-probabilities of a served HF model are those of the raw next-token
distribution at each generated position (before temperature), as OpenAI reports.
A request the model cannot answer as asked (a prompt and its new tokens longer than
the model's positions) gets HTTP 400 saying why, which clients do not retry; a failure
of the model itself, 500. The server listens on 127.0.0.1 unless told otherwise and
checks no key: it is meant for one machine, not for the network.
"""
from __future__ import annotations

import json
import math
import queue
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Protocol
from urllib.parse import urlsplit

MAX_TOP_LOGPROBS = 20


@dataclass
class ChatRequest:
    """An incoming request, whichever API it came through."""

    api: str  # "openai" or "anthropic"
    model: str
    messages: list[dict]  # [{"role", "content": str}], system message first if any
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    repetition_penalty: float = 1.0
    thinking: dict | None = None  # Anthropic's extended thinking setting, as received ({"type": "disabled"})
    # whether the client still waits for the answer (set by the server; None: assume it does)
    alive: Callable[[], bool] | None = field(default=None, repr=False, compare=False)

    @property
    def prompt(self) -> str:
        """The last user message (what scripted replies are keyed by)."""
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), "")


@dataclass
class ChatReply:
    text: str
    finish_reason: str = "stop"  # OpenAI terms: stop, length, content_filter
    input_tokens: int = 0
    output_tokens: int = 0
    # the generated tokens with their log-probabilities and, optionally, their raw bytes (a token
    # that holds part of a character's UTF-8 has no text of its own); without them, the text's UTF-8
    tokens: list[tuple[str, float] | tuple[str, float, bytes]] | None = None
    top_logprobs: list[list[tuple[str, float] | tuple[str, float, bytes]]] | None = None  # per position, best first
    refusal: bool = False  # answer through the provider's refusal signal
    stop_sequence: str | None = None  # the stop string that ended the answer (finish_reason "stop")
    cached_input_tokens: int = 0  # of input_tokens, those a provider's prompt cache served
    # of input_tokens, those written to Anthropic's prompt cache for 5 minutes and for 1 hour (its
    # usage block reports them; OpenAI's does not)
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0


@dataclass
class Fault:
    """An error response: HTTP ``status`` with an API-shaped error body, or ``raw`` bytes with status 200."""

    status: int = 500
    message: str = "internal server error"
    headers: dict = field(default_factory=dict)
    raw: bytes | None = None
    code: str | None = None  # the error's code and type, as OpenAI names some ("insufficient_quota")
    # more fields of the error object, over the ones above: OpenAI's "type" where it differs from the code
    # ("invalid_prompt" is an "invalid_request_error"), Azure's "innererror", Anthropic's "details"
    extra: dict = field(default_factory=dict)


@dataclass
class Stall:
    """Wait ``seconds`` before answering normally (past a client's timeout, the client gives up first)."""

    seconds: float


class Responder(Protocol):
    # None: the client went away before the answer was made (nothing is sent)
    def respond(self, request: ChatRequest) -> ChatReply | Fault | Stall | None: ...


class BadRequest(Exception):
    pass


# ----------------------------------------------------------------------------- the real-model responder

@dataclass
class _Pending:
    request: ChatRequest
    done: threading.Event = field(default_factory=threading.Event)
    reply: ChatReply | None = None
    error: BaseException | None = None


class HFResponder:
    """Answers from a local model through :class:`memaudit.backends.hf.HFBackend`.

    One worker thread owns the model, which is not re-entrant. Requests that arrive while it
    decodes wait, and it takes all of them next: the greedy ones without log-probabilities (what
    the probes send) are decoded together by continuous batching
    (:meth:`~memaudit.backends.hf.HFBackend.generate_rendered_batched`, ``max_rows`` rows at a
    time), grouped by their token limit, repetition penalty and stop strings; the others one at a
    time. A batched answer is the greedy answer of the same prompt alone, up to floating-point
    rounding of the padded batch (a near tie may pick the other token, as in any batching server:
    measured on SmolLM2, none of 32 answers in float32, 6 of 16 in bfloat16); ``max_rows=1``
    decodes each alone, its answer independent of the others waiting.

    Before it decodes, it waits for more requests while they keep coming (``gather`` seconds
    after the last, ``gather_max`` in all): a client's next requests follow its answers by a few
    milliseconds, and without the wait they would form a batch of their own.

    A request whose client has gone by its turn (its timeout passed) is dropped undecoded
    (``dropped`` counts them): on a slow machine the client's retry would otherwise queue behind an
    answer nobody reads, and every later request time out in turn. ``batches`` lists the size of
    each batched decoding.
    """

    def __init__(self, backend, *, max_rows: int = 16, gather: float = 0.02, gather_max: float = 0.2):
        self.backend = backend
        self.max_rows = max(1, int(max_rows))
        self.gather, self.gather_max = gather, gather_max
        self.batches: list[int] = []
        self.dropped = 0
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._start = threading.Lock()

    def respond(self, request: ChatRequest) -> ChatReply | None:
        """The answer, or None if the client went away before it was decoded."""
        with self._start:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="hf-responder", daemon=True)
                self._worker.start()
        pending = _Pending(request)
        self._queue.put(pending)
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.reply

    def _work(self) -> None:
        while True:
            taken = [self._queue.get()]
            # Gather: a client with several requests in flight sends the next ones as its answers
            # arrive, a few milliseconds apart; take them into this batch rather than the next.
            deadline = time.monotonic() + self.gather_max
            while True:
                try:
                    taken.append(self._queue.get(timeout=max(0.0, min(self.gather, deadline - time.monotonic()))))
                except queue.Empty:
                    break
            try:
                self.answer(taken)
            except BaseException as exc:  # noqa: BLE001 -- the worker must outlive any request
                for p in taken:
                    if not p.done.is_set():
                        p.error = exc
                        p.done.set()

    def answer(self, pending: list[_Pending]) -> None:
        """Answer ``pending`` (the requests waiting now), setting each one's reply or error."""
        groups: dict[tuple, list[_Pending]] = {}
        singles: list[_Pending] = []
        for p in pending:
            r = p.request
            if r.alive is not None and not r.alive():
                self.dropped += 1
                p.done.set()
            elif r.temperature == 0 and not r.logprobs:
                groups.setdefault((r.max_tokens, r.repetition_penalty, r.stop), []).append(p)
            else:
                singles.append(p)
        for group in groups.values():
            if len(group) == 1:
                singles.extend(group)
                continue
            try:
                texts = [self.backend.render_messages(p.request.messages, chat=True) for p in group]
                gens = self.backend.generate_rendered_batched(texts, self._params(group[0].request),
                                                              max_rows=self.max_rows)
            except Exception:  # noqa: BLE001 -- one bad prompt (too long, say): each request its own answer or error
                singles.extend(group)
                continue
            self.batches.append(len(group))
            for p, g in zip(group, gens, strict=True):
                p.reply = self._reply(g)
                p.done.set()
        for p in singles:
            try:
                p.reply = self._one(p.request)
            except BaseException as exc:  # noqa: BLE001 -- raised again in the request's own thread
                p.error = exc
            p.done.set()

    @staticmethod
    def _params(request: ChatRequest):
        from memaudit.backends.base import GenerationParams

        return GenerationParams(max_new_tokens=request.max_tokens, temperature=request.temperature,
                                top_p=request.top_p, stop=request.stop,
                                repetition_penalty=request.repetition_penalty, seed=request.seed or 0)

    @staticmethod
    def _reply(g) -> ChatReply:
        return ChatReply(g.text, g.meta.get("finish_reason", "stop"), g.input_tokens, g.output_tokens,
                         stop_sequence=g.meta.get("stop_sequence"))

    def _one(self, request: ChatRequest) -> ChatReply:
        text = self.backend.render_messages(request.messages, chat=True)
        k = max(1, request.top_logprobs) if request.logprobs else 0
        g = self.backend.generate_text(text, self._params(request), top_logprobs=k)
        reply = self._reply(g)
        if request.logprobs:
            reply.tokens = [tuple(t) for t in g.meta["tokens"]]
            reply.top_logprobs = [[tuple(t) for t in pos[:request.top_logprobs]] for pos in g.meta["top_logprobs"]]
        return reply


def client_connected(sock: socket.socket) -> bool:
    """Whether the client of a connection waiting for its answer is still there.

    An HTTP client sends nothing while it waits, so a connection that reads as ready holds either
    the end of the stream (the client closed it: its timeout passed) or nothing we expect.
    """
    try:
        if hasattr(select, "poll"):  # select() refuses descriptors above 1023, which a busy server reaches
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            readable = bool(poller.poll(0))
        else:
            readable = bool(select.select([sock], [], [], 0)[0])
        return not readable or bool(sock.recv(1, socket.MSG_PEEK))
    except (OSError, ValueError):
        return False


# ----------------------------------------------------------------------------- wire formats

def _text_of(content, where: str) -> str:
    if content is None:  # an assistant turn may have none (OpenAI)
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise BadRequest(f"{where}: message content must be a string or a list of text parts")


def _messages(body: dict) -> list[dict]:
    """``body["messages"]`` as ``[{"role", "content": str}]``; a BadRequest naming the message that is not one."""
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: expected a non-empty list of messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}]: expected an object with a string 'role'")
        out.append({"role": m["role"], "content": _text_of(m.get("content"), f"messages[{i}].content")})
    return out


def _number(body: dict, key: str, default, low: float, high: float = math.inf, *, integer: bool = False,
            above: bool = False):
    """``body[key]`` (absent or null: ``default``), a number from ``low`` (excluded with ``above``) to
    ``high``; anything else is a BadRequest naming the key, where ``int()``/``float()`` would
    accept a string, round a fraction, or let a value the model cannot take through."""
    value = body.get(key)
    if value is None:
        return default
    kind = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value < low or (above and value == low) \
            or value > high:
        bounds = ("" if low == -math.inf else f" > {low:g}" if above else f" >= {low:g}" if high == math.inf
                  else f" in [{low:g}, {high:g}]")
        raise BadRequest(f"{key}: expected {'an integer' if integer else 'a number'}{bounds}, got {value!r}")
    return value if integer else float(value)


def _stops(body: dict, key: str) -> tuple[str, ...]:
    stop = body.get(key)
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list) and all(isinstance(x, str) for x in stop):
        return tuple(stop)
    raise BadRequest(f"{key}: expected a string or a list of strings, got {stop!r}")


def parse_openai_request(body: dict) -> ChatRequest:
    """A Chat Completions request; a parameter of the wrong type or out of the API's range is a
    BadRequest naming it (HTTP 400), never a default put in its place or a 500."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key in ("model", "messages"):
        if body.get(key) is None:
            raise BadRequest(f"missing required parameter: '{key}'")
    if body.get("stream"):
        raise BadRequest("streaming is not supported by this server")
    if body.get("n") not in (None, 1):
        raise BadRequest("only n=1 is supported")
    messages = _messages(body)
    top = _number(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS, integer=True)
    logprobs = body.get("logprobs")
    if top and not logprobs:
        raise BadRequest("top_logprobs: logprobs must be true when top_logprobs is set")
    max_tokens = _number(body, "max_completion_tokens", None, 1, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", 256, 1, integer=True)
    return ChatRequest("openai", body["model"], messages, max_tokens, _number(body, "temperature", 1.0, 0, 2),
                       _number(body, "top_p", 1.0, 0, 1), _stops(body, "stop"),
                       _number(body, "seed", None, -math.inf, integer=True), bool(logprobs), top,
                       _number(body, "repetition_penalty", 1.0, 0, above=True))


def parse_anthropic_request(body: dict) -> ChatRequest:
    """A Messages request; checked as :func:`parse_openai_request` checks its own."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key in ("model", "messages", "max_tokens"):
        if body.get(key) is None:
            raise BadRequest(f"{key}: Field required")
    messages = [{"role": "system", "content": _text_of(body["system"], "system")}] if body.get("system") else []
    messages += _messages(body)
    stops = _stops(body, "stop_sequences")
    if any(not s.strip() for s in stops):  # as the Messages API answers it
        raise BadRequest("stop_sequences: each stop sequence must contain non-whitespace")
    thinking = body.get("thinking")
    if thinking is not None and (not isinstance(thinking, dict)
                                 or thinking.get("type") not in ("enabled", "disabled", "adaptive")):
        raise BadRequest(f"thinking: expected an object whose type is enabled, disabled or adaptive, got {thinking!r}")
    return ChatRequest("anthropic", body["model"], messages, _number(body, "max_tokens", None, 1, integer=True),
                       _number(body, "temperature", 1.0, 0, 1), _number(body, "top_p", 1.0, 0, 1), stops,
                       thinking=thinking)


def _logprob_entry(entry) -> dict:
    """A token's ``{"token", "logprob", "bytes"}``: its raw bytes where the reply gives them (a
    token holding part of a character), else its text's UTF-8."""
    token, logprob, *raw = entry
    return {"token": token, "logprob": logprob, "bytes": list(raw[0]) if raw else list(token.encode("utf-8"))}


def openai_response(request: ChatRequest, reply: ChatReply, n: int, model: str) -> dict:
    """A Chat Completions answer; ``model`` is the model that answered (the server's), as OpenAI gives the
    model that answered, not the name (an alias, say) the request sent."""
    logprobs = None
    if request.logprobs and reply.tokens is not None:
        content = []
        for i, entry in enumerate(reply.tokens):
            top = (reply.top_logprobs[i] if reply.top_logprobs else [])[:request.top_logprobs]
            content.append({**_logprob_entry(entry), "top_logprobs": [_logprob_entry(t) for t in top]})
        logprobs = {"content": content, "refusal": None}
    message = {"role": "assistant", "content": None if reply.refusal else reply.text,
               "refusal": reply.text if reply.refusal else None}
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": reply.finish_reason}],
            "usage": {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
                      "total_tokens": reply.input_tokens + reply.output_tokens,
                      "prompt_tokens_details": {"cached_tokens": reply.cached_input_tokens, "audio_tokens": 0}},
            "system_fingerprint": "memaudit-serve"}


_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}


def anthropic_response(request: ChatRequest, reply: ChatReply, n: int, model: str) -> dict:
    """A Messages answer; ``model``, the model that answered, as :func:`openai_response`'s."""
    stop = "refusal" if reply.refusal else _ANTHROPIC_STOP.get(reply.finish_reason, reply.finish_reason)
    if stop == "end_turn" and reply.stop_sequence is not None:
        stop = "stop_sequence"
    written = reply.cache_write_5m_tokens + reply.cache_write_1h_tokens
    return {"id": f"msg_{n:024d}", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": reply.text}], "stop_reason": stop,
            "stop_sequence": reply.stop_sequence if stop == "stop_sequence" else None,
            "usage": {"input_tokens": reply.input_tokens - reply.cached_input_tokens - written,
                      "cache_read_input_tokens": reply.cached_input_tokens, "cache_creation_input_tokens": written,
                      "cache_creation": {"ephemeral_5m_input_tokens": reply.cache_write_5m_tokens,
                                         "ephemeral_1h_input_tokens": reply.cache_write_1h_tokens},
                      "output_tokens": reply.output_tokens}}


_OPENAI_ERROR_TYPE = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
                      429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}
_ANTHROPIC_ERROR_TYPE = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                         429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def error_body(api: str, status: int, message: str, code: str | None = None, extra: dict | None = None) -> dict:
    """An error response's body in ``api``'s format; ``extra`` adds fields to its error object (or replaces them)."""
    if api == "anthropic":
        return {"type": "error", "error": {"type": code or _ANTHROPIC_ERROR_TYPE.get(status, "api_error"),
                                           "message": message, **(extra or {})}}
    return {"error": {"message": message, "type": code or _OPENAI_ERROR_TYPE.get(status, "server_error"),
                      "param": None, "code": code, **(extra or {})}}


# ----------------------------------------------------------------------------- the server

@dataclass
class RequestRecord:
    path: str
    api: str
    prompt: str | None
    arrived: float  # time.monotonic()
    # when the answer began to be written: the client cannot have it earlier (``finished`` is taken
    # after the write, which a busy machine can delay past the client's next request)
    responding: float | None = None
    finished: float | None = None
    status: int | None = None  # set as the answer begins to be written (499, the client gone: at the end)
    authorization: str | None = None  # kept in memory only, so tests can check which key was sent
    headers: dict[str, str] | None = None  # every request header, names lowercased; in memory only, as above
    request: ChatRequest | None = None  # the parsed request (parameters as received)


class ChatServer:
    """A threaded HTTP server speaking both APIs; ``with ChatServer(responder) as server: ...``.

    ``latency`` seconds are added to every answer (the benchmark's fixed
    per-request latency). ``records`` logs every request; ``max_in_flight`` is
    the most requests it was ever answering at once.
    """

    def __init__(self, responder: Responder | None, *, host: str = "127.0.0.1", port: int = 0,
                 latency: float = 0.0, model_name: str = "memaudit-local"):
        self.responder = responder  # None: set it before serving (``memaudit serve`` listens, then loads the model)
        self.latency = latency
        self.model_name = model_name
        self.records: list[RequestRecord] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def host(self) -> str:
        return self._httpd.server_address[0]

    @property
    def openai_base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def count(self, api: str | None = None) -> int:
        """Requests received (of one API), answered or not."""
        with self._lock:
            return sum(1 for r in self.records if api is None or r.api == api)

    def reset(self) -> None:
        with self._lock:
            self.records.clear()
            self.max_in_flight = 0

    def start(self) -> "ChatServer":
        # A short poll interval: stop() returns within 50 ms instead of serve_forever's default 0.5 s.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="chat-server", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._httpd.shutdown()
        self.close()

    def close(self) -> None:
        """Release the listening socket (after :meth:`serve_forever` has returned)."""
        self._httpd.server_close()

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # called from handler threads
    def _begin(self, record: RequestRecord) -> None:
        with self._lock:
            self.records.append(record)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _end(self, record: RequestRecord, status: int) -> None:
        with self._lock:
            self._in_flight -= 1
            record.finished, record.status = time.monotonic(), status


def _make_handler(server: ChatServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect

        def setup(self):
            super().setup()
            # Headers and body leave in two writes; without TCP_NODELAY, Nagle's algorithm
            # holds the body until the client's delayed ACK, adding ~40 ms to every answer.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
            return

        def _send(self, status: int, payload: bytes, headers: dict | None = None) -> None:
            record = getattr(self, "_record", None)
            if record is not None:
                # the status too, before the client can have the answer: ``_end`` runs after the write,
                # and a client reading ``records`` once it has every answer saw None there (a busy machine)
                record.responding, record.status = time.monotonic(), status
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, str(v))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up (its timeout passed); nothing left to answer.
                self.close_connection = True

        def _json(self, status: int, obj: dict, headers: dict | None = None) -> None:
            self._send(status, json.dumps(obj).encode("utf-8"), headers)

        def do_GET(self):
            if urlsplit(self.path).path.rstrip("/") == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": server.model_name, "object": "model",
                                                             "created": 0, "owned_by": "memaudit"}]})
            else:
                self._json(404, error_body("openai", 404, f"no route {self.path}"))

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = urlsplit(self.path).path.rstrip("/")
            api = "openai" if path.endswith("/chat/completions") else "anthropic" if path.endswith("/messages") \
                else None
            record = RequestRecord(path, api or "unknown", None, time.monotonic(),
                                   authorization=self.headers.get("Authorization") or self.headers.get("x-api-key"),
                                   headers={k.lower(): v for k, v in self.headers.items()})
            server._begin(record)
            self._record = record
            status = 500
            try:
                if api is None:
                    status = 404
                    return self._json(404, error_body("openai", 404, f"no route {self.path}"))
                try:
                    body = json.loads(raw)
                    request = (parse_openai_request if api == "openai" else parse_anthropic_request)(body)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    status = 400
                    return self._json(400, error_body(api, 400, "the request body is not valid JSON"))
                except (BadRequest, KeyError, TypeError, ValueError) as exc:
                    status = 400
                    return self._json(400, error_body(api, 400, str(exc)))
                record.prompt, record.request = request.prompt, request
                request.alive = lambda: client_connected(self.connection)
                if server.latency:
                    time.sleep(server.latency)
                try:
                    answer = server.responder.respond(request)
                except ValueError as exc:  # what the request asks cannot be done (a prompt too long): not retried
                    status = 400
                    return self._json(400, error_body(api, 400, str(exc)))
                except Exception as exc:  # noqa: BLE001 -- the model failed: an error the client may retry
                    status = 500
                    return self._json(500, error_body(api, 500, f"{type(exc).__name__}: {exc}"))
                if answer is None:  # the client went away before its answer was made
                    status, self.close_connection = 499, True
                    return None
                if isinstance(answer, Stall):
                    time.sleep(answer.seconds)
                    answer = server.responder.default(request)  # type: ignore[attr-defined]
                if isinstance(answer, Fault):
                    if answer.raw is not None:
                        status = 200
                        return self._send(200, answer.raw, answer.headers)
                    status = answer.status
                    payload = error_body(api, answer.status, answer.message, answer.code, answer.extra)
                    return self._json(answer.status, payload, answer.headers)
                n = len(server.records)
                status = 200
                shape = openai_response if api == "openai" else anthropic_response
                return self._json(200, shape(request, answer, n, server.model_name))
            finally:
                server._end(record, status)
                self._record = None  # a keep-alive connection's next request (a GET, say) is not this one

    return Handler
