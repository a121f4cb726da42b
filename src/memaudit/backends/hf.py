"""Local Hugging Face causal LMs (white-box): token statistics, option log-probabilities, generation,
per-text gradient norms, word log-probabilities. Encoder-decoder models (T5, Flan-T5) serve
generation only: the roles that ask a model and read its reply (CopyBench's event judge)."""

from __future__ import annotations

import logging
import re
import weakref
from pathlib import Path
from typing import Sequence

from memaudit.backends.base import (GENERATE, GRADIENT_NORMS, OPTION_LOGPROBS, TOKEN_LOGPROBS, WORD_LOGPROBS,
                                    Backend, Generation, GenerationParams, option_token_ids, system_into_user)
from memaudit.errors import ConfigError, PromptTooLongError

log = logging.getLogger(__name__)


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """``text`` cut before each of ``stops`` in turn that it holds, and the last stop string that cut it
    (None: none did; the answer then ended at its end token or its token limit)."""
    matched = None
    for s in stops:
        if s and s in text:
            text, matched = text[:text.index(s)], s
    return text, matched


def finish_meta(n_out: int, limit: int, matched: str | None, *, ended: bool = False) -> dict:
    """A generation's ``finish_reason`` (``length`` only when the token limit ended it: no stop string
    did, nor the end token, ``ended``, which may be the last token the limit allows, as OpenAI and vLLM
    say ``stop`` then) and, when a stop string ended it, ``stop_sequence``."""
    meta: dict = {"finish_reason": "length" if n_out >= limit and matched is None and not ended else "stop"}
    if matched is not None:
        meta["stop_sequence"] = matched
    return meta


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte as one printable character (printable Latin-1 bytes as
    themselves, the others from U+0100 on), as byte-level BPE tokenizers spell their tokens."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}


_BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


_DECODER_TYPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _decoder_types(tokenizer) -> set[str]:
    """The types of a fast tokenizer's decoder (``ByteLevel``, ``ByteFallback``, ...), a sequence's
    included; empty for a tokenizer without a ``tokenizers`` backend. Read once per tokenizer (its
    JSON holds the whole vocabulary)."""
    try:
        return _DECODER_TYPES[tokenizer]
    except (KeyError, TypeError):
        pass
    types = _read_decoder_types(tokenizer)
    try:
        _DECODER_TYPES[tokenizer] = types
    except TypeError:  # pragma: no cover - an object that takes no weak reference
        pass
    return types


def _read_decoder_types(tokenizer) -> set[str]:
    import json

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return set()
    types: set[str] = set()

    def walk(d) -> None:
        if isinstance(d, dict):
            types.add(str(d.get("type")))
            for sub in d.get("decoders") or []:
                walk(sub)

    walk(json.loads(backend.to_str()).get("decoder"))
    return types


def token_bytes(tokenizer, token_ids: Sequence[int]) -> list[bytes]:
    """The raw bytes each token stands for, as OpenAI's ``logprobs.content[].bytes`` gives them.

    A token may hold part of a character's UTF-8 (one or two bytes of an emoji or a CJK character,
    which byte-level BPE splits across tokens): decoded alone it is U+FFFD, whose UTF-8 is not the
    token's. Its bytes are read from the token's spelling instead: byte-level BPE (GPT-2, SmolLM2,
    Llama 3; a ``ByteLevel`` decoder or GPT-2's ``byte_decoder``) spells each byte as one character
    of GPT-2's alphabet; SentencePiece's byte fallback (Llama 2, Gemma) spells a byte ``<0xE2>`` and a
    space ``▁``. Added and special tokens are their text. Any other tokenizer: the token's text
    decoded alone, in UTF-8.
    """
    types = _decoder_types(tokenizer)
    byte_level = "ByteLevel" in types or getattr(tokenizer, "byte_decoder", None) is not None
    fallback = "ByteFallback" in types
    added = set(getattr(tokenizer, "added_tokens_decoder", {}) or ())
    out = []
    for i in token_ids:
        i = int(i)
        piece = tokenizer.convert_ids_to_tokens(i) if (byte_level or fallback) and i not in added else None
        if piece is None:
            out.append(tokenizer.decode([i]).encode("utf-8"))
        elif byte_level and all(c in _BYTE_DECODER for c in piece):
            out.append(bytes(_BYTE_DECODER[c] for c in piece))
        elif fallback and _BYTE_FALLBACK.fullmatch(piece):
            out.append(bytes([int(piece[3:5], 16)]))
        elif fallback:
            out.append(piece.replace("▁", " ").encode("utf-8"))
        else:
            out.append(tokenizer.decode([i]).encode("utf-8"))
    return out


def _first_stop_end(tok, ids: Sequence[int], stops: Sequence[str]) -> int:
    """How many of ``ids`` a stop string first appears in (decoded as the answer is); ``len(ids)`` if in none."""
    lo, hi = 1, len(ids)
    while lo < hi:  # a prefix that holds a stop string: every longer one holds it too
        mid = (lo + hi) // 2
        if any(s in tok.decode(ids[:mid], skip_special_tokens=True) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    return hi


def special_stop_ids(tok, stops: Sequence[str]) -> dict[int, str]:
    """The stop strings that are one of the tokenizer's special tokens (``"<|im_end|>"``), by token id.

    An answer is decoded without its special tokens, so such a stop string is never in its text: it is
    matched as its token instead (an added token that is not special is decoded, and matched as text)."""
    special = set(tok.all_special_tokens)
    special |= {t.content for t in (getattr(tok, "added_tokens_decoder", None) or {}).values() if t.special}
    return {int(tok.convert_tokens_to_ids(s)): s for s in reversed(stops) if s in special}


def cut_answer(tok, ids: Sequence[int], stops: Sequence[str], *,
               count: bool = True) -> tuple[str, str | None, int | None]:
    """An answer's tokens decoded (without special tokens) and cut before the first of ``stops``, as
    :func:`cut_at_stop` cuts; the stop string that ended it (None: none did); and how many of ``ids`` run
    up to the end of that stop string (``len(ids)``: none). A stop string that is a special token
    (:func:`special_stop_ids`) ends the answer at that token. ``count=False``: None for that count where a
    stop string in the text ended it (its search decodes the answer again some times), for an answer
    decoded to its end and cut afterwards, whose ``output_tokens`` count every token decoded."""
    by_id = special_stop_ids(tok, stops)
    first = next((j for j, t in enumerate(ids) if int(t) in by_id), None)
    head = ids if first is None else ids[:first]
    text, matched = cut_at_stop(tok.decode(head, skip_special_tokens=True), stops)
    if matched is not None:
        return text, matched, _first_stop_end(tok, head, stops) if count else None
    if first is not None:
        return text, by_id[int(ids[first])], first + 1
    return text, None, len(ids)


class HFBackend(Backend):
    capabilities = frozenset({TOKEN_LOGPROBS, OPTION_LOGPROBS, GENERATE, GRADIENT_NORMS, WORD_LOGPROBS})

    def __init__(self, load_spec: dict, *, name: str | None = None, dtype: str = "float32", device: str = "auto",
                 batch_size: int = 8, max_tokens: int = 512, model=None, tokenizer=None,
                 generation_cache: str | Path | None = None):
        from memaudit.models.loading import architecture

        if model is None:
            from memaudit.models.loading import load_model, resolve_dtype

            dtype = resolve_dtype(dtype, device)  # `auto`: bfloat16 only where the hardware has it
            model, tokenizer = load_model(load_spec, dtype=dtype, device=device)
        self.model, self.tokenizer = model, tokenizer
        self.architecture = architecture(model)
        self.encoder_decoder = self.architecture == "encoder-decoder"
        if self.architecture != "causal":
            self.capabilities = frozenset({GENERATE if self.encoder_decoder else WORD_LOGPROBS})
        # What the model was actually loaded as (a model handed in is described as it is)
        first = next(model.parameters(), None)
        self.dtype = str(first.dtype).removeprefix("torch.") if first is not None else dtype
        self.device = str(first.device) if first is not None else device
        self.load_spec = load_spec
        self.name = name  # the model's name in the config (the `model` column of score tables)
        self.batch_size = batch_size
        from memaudit.models.loading import clamp_tokens

        # Texts are cut to what the position embeddings allow (one slot for the context token).
        self.max_tokens = clamp_tokens(model, max_tokens)
        # Greedy generations cached by content (memaudit.backends.generation_cache), opened on first use.
        self.generation_cache_path = generation_cache
        self._generation_cache = None

    def close(self) -> None:
        if self._generation_cache is not None:
            self._generation_cache.close()
            self._generation_cache = None

    def describe(self) -> dict:
        from memaudit.models.loading import count_parameters

        return {"backend": "hf", "load": self.load_spec, "n_params": count_parameters(self.model),
                "dtype": self.dtype, "device": self.device,
                "architecture": self.architecture}

    def _causal_only(self, what: str) -> None:
        if self.architecture == "encoder-decoder":
            raise ConfigError(f"model {self.name!r} is an encoder-decoder model ({self.model.config.model_type}): "
                              f"it serves generation only (e.g. copybench's event_judge); {what} needs a causal LM")
        if self.architecture == "masked":
            raise ConfigError(f"model {self.name!r} is a masked LM ({self.model.config.model_type}): it serves only "
                              f"as the cloze probes' reference model (word log-probabilities); {what} needs a causal LM")

    def require(self, needs, role: str) -> None:
        """A one-line :class:`ConfigError` naming the model and ``role`` (a config key, a probe) where this model
        cannot serve what the role ``needs`` (a masked LM or an encoder-decoder model in a causal LM's role, a
        masked LM whose tokenizer has no mask token): said when the job opens the model, not at its first use."""
        from memaudit.models.loading import NOT_CAUSAL

        missing = frozenset(needs) - self.capabilities
        kind = f"({self.model.config.model_type})"
        if missing:
            what, serves = NOT_CAUSAL[self.architecture]
            raise ConfigError(f"{role}: model {self.name!r} is {what} {kind}, which cannot serve "
                              f"{', '.join(sorted(missing))}; it can serve only {serves}")
        if self.architecture == "masked" and getattr(self.tokenizer, "mask_token_id", None) is None:
            raise ConfigError(f"{role}: model {self.name!r} is a masked LM {kind} whose tokenizer has no mask token: "
                              "the word cannot be masked")

    def _generative_only(self) -> None:
        if self.architecture == "masked":
            self._causal_only("generation")

    def token_stats(self, texts: Sequence[str], *, with_distribution: bool = True, progress=None):
        from memaudit.models.token_stats import compute_token_stats

        self._causal_only("token statistics")
        return compute_token_stats(self.model, self.tokenizer, texts, batch_size=self.batch_size,
                                   max_tokens=self.max_tokens, with_distribution=with_distribution,
                                   progress=progress)

    def gradient_norms(self, texts: Sequence[str], *, params="all", batch_size: int | None = None):
        """KTD's score magnitude: ``||d/d theta (mean token log-likelihood of text)||_2`` per text.

        :func:`memaudit.models.grad_norms.per_sample_grad_norms` with this backend's tokenizer,
        ``max_tokens`` and batch size (``batch_size`` overrides it); ``params`` is ``"all"``,
        ``"lora"`` or glob patterns over the parameter names. Gradients are computed in float32:
        a model loaded in another dtype is upcast once, on a copy kept beside it. ``"lora"`` reads
        the adapter of the load spec, which loading merged into the weights, from an unmerged copy.
        """
        import importlib

        self._causal_only("gradient norms")
        # Loaded by name, not imported: an import would make every probe family that uses this
        # backend fingerprint the gradient code too (memaudit.probes.registry), as with MemFree below.
        grad_norms = importlib.import_module("memaudit.models.grad_norms")
        model = self._unmerged_model() if params == "lora" else self._float32_model()
        return grad_norms.per_sample_grad_norms(model, self.tokenizer, texts, params=params,
                                                batch_size=batch_size or self.batch_size,
                                                max_tokens=self.max_tokens)

    def word_logprobs(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
                      bounds: Sequence[Sequence[tuple[int, int]]] | None = None,
                      batch_size: int | None = None, fills: int | None = None) -> list[list[dict]]:
        """Per text, per character span: the word's log-probability, its first token's, and that token's rank.

        A causal LM: ``log p(word | left context)``, :func:`memaudit.models.word_logprobs.compute_word_logprobs`
        with this backend's tokenizer and ``max_tokens`` (longer texts are read in overlapping windows,
        ``truncated`` in their records): one forward pass per text, every span read from it,
        ``batch_size`` texts at a time (default: the backend's); ``bounds`` is not read (the whole left
        context is). A masked LM: the word masked in its window ``bounds`` (per span ``(left, right)``
        characters; default the whole text), both sides read,
        :func:`memaudit.models.masked_word_logprobs.compute_masked_word_logprobs`: one pass per span.
        ``fills``: a causal LM reads both sides of the word too, its ``fills`` most probable candidate
        fills scored by the likelihood of the whole window ``bounds``,
        :func:`memaudit.models.window_word_logprobs.compute_window_word_logprobs` (``K + 1`` passes per span).
        Every record's ``scoring`` says which (``causal``, ``masked``, ``window``).
        """
        import importlib

        if fills is not None and self.architecture == "masked":
            raise ConfigError(f"model {self.name!r} is a masked LM, which reads both sides of a word already: "
                              f"probes.cloze.reference.fills (whole-window scoring of candidate fills) is for a "
                              f"causal reference; remove it")
        if self.architecture == "masked":
            masked = importlib.import_module("memaudit.models.masked_word_logprobs")
            return masked.compute_masked_word_logprobs(self.model, self.tokenizer, texts, spans, bounds=bounds,
                                                       batch_size=batch_size or self.batch_size,
                                                       max_tokens=self.max_tokens)
        self._causal_only("word log-probabilities")
        # Loaded by name, as gradient_norms above: only the families that import the module fingerprint it.
        if fills is not None:
            window = importlib.import_module("memaudit.models.window_word_logprobs")
            return window.compute_window_word_logprobs(self.model, self.tokenizer, texts, spans, fills=fills,
                                                       bounds=bounds, batch_size=batch_size or self.batch_size,
                                                       max_tokens=self.max_tokens)
        word_logprobs = importlib.import_module("memaudit.models.word_logprobs")
        return word_logprobs.compute_word_logprobs(self.model, self.tokenizer, texts, spans,
                                                   batch_size=batch_size or self.batch_size,
                                                   max_tokens=self.max_tokens)

    def _unmerged_model(self):
        """For ``params="lora"``: the model with its adapter as separate weights, in float32.

        The adapter of a load spec is merged into the weights at load (:func:`memaudit.models.loading.load_model`),
        which leaves no LoRA weight to select; a second copy is loaded unmerged, once. A model without an
        adapter in its load spec is used as it is (one handed in may hold its adapters unmerged)."""
        if not self.load_spec.get("adapter") or any("lora_" in n for n, _ in self.model.named_parameters()):
            return self._float32_model()
        if getattr(self, "_unmerged_copy", None) is None:
            from memaudit.models.loading import load_model

            self._unmerged_copy = load_model(self.load_spec, dtype="float32", device=self.device,
                                             merge_adapter=False)[0]
        return self._unmerged_copy

    def _float32_model(self):
        import copy

        import torch

        if all(p.dtype == torch.float32 for p in self.model.parameters() if p.is_floating_point()):
            return self.model
        if getattr(self, "_float32_copy", None) is None:
            self._float32_copy = copy.deepcopy(self.model).float()
        return self._float32_copy

    def _render(self, prompt: str, params: GenerationParams) -> str:
        messages = ([{"role": "system", "content": params.system_prompt}] if params.system_prompt else [])
        messages.append({"role": "user", "content": prompt})
        return self.render_messages(messages, chat=params.chat)

    def render_messages(self, messages: Sequence[dict], *, chat: bool = True) -> str:
        """A conversation as model input: the chat template if the tokenizer has one, else plain text.

        Plain text joins the messages' contents with blank lines (system prompt first). A template that
        refuses a system message (Mistral-Instruct's, Prometheus-7B's: "Conversation roles must
        alternate", "Only user and assistant roles are supported") gets the system prompt before the
        first user message, a blank line between, as CopyBench's paper and reference code do for models
        without a system role (:func:`~memaudit.backends.base.system_into_user`); the log says so once.
        """
        if not (chat and getattr(self.tokenizer, "chat_template", None)):
            return "\n\n".join(m["content"] for m in messages)
        from jinja2.exceptions import TemplateError

        def render(conversation):
            return self.tokenizer.apply_chat_template(list(conversation), tokenize=False, add_generation_prompt=True)

        if not any(m["role"] == "system" for m in messages):
            return render(messages)
        if getattr(self, "_system_merged", False):
            return render(system_into_user(messages))
        try:
            return render(messages)
        except TemplateError as refused:
            try:
                text = render(system_into_user(messages))
            except TemplateError:
                raise refused from None
            log.info("%s: the chat template refuses a system message (%s); the system prompt goes before "
                     "the user's, a blank line between", self.name, refused)
            self._system_merged = True
            return text

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[Sequence[str]], *,
                        params: GenerationParams = GenerationParams(), batch_size: int | None = None,
                        share_prefix: bool | str = "auto") -> list[dict[str, float]]:
        """log p(option's first token | rendered prompt), read at the answer position by teacher forcing.

        Each option string counts with its variants (``"A"`` and ``" A"``, each read as the last
        token of its encoding: :func:`~memaudit.backends.base.option_token_ids`); their
        probabilities are summed, since a tokenizer may emit either. Prompts are rendered and tokenised as
        :meth:`generate` renders and tokenises them (system prompt, chat template; plain text after the
        context token, :meth:`_prompt_ids`); every prefix that prompts share goes through the model
        once (:func:`memaudit.models.forward.next_token_logprobs`). ``share_prefix="auto"`` walks the
        prompts' token trie on a CPU (``"tree"``: a pass costs in proportion to its tokens, and the
        trie runs a third fewer of DE-COP's) and elsewhere batches ``batch_size`` prompts (default: the backend's)
        around their common prefix (``"batch"``: one large pass beats many small ones on a GPU).
        """
        import torch

        from memaudit.models.forward import next_token_logprobs

        self._causal_only("option log-probabilities")
        if len(prompts) != len(options):
            raise ValueError(f"{len(prompts)} prompts but {len(options)} option lists")
        tok = self.tokenizer
        # tokenised as generate() tokenises them: plain text (no chat template) after the context token
        encoded = [self._prompt_ids(self._render(p, params), params) for p in prompts]
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        variant_ids: dict[str, list[int]] = {}
        for opt in {o for opts in options for o in opts}:
            variant_ids[opt] = option_token_ids(tok, opt)
        if share_prefix == "auto":
            share_prefix = "tree" if self.model.device.type == "cpu" else "batch"
        out: list[dict[str, float]] = []
        for logp in next_token_logprobs(self.model, encoded, pad_id=pad, batch_size=batch_size or self.batch_size,
                                        share_prefix=share_prefix):
            for row in logp:
                opts = options[len(out)]
                out.append({o: float(torch.logsumexp(row[variant_ids[o]], 0)) for o in opts})
        return out

    def generate(self, prompts: Sequence[str], params: GenerationParams, *,
                 top_logprobs: int = 0) -> list[Generation]:
        """Answers to ``prompts``; with ``top_logprobs > 0`` also each position's top alternatives.

        ``meta["top_logprobs"]`` then lists, per generated position, the ``[token, logprob, bytes]``
        of the *unprocessed* next-token distribution (before temperature and repetition penalty),
        as the OpenAI API reports them, and ``meta["tokens"]`` the generated tokens alike;
        ``bytes`` are the token's raw bytes (:func:`token_bytes`), its text may hold U+FFFD.
        """
        self._generative_only()
        return [self.generate_text(self._render(prompt, params), params, top_logprobs=top_logprobs)
                for prompt in prompts]

    # `memfree` is a memaudit.probes.copybench.memfree.NGramIndex, named but not imported here: an
    # import would make every probe family that uses this backend fingerprint the MemFree code too.
    def generate_batched(self, prompts: Sequence[str], params: GenerationParams, *,
                         memfree: NGramIndex | None = None, max_rows: int = 16) -> list[Generation]:  # noqa: F821
        """Greedy answers to ``prompts``, up to ``max_rows`` decoded together; optionally MemFree.

        The same tokens as :meth:`generate` (greedy, ``params.repetition_penalty``), by continuous
        batching (:func:`memaudit.models.sampling.sample`): prompts rendered as :meth:`generate`
        renders them, admitted shortest first, each row leaving at its end token, its token limit
        or the first of ``params.stop`` in its text, which is cut there as :meth:`generate` cuts it.
        ``memfree`` rejects every token that would complete one of its n-grams
        (:mod:`memaudit.probes.copybench.memfree`; the prompt counts).

        Unlike :meth:`generate`, a row stops at a stop string: its ``output_tokens`` are the tokens
        generated up to there, and its ``finish_reason`` is ``stop``.
        """
        if params.temperature > 0:
            raise ValueError("generate_batched decodes greedily: temperature must be 0")
        self._generative_only()
        if self.encoder_decoder:
            if memfree is not None:
                raise ConfigError(f"model {self.name!r}: MemFree decoding is implemented for causal LMs only")
            return self._generate_seq2seq([self._render(p, params) for p in prompts], params, max_rows=max_rows)
        encoded = [self._prompt_ids(self._render(p, params), params) for p in prompts]
        if params.fit_context:
            return self._fitted(encoded, params, memfree=memfree, max_rows=max_rows)
        return self._generate_encoded(encoded, params, memfree=memfree, max_rows=max_rows)

    def _fitted(self, encoded: list[list[int]], params: GenerationParams, *, memfree, max_rows: int):
        """``params.fit_context``: each prompt decoded with as many new tokens as its model's positions leave
        (at most ``max_new_tokens``); prompts of one limit together, so a prompt that fits is decoded (and
        cached) as without the flag. A prompt that leaves no position is the error it always is."""
        import dataclasses

        want = params.max_new_tokens
        limits = [self._new_tokens_that_fit(len(e), want) for e in encoded]
        out: list[Generation | None] = [None] * len(encoded)
        for limit in sorted(set(limits), reverse=True):
            rows = [i for i, n in enumerate(limits) if n == limit]
            fitted = dataclasses.replace(params, max_new_tokens=limit, fit_context=False)
            for i, g in zip(rows, self._generate_encoded([encoded[i] for i in rows], fitted, memfree=memfree,
                                                         max_rows=max_rows)):
                if limit < want:
                    g.meta["capped_to"] = limit
                out[i] = g
        return out

    def _new_tokens_that_fit(self, n_prompt: int, want: int) -> int:
        """At most ``want`` new tokens after a prompt of ``n_prompt`` tokens within a causal model's positions;
        a :class:`PromptTooLongError` where the prompt leaves none (it is never cut)."""
        from memaudit.models.loading import model_max_length

        positions = None if self.encoder_decoder else model_max_length(self.model)
        if positions is None:
            return want
        if n_prompt >= positions:
            raise PromptTooLongError(f"model {self.name!r}: a prompt of {n_prompt} tokens leaves none of its "
                                     f"{positions} positions for new tokens (the prompt is never cut silently)")
        return min(want, positions - n_prompt)

    def _generate_encoded(self, encoded: list[list[int]], params: GenerationParams, *, memfree,
                          max_rows: int) -> list[Generation]:
        """:meth:`generate_batched` of prompts rendered and tokenised: through the generation cache where
        there is one and no MemFree index."""
        if memfree is None and self.generation_cache_path is not None:
            if self._generation_cache is None:
                from memaudit.backends.generation_cache import GenerationCache

                self._generation_cache = GenerationCache(self.generation_cache_path, self.model, self.tokenizer,
                                                         name=self.name)
            return self._generation_cache.generate(
                encoded, params, lambda todo: self._decode_greedy([encoded[i] for i in todo], params,
                                                                  memfree=None, max_rows=max_rows))
        return self._decode_greedy(encoded, params, memfree=memfree, max_rows=max_rows)

    def generate_rendered_batched(self, texts: Sequence[str], params: GenerationParams, *,
                                  max_rows: int = 16) -> list[Generation]:
        """:meth:`generate_batched` for inputs already rendered (:meth:`render_messages`): the greedy
        answers ``memaudit serve`` decodes together for the requests waiting at once."""
        if params.temperature > 0:
            raise ValueError("generate_rendered_batched decodes greedily: temperature must be 0")
        self._generative_only()
        if self.encoder_decoder:
            return self._generate_seq2seq(list(texts), params, max_rows=max_rows)
        return self._decode_greedy([self._prompt_ids(t, params) for t in texts], params, memfree=None,
                                   max_rows=max_rows)

    def _decode_greedy(self, encoded: list[list[int]], params: GenerationParams, *,
                       memfree, max_rows: int) -> list[Generation]:
        """:meth:`generate_batched`'s decoding of prompts already rendered and tokenised."""
        from memaudit.backends.refusal import is_refusal
        from memaudit.models.loading import greedy_end_ids
        from memaudit.models.sampling import sample

        tok = self.tokenizer
        self._check_fits(max((len(e) for e in encoded), default=0), params)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        eos_ids = greedy_end_ids(self.model, tok)
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos_ids[0]
        stops = [s for s in params.stop if s]
        stop_ids = set(special_stop_ids(tok, stops))
        # A stop string ends within the tokens of the last check (4 steps) plus its own length.
        tail = 4 + max((len(s.encode("utf-8")) for s in stops), default=0)

        def done(i: int, ids: list[int]) -> bool:
            text = tok.decode(ids[-tail:], skip_special_tokens=True)
            return any(s in text for s in stops) or not stop_ids.isdisjoint(ids[-tail:])

        limit = params.max_new_tokens
        out = sample(self.model, [encoded[i] for i in order], [1] * len(order), [limit] * len(order),
                     eos_ids=eos_ids, pad_id=pad, temperature=0.0, done=done if stops else None, check_every=4,
                     max_rows=max_rows, repetition_penalty=params.repetition_penalty,
                     processor=memfree.mask_logits if memfree is not None else None)
        generations: list[Generation | None] = [None] * len(encoded)
        for j, i in enumerate(order):
            new = out[j][0]
            text, matched, n_stop = cut_answer(tok, new, stops)
            if matched is not None:  # the tokens up to the one that completed a stop string, not the check's
                new = new[:n_stop]
            # generate() counts the end token it emitted among the output tokens
            ended = matched is None and len(new) < limit
            n_out = len(new) + int(ended)
            meta = {**finish_meta(n_out, limit, matched, ended=ended), "token_ids": list(new)}
            generations[i] = Generation(text=text, input_tokens=len(encoded[i]), output_tokens=n_out, meta=meta,
                                        status="refusal" if is_refusal(text) else "ok")
        return generations

    def _check_fits(self, n_prompt: int, params: GenerationParams) -> None:
        """A :class:`PromptTooLongError` if a prompt of ``n_prompt`` tokens and its new tokens exceed a causal model's
        positions."""
        from memaudit.models.loading import model_max_length

        limit_positions = None if self.encoder_decoder else model_max_length(self.model)
        if limit_positions is not None and n_prompt + params.max_new_tokens > limit_positions:
            raise PromptTooLongError(f"model {self.name!r}: a prompt of {n_prompt} tokens plus {params.max_new_tokens} "
                                     f"new tokens exceeds its {limit_positions} positions; use shorter prompts or "
                                     "fewer new tokens (the prompt is never cut silently)")

    def _prompt_ids(self, text: str, params: GenerationParams) -> list[int]:
        """A rendered prompt's token ids. Plain text (no chat template) starts with the context token,
        as every text a model is trained on here and every text the probes score does
        (:func:`memaudit.models.token_stats.encode`): a tiny GPT-2 that memorised its members saw
        each one after that token, at those positions, and without it continues them as garbage."""
        if params.chat and getattr(self.tokenizer, "chat_template", None):
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if self.encoder_decoder:  # the encoder reads the text as the model was trained to: with its end token
            return list(self.tokenizer(text)["input_ids"])
        from memaudit.models.token_stats import encode

        return encode(self.tokenizer, text, max_tokens=None)

    def _generate_seq2seq(self, texts: Sequence[str], params: GenerationParams, *, max_rows: int) -> list[Generation]:
        """Greedy answers of an encoder-decoder model, ``max_rows`` inputs a batch (padded encoder
        inputs with their attention mask; the decoders start alike), cut at the first stop string."""
        import torch

        from memaudit.backends.refusal import is_refusal

        tok = self.tokenizer
        pad, eos = tok.pad_token_id, tok.eos_token_id
        out: list[Generation] = []
        for start in range(0, len(texts), max(1, max_rows)):
            encoded = [self._prompt_ids(t, params) for t in texts[start:start + max_rows]]
            width = max(len(e) for e in encoded)
            ids = torch.tensor([e + [pad] * (width - len(e)) for e in encoded], device=self.model.device)
            mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in encoded], device=self.model.device)
            with torch.inference_mode():
                seqs = self.model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                           max_new_tokens=params.max_new_tokens,
                                           repetition_penalty=params.repetition_penalty, pad_token_id=pad)
            for e, row in zip(encoded, seqs[:, 1:].tolist()):  # after the decoder's start token
                new = row[:row.index(eos) + 1] if eos in row else [t for t in row if t != pad]
                text, matched, _ = cut_answer(tok, new[:-1] if eos in row else new, params.stop, count=False)
                meta = {**finish_meta(len(new), params.max_new_tokens, matched, ended=eos in row),
                        "token_ids": list(new)}
                out.append(Generation(text=text, input_tokens=len(e), output_tokens=len(new), meta=meta,
                                      status="refusal" if is_refusal(text) else "ok"))
        return out

    def generate_text(self, text: str, params: GenerationParams, *, top_logprobs: int = 0) -> Generation:
        """One answer to an already rendered input (see :meth:`render_messages`)."""
        import torch

        from memaudit.backends.refusal import is_refusal
        from memaudit.models.loading import generation_end_ids

        self._generative_only()
        tok = self.tokenizer
        ids = self._prompt_ids(text, params)
        room = self._new_tokens_that_fit(len(ids), params.max_new_tokens) if params.fit_context else None
        capped = room if room is not None and room < params.max_new_tokens else None
        if capped is not None:
            import dataclasses

            params = dataclasses.replace(params, max_new_tokens=capped)
        self._check_fits(len(ids), params)
        enc = {"input_ids": torch.tensor([ids], device=self.model.device)}
        enc["attention_mask"] = torch.ones_like(enc["input_ids"])
        kwargs = dict(max_new_tokens=params.max_new_tokens, repetition_penalty=params.repetition_penalty,
                      pad_token_id=tok.pad_token_id)
        if params.temperature > 0:
            # modulo 2**64, as torch reads a negative seed: a seed from 2**64 / 1000003 (about 1.8e13; OpenAI's
            # are 64-bit) was an overflow ValueError, and every seed that was not draws as it did
            torch.manual_seed((params.seed * 1000003 + params.sample_index) % 2**64)
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
        else:
            kwargs.update(do_sample=False)
        if top_logprobs:
            kwargs.update(output_logits=True, return_dict_in_generate=True)
        with torch.inference_mode():
            gen = self.model.generate(**enc, **kwargs)
        sequences = gen.sequences if top_logprobs else gen
        # a causal LM's sequence continues the prompt; a decoder's starts from its start token
        new = sequences[0, 1 if self.encoder_decoder else enc["input_ids"].shape[1]:]
        eos_ids = set(generation_end_ids(self.model))
        ended = len(new) > 0 and int(new[-1]) in eos_ids
        # the end token is no part of the text, special or not (generate_batched never decodes it either)
        out, matched, _ = cut_answer(tok, new[:len(new) - int(ended)], params.stop, count=False)
        # a stop string in the answer ends it, as an API's would, whatever was decoded after it
        meta = finish_meta(len(new), params.max_new_tokens, matched, ended=ended)
        if top_logprobs:
            # [text, log-probability, raw bytes (a list of ints, as OpenAI's "bytes")] per token
            tokens, top = [], []
            for step, logits in enumerate(gen.logits):
                logp = torch.log_softmax(logits[0].float(), -1)
                values, ids = torch.topk(logp, min(top_logprobs, logp.shape[-1]))
                chosen = int(new[step])
                ranked = [chosen, *(int(i) for i in ids)]
                raw = token_bytes(tok, ranked)
                tokens.append([tok.decode([chosen]), float(logp[chosen]), list(raw[0])])
                top.append([[tok.decode([i]), float(v), list(b)] for v, i, b in zip(values, ranked[1:], raw[1:])])
            meta.update(tokens=tokens, top_logprobs=top)
        if capped is not None:
            meta["capped_to"] = capped
        return Generation(text=out, input_tokens=int(enc["input_ids"].shape[1]), output_tokens=int(len(new)),
                          meta=meta, status="refusal" if is_refusal(out) else "ok")
