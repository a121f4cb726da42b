"""Greedy generations of local models, cached by content: one decoding serves every probe that asks it.

The prefix probe and CopyBench's literal mode both ask a model to continue a prefix greedily. Where
their prompts are the same (a bare prefix of the same words, the same token limit and repetition
penalty), the second job reads the first one's continuations instead of decoding again, as API
models already share the response cache (:mod:`memaudit.backends.cache`, the same SQLite format).
Whether a text is a refusal is read from the text each time, never from the cache.

The key is everything the tokens depend on, and nothing a job could get wrong:

- ``weights``: the SHA-256 of the loaded parameters and buffers (names, dtypes, shapes, bytes), so a
  re-fine-tuned model, another adapter or another dtype never reads an old entry, whatever its path;
- ``device``: the device type (a GPU's kernels may break a near-tie differently);
- ``decoder``: the SHA-256 of the decoding code (:mod:`memaudit.models.sampling`,
  :mod:`memaudit.backends.hf`), so a change there invalidates every entry by itself;
- ``prompt_ids``: the prompt's token ids as the model sees them (chat template, system prompt and
  context token applied), with the SHA-256 of the tokenizer's definition (:func:`tokenizer_digest`), which
  decodes the cached ids to text;
- ``end_ids``: the token ids a row ends at (:func:`memaudit.models.loading.greedy_end_ids`: the model
  directory's ``generation_config.json``, which no weight holds, else the tokenizer's EOS), so a model
  whose end tokens changed never reads continuations that ran past its new ones or stopped at its old ones;
- the decoding parameters that shape the output: ``max_new_tokens``, ``repetition_penalty``, ``stop``.

How many rows are decoded together is not in the key: the continuous-batching sampler gives the
same tokens whatever the batch (``tests/test_memfree.py``). MemFree decodings are never cached (their
rejection corpus is part of the decoding), nor are encoder-decoder models or sampled decodings.
"""

from __future__ import annotations

import hashlib
import importlib.util
import time
from pathlib import Path
from typing import Callable, Sequence

from memaudit.backends.base import Generation, GenerationParams
from memaudit.backends.cache import ResponseCache, request_key, utc_now
from memaudit.backends.refusal import is_refusal

_DECODER_MODULES = ("memaudit.models.sampling", "memaudit.backends.hf")
# Prompts decoded per call, each call's generations stored before the next: a killed job keeps what it decoded.
# Large beside a batch (16-64 rows), so the sampler's batch rarely runs short at a chunk's end; the tokens are
# the same whatever the chunk (the continuous-batching sampler's rows do not depend on each other).
CHUNK_PROMPTS = 256


def weights_digest(model) -> str:
    """SHA-256 of a model's parameters and buffers: names, dtypes, shapes and bytes, in name order."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().contiguous().reshape(-1).cpu()
        h.update(f"{name}|{t.dtype}|{tuple(tensor.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def tokenizer_digest(tokenizer) -> str:
    """SHA-256 of what decides a tokenizer's ids and its decoded text: a fast tokenizer's whole definition (its
    ``tokenizer.json``: vocabulary, merges, normaliser, decoder), a slow one's vocabulary, and the special
    tokens and space clean-up ``decode`` applies. The cached texts are decoded ids: a tokenizer edited in
    place (its decoder, a token's text) at the same size was read as the same one."""
    import json

    h = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    h.update(backend.to_str().encode() if backend is not None
             else json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    h.update(json.dumps([type(tokenizer).__name__, len(tokenizer), list(tokenizer.all_special_tokens),
                         bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))]).encode())
    return h.hexdigest()


def decoder_digest() -> str:
    """SHA-256 of the decoding code's source files."""
    h = hashlib.sha256()
    for module in _DECODER_MODULES:
        h.update(Path(importlib.util.find_spec(module).origin).read_bytes())
    return h.hexdigest()


class GenerationCache:
    """Greedy generations of one loaded model, in a :class:`ResponseCache` file."""

    def __init__(self, path: str | Path, model, tokenizer, *, name: str | None):
        self.path = Path(path)
        self.name = name
        self._cache = ResponseCache(self.path)
        from memaudit.models.loading import greedy_end_ids

        self._identity = {"backend": "hf-greedy", "weights": weights_digest(model),
                          "device": next(model.parameters()).device.type, "decoder": decoder_digest(),
                          "tokenizer": tokenizer_digest(tokenizer),
                          "end_ids": [int(t) for t in greedy_end_ids(model, tokenizer)]}

    def close(self) -> None:
        self._cache.close()

    def key(self, prompt_ids: Sequence[int], params: GenerationParams) -> tuple[str, dict]:
        request = dict(self._identity, prompt_ids=list(prompt_ids), max_new_tokens=params.max_new_tokens,
                       repetition_penalty=params.repetition_penalty, stop=list(params.stop))
        return request_key(request), request

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: GenerationParams,
                 decode: Callable[[list[int]], list[Generation]]) -> list[Generation]:
        """The generations of ``prompt_ids``: cached ones read back (``from_cache``), the others
        decoded by ``decode(indices)`` (each distinct prompt once), :data:`CHUNK_PROMPTS` at a time, each
        chunk stored as soon as it is decoded: decoded in one call and stored after it, a job killed an
        hour into its prompts (SIGKILL, a lost node, a time limit's) kept none of them."""
        keyed = [self.key(ids, params) for ids in prompt_ids]
        hits = self._cache.get_many(k for k, _ in keyed)
        todo, seen = [], set()
        for i, (key, _) in enumerate(keyed):
            if key not in hits and key not in seen:
                seen.add(key)
                todo.append(i)
        fresh = {}
        for start in range(0, len(todo), CHUNK_PROMPTS):
            chunk = todo[start:start + CHUNK_PROMPTS]
            started, requested_at = time.monotonic(), utc_now()
            decoded = dict(zip((keyed[i][0] for i in chunk), decode(chunk)))
            seconds = (time.monotonic() - started) / len(chunk)
            for i in chunk:
                key, request = keyed[i]
                g = decoded[key]
                self._cache.put(key=key, backend="hf", model_id=self.name or "", request=request,
                                response={"text": g.text, "status": g.status, "meta": g.meta},
                                input_tokens=g.input_tokens, output_tokens=g.output_tokens,
                                requested_at=requested_at, seconds=seconds, attempts=1)
            fresh.update(decoded)
        out = []
        for key, _ in keyed:
            if key in fresh:
                out.append(fresh[key])
            else:
                c = hits[key]
                # whether a text is a refusal is read again, not cached: a change to the refusal patterns
                # (memaudit.backends.refusal) reaches every cached text, as the API cache's parse does
                out.append(Generation(text=c.response["text"], input_tokens=c.input_tokens,
                                      output_tokens=c.output_tokens, meta=dict(c.response["meta"]),
                                      status="refusal" if is_refusal(c.response["text"]) else "ok",
                                      from_cache=True, requested_at=c.requested_at))
        return out
