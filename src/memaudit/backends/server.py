"""``memaudit serve``: a local model behind the OpenAI Chat Completions (and Anthropic Messages) API.

Black-box probes written for ChatGPT or Claude can then be tried on an open
model: point an ``openai`` backend's ``base_url`` at ``http://127.0.0.1:8000/v1``.
The same server, answering from a script instead of a model, is what the tests
and the API benchmark talk to through the real SDK clients: scripted replies,
faults (429 with Retry-After, 5xx, stalls past the client's timeout, malformed
JSON), a fixed per-request latency, and a log of every request it received.

Endpoints (JSON, non-streaming):

- ``POST /v1/chat/completions`` -- OpenAI Chat Completions: ``messages``,
  ``max_tokens``/``max_completion_tokens``, ``temperature``, ``top_p``, ``stop``,
  ``seed``, ``logprobs`` + ``top_logprobs`` (at most 20, as OpenAI), and vLLM's
  ``repetition_penalty``;
- ``POST /v1/messages`` -- Anthropic Messages: ``messages``, ``system``,
  ``max_tokens``, ``temperature``, ``top_p``, ``stop_sequences``;
- ``GET /v1/models`` -- the served model's name.

Log-probabilities of a served HF model are those of the raw next-token
distribution at each generated position (before temperature), as OpenAI reports.
The server listens on 127.0.0.1 unless told otherwise and checks no key: it is
meant for one machine, not for the network.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol, Sequence
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
    tokens: list[tuple[str, float]] | None = None  # the generated tokens with their log-probabilities
    top_logprobs: list[list[tuple[str, float]]] | None = None  # per position, best first
    refusal: bool = False  # answer through the provider's refusal signal


@dataclass
class Fault:
    """An error response: HTTP ``status`` with an API-shaped error body, or ``raw`` bytes with status 200."""

    status: int = 500
    message: str = "internal server error"
    headers: dict = field(default_factory=dict)
    raw: bytes | None = None


@dataclass
class Stall:
    """Wait ``seconds`` before answering normally (past a client's timeout, the client gives up first)."""

    seconds: float


class Responder(Protocol):
    def respond(self, request: ChatRequest) -> ChatReply | Fault | Stall: ...


class BadRequest(Exception):
    pass


# ----------------------------------------------------------------------------- responders

def _words(text: str) -> list[str]:
    return text.split()


def synthetic_top_logprobs(prompt: str, position: int, k: int) -> list[tuple[str, float]]:
    """A deterministic top-``k`` list for a prompt and position (scripted mode).

    Drawn from option-letter variants and common words, so option scores
    sometimes find a letter and sometimes not; log-probabilities descend and
    their probabilities sum to less than one.
    """
    vocab = ["A", " A", "B", " B", "C", " C", "D", " D", "The", " the", " of", " and", " to", " in", " a",
             " is", " that", " it", " was", " he", " for", " on", " are", " as", " with", " his", " they",
             " I", " at", " be"]
    digest = hashlib.sha256(f"{position}\x00{prompt}".encode()).digest()
    order = sorted(range(len(vocab)), key=lambda i: (digest[i % len(digest)] * 31 + i) % 251)
    out, lp = [], -0.5 - digest[0] / 255.0
    for j in order[:max(0, min(k, len(vocab)))]:
        out.append((vocab[j], round(lp, 6)))
        lp -= 0.25 + digest[(j + 7) % len(digest)] / 255.0
    return out


class ScriptedResponder:
    """Replies from a script: queued items first, then fixed replies by prompt, then a default.

    ``queue(item, ...)`` adds items (a :class:`ChatReply`, reply text, :class:`Fault`
    or :class:`Stall`) served one per request in order, to any request, or with
    ``prompt=`` only to requests whose last user message is that prompt. The
    default reply echoes the prompt's last words, with token counts and
    :func:`synthetic_top_logprobs` when log-probabilities are asked for.
    """

    def __init__(self, replies: dict[str, str | ChatReply] | None = None):
        self.replies = dict(replies or {})
        self._any: deque = deque()
        self._by_prompt: dict[str, deque] = {}
        self._lock = threading.Lock()

    def queue(self, *items, prompt: str | None = None) -> None:
        with self._lock:
            target = self._any if prompt is None else self._by_prompt.setdefault(prompt, deque())
            target.extend(items)

    def respond(self, request: ChatRequest) -> ChatReply | Fault | Stall:
        prompt = request.prompt
        with self._lock:
            q = self._by_prompt.get(prompt)
            item = q.popleft() if q else (self._any.popleft() if self._any else None)
        if item is None:
            item = self.replies.get(prompt)
        if item is None:
            return self.default(request)
        if isinstance(item, str):
            return self._reply(request, item)
        return item

    def default(self, request: ChatRequest) -> ChatReply:
        return self._reply(request, "Echo: " + " ".join(_words(request.prompt)[-6:]))

    def _reply(self, request: ChatRequest, text: str) -> ChatReply:
        words = _words(text)
        finish = "stop"
        if len(words) > request.max_tokens:
            words, finish = words[:request.max_tokens], "length"
        tokens = [((" " if i else "") + w) for i, w in enumerate(words)]
        n_in = sum(len(_words(m["content"])) for m in request.messages)
        reply = ChatReply(text=" ".join(words), finish_reason=finish, input_tokens=n_in, output_tokens=len(words))
        if request.logprobs:
            reply.top_logprobs = [synthetic_top_logprobs(request.prompt, i, request.top_logprobs)
                                  for i in range(len(tokens))]
            reply.tokens = [(t, top[0][1] if top else -1.0) for t, top in zip(tokens, reply.top_logprobs)]
        return reply

    @classmethod
    def from_file(cls, path: str | Path) -> "ScriptedResponder":
        """``{"replies": {"<prompt>": "<answer>", ...}}`` from a JSON file."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(data.get("replies", {}))


class HFResponder:
    """Answers from a local model through :class:`memaudit.backends.hf.HFBackend` (one at a time)."""

    def __init__(self, backend):
        self.backend = backend
        self._lock = threading.Lock()  # one generation at a time: the model is not re-entrant

    def respond(self, request: ChatRequest) -> ChatReply:
        from memaudit.backends.base import GenerationParams

        params = GenerationParams(max_new_tokens=request.max_tokens, temperature=request.temperature,
                                  top_p=request.top_p, stop=request.stop,
                                  repetition_penalty=request.repetition_penalty, seed=request.seed or 0)
        text = self.backend.render_messages(request.messages, chat=True)
        k = max(1, request.top_logprobs) if request.logprobs else 0
        with self._lock:
            g = self.backend.generate_text(text, params, top_logprobs=k)
        reply = ChatReply(g.text, g.meta.get("finish_reason", "stop"), g.input_tokens, g.output_tokens)
        if request.logprobs:
            reply.tokens = [tuple(t) for t in g.meta["tokens"]]
            reply.top_logprobs = [[tuple(t) for t in pos[:request.top_logprobs]] for pos in g.meta["top_logprobs"]]
        return reply


# ----------------------------------------------------------------------------- wire formats

def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise BadRequest("message content must be a string or a list of text parts")


def parse_openai_request(body: dict) -> ChatRequest:
    for key in ("model", "messages"):
        if key not in body:
            raise BadRequest(f"missing required parameter: '{key}'")
    if body.get("stream"):
        raise BadRequest("streaming is not supported by this server")
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is supported")
    messages = [{"role": m["role"], "content": _text_of(m.get("content", ""))} for m in body["messages"]]
    top = int(body.get("top_logprobs") or 0)
    if top > MAX_TOP_LOGPROBS:
        raise BadRequest(f"top_logprobs must be at most {MAX_TOP_LOGPROBS}")
    stop = body.get("stop") or ()
    return ChatRequest("openai", body["model"], messages,
                       int(body.get("max_completion_tokens") or body.get("max_tokens") or 256),
                       float(body.get("temperature", 1.0)), float(body.get("top_p", 1.0)),
                       (stop,) if isinstance(stop, str) else tuple(stop), body.get("seed"),
                       bool(body.get("logprobs")), top, float(body.get("repetition_penalty", 1.0)))


def parse_anthropic_request(body: dict) -> ChatRequest:
    for key in ("model", "messages", "max_tokens"):
        if key not in body:
            raise BadRequest(f"{key}: Field required")
    messages = [{"role": "system", "content": _text_of(body["system"])}] if body.get("system") else []
    messages += [{"role": m["role"], "content": _text_of(m.get("content", ""))} for m in body["messages"]]
    return ChatRequest("anthropic", body["model"], messages, int(body["max_tokens"]),
                       float(body.get("temperature", 1.0)), float(body.get("top_p", 1.0)),
                       tuple(body.get("stop_sequences") or ()))


def openai_response(request: ChatRequest, reply: ChatReply, n: int) -> dict:
    logprobs = None
    if request.logprobs and reply.tokens is not None:
        content = []
        for i, (tok, lp) in enumerate(reply.tokens):
            top = (reply.top_logprobs[i] if reply.top_logprobs else [])[:request.top_logprobs]
            content.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                            "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top]})
        logprobs = {"content": content, "refusal": None}
    message = {"role": "assistant", "content": None if reply.refusal else reply.text,
               "refusal": reply.text if reply.refusal else None}
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": request.model,
            "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": reply.finish_reason}],
            "usage": {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
                      "total_tokens": reply.input_tokens + reply.output_tokens},
            "system_fingerprint": "memaudit-serve"}


_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}


def anthropic_response(request: ChatRequest, reply: ChatReply, n: int) -> dict:
    stop = "refusal" if reply.refusal else _ANTHROPIC_STOP.get(reply.finish_reason, reply.finish_reason)
    return {"id": f"msg_{n:024d}", "type": "message", "role": "assistant", "model": request.model,
            "content": [{"type": "text", "text": reply.text}], "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}}


_OPENAI_ERROR_TYPE = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
                      429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}
_ANTHROPIC_ERROR_TYPE = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                         429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def error_body(api: str, status: int, message: str) -> dict:
    if api == "anthropic":
        return {"type": "error", "error": {"type": _ANTHROPIC_ERROR_TYPE.get(status, "api_error"), "message": message}}
    return {"error": {"message": message, "type": _OPENAI_ERROR_TYPE.get(status, "server_error"), "param": None,
                      "code": None}}


# ----------------------------------------------------------------------------- the server

@dataclass
class RequestRecord:
    path: str
    api: str
    prompt: str | None
    arrived: float  # time.monotonic()
    finished: float | None = None
    status: int | None = None
    authorization: str | None = None  # kept in memory only, so tests can check which key was sent
    request: ChatRequest | None = None  # the parsed request (parameters as received)


class ChatServer:
    """A threaded HTTP server speaking both APIs; ``with ChatServer(responder) as server: ...``.

    ``latency`` seconds are added to every answer (the benchmark's fixed
    per-request latency). ``records`` logs every request; ``max_in_flight`` is
    the most requests it was ever answering at once.
    """

    def __init__(self, responder: Responder, *, host: str = "127.0.0.1", port: int = 0, latency: float = 0.0,
                 model_name: str = "memaudit-local"):
        self.responder = responder
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
                                   authorization=self.headers.get("Authorization") or self.headers.get("x-api-key"))
            server._begin(record)
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
                if server.latency:
                    time.sleep(server.latency)
                answer = server.responder.respond(request)
                if isinstance(answer, Stall):
                    time.sleep(answer.seconds)
                    answer = server.responder.default(request)  # type: ignore[attr-defined]
                if isinstance(answer, Fault):
                    if answer.raw is not None:
                        status = 200
                        return self._send(200, answer.raw, answer.headers)
                    status = answer.status
                    return self._json(answer.status, error_body(api, answer.status, answer.message), answer.headers)
                n = len(server.records)
                status = 200
                shape = openai_response if api == "openai" else anthropic_response
                return self._json(200, shape(request, answer, n))
            finally:
                server._end(record, status)

    return Handler


# ----------------------------------------------------------------------------- command line

def serve_main(argv: Sequence[str] | None = None) -> int:
    """``memaudit serve``: serve a local model (or a reply script) until interrupted."""
    p = argparse.ArgumentParser(prog="memaudit serve", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--path", help="a local Hugging Face model directory")
    src.add_argument("--hub-id", help="a hub model id (needs --revision)")
    src.add_argument("--builtin", help="a builtin demo model, e.g. smollm2-135m-instruct")
    src.add_argument("--scripted", type=Path, help='no model: answer from a JSON file {"replies": {prompt: answer}}')
    p.add_argument("--revision", help="the hub commit to load (with --hub-id)")
    p.add_argument("--adapter", help="a peft adapter directory on top of the model")
    p.add_argument("--name", default=None, help="the model name clients send (default: derived from the source)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto: bfloat16 where the hardware computes it natively, else float32")
    p.add_argument("--cache-dir", default="resources/cache", help="where builtin models are converted")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer (benchmarks)")
    args = p.parse_args(argv)

    if args.scripted:
        responder: Responder = ScriptedResponder.from_file(args.scripted)
        name = args.name or "scripted"
    else:
        from memaudit.backends.hf import HFBackend
        from memaudit.models.loading import load_causal_lm

        if args.path:
            spec: dict = {"path": args.path}
        elif args.hub_id:
            spec = {"hub_id": args.hub_id, "revision": args.revision}
        else:
            spec = {"builtin": args.builtin, "cache_dir": args.cache_dir}
        if args.adapter:
            spec["adapter"] = args.adapter
        model, tok = load_causal_lm(spec, dtype=args.dtype, device=args.device)
        responder = HFResponder(HFBackend(spec, model=model, tokenizer=tok))
        name = args.name or Path(args.path or args.hub_id or args.builtin).name
    server = ChatServer(responder, host=args.host, port=args.port, latency=args.latency, model_name=name)
    print(f"serving {name!r} at {server.openai_base_url} (OpenAI Chat Completions; Anthropic Messages at "
          f"{server.anthropic_base_url}/v1/messages); Ctrl-C stops", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
    return 0
