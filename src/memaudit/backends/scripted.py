"""A :class:`~memaudit.backends.server.ChatServer` responder that answers from a script, not a model.

What the tests, the API benchmark and ``memaudit serve --scripted`` put behind
the server so that the real SDK clients can be driven without a model:
scripted replies by prompt, queued faults (429 with Retry-After, 5xx, malformed
JSON as :class:`~memaudit.backends.server.Fault`, stalls past the client's
timeout as :class:`~memaudit.backends.server.Stall`), and a deterministic
default reply with synthetic log-probabilities.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from pathlib import Path

from memaudit.backends.server import ChatReply, ChatRequest, Fault, Stall

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
        """``{"replies": {"<prompt>": "<answer>", ...}}`` from a JSON file; a file of another shape is an
        :class:`~memaudit.errors.InputError` naming it (a number as an answer failed in each request's thread,
        a misspelt key served the default to every prompt)."""
        from memaudit.errors import InputError
        from memaudit.io import read_json

        data = read_json(path, unique_keys=True)  # a prompt given twice kept its last answer unsaid
        shape = '{"replies": {prompt: answer, ...}}'
        if not isinstance(data, dict):
            raise InputError(f"{path}: expected {shape}, not {_json_kind(data)}")
        unknown = sorted(set(data) - {"replies"})
        if unknown:
            raise InputError(f'{path}: unknown key {json.dumps(unknown[0])}; the file is {shape}')
        replies = data.get("replies", {})
        if not isinstance(replies, dict):
            raise InputError(f"{path}: replies: must be an object {{prompt: answer, ...}}, not {_json_kind(replies)}")
        for prompt, answer in replies.items():
            if not isinstance(answer, str):
                raise InputError(f"{path}: replies: the answer to {json.dumps(prompt)} must be a string, "
                                 f"not {_json_kind(answer)}")
        return cls(replies)


def _json_kind(value) -> str:
    """A JSON value's kind in words, for errors ("a list", "an int")."""
    name = {dict: "object", list: "list", str: "string", bool: "boolean", int: "int", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)
    return ("an " if name[0] in "aeiou" else "a ") + name if name != "null" else "null"

