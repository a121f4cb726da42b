"""Log-probability and rank of given words of a text under a masked LM (BERT), the context on both sides.

The information-guided probes' reference model is ``bert-base-uncased`` (Ravichander et al. §3,
Eq. 2 and 3; the authors' ``src/get_surprisal.py``): the word is replaced by as many ``[MASK]``
tokens as it has word pieces, the masked snippet (about ±300 characters, the context the probe
shows) goes through the model, and the log-probability and rank of the word's *first* piece are read
at the first masked position. For a word ``w`` at character span ``[start, end)`` of a text, with
``c`` the characters of its window (``bounds``) around it:

- ``first_logprob`` = ``log p(x_a | c with w's pieces masked)`` at the first masked position;
- ``rank``          = ``|{v in V : p(v) > p(x_a)}|`` there (0 = the model's top choice);
- ``logprob``       = the sum over the word's pieces of ``log p(x_t)`` at each masked position, all
  masked at once (the authors read the first piece only; the sum is here for the records' shape,
  as the causal reference's whole-word number; it is not a likelihood of the word).

The window's tokens are those of the window's own tokenisation (fast tokenizer, character offsets);
the word's pieces are the window's tokens that overlap the span, so a word is split as it is in
context. One sequence per word (``[CLS] window [SEP]``, the tokenizer's own special tokens), sequences
batched by length. A window longer than ``max_tokens`` (with the special tokens) is cut to tokens
around the word, ``truncated`` in its record. The output layer (hidden size -> vocabulary) reads the masked
positions only, where the model is an encoder and one head module (:func:`_masked_lm_head`); other
models give their full ``[B, T, V]`` logits. :func:`masked_word_logprobs_loop` is the authors' way,
a string with ``[MASK]`` put in and tokenised again; the two agree to float rounding where the word
is aligned with its pieces (``tests/test_masked_lm.py``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

from memaudit.models.token_stats import length_buckets
from memaudit.models.word_logprobs import WordTokens, _read_rows, align_span, check_spans, require_fast

SCORING = "masked"  # a record's ``scoring``: the word read with both sides of its context


@dataclass(frozen=True)
class _Masked:
    """One sequence through the model: ``ids`` with the word's pieces masked, at ``positions``."""

    ids: list[int]
    positions: list[int]
    targets: list[int]
    word: WordTokens
    left_tokens: int
    truncated: bool


def _encode_window(tokenizer, window: str) -> tuple[list[int], list[tuple[int, int]], list[int], list[int]]:
    """The window's tokens and their character spans, and the special tokens the tokenizer puts before and
    after a single sequence (BERT's ``[CLS]`` and ``[SEP]``), from one call with them added."""
    require_fast(tokenizer)
    enc = tokenizer(window, add_special_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    ids, special = list(enc["input_ids"]), list(enc["special_tokens_mask"])
    content = [i for i, flag in enumerate(special) if not flag]
    if not content or content != list(range(content[0], content[-1] + 1)):
        raise ValueError(f"the window {window[:40]!r} has no run of text tokens between the special ones")
    a, b = content[0], content[-1] + 1
    return ids[a:b], [tuple(o) for o in enc["offset_mapping"][a:b]], ids[:a], ids[b:]


def _masked_sequence(tokenizer, text: str, start: int, end: int, bounds: tuple[int, int],
                     max_tokens: int | None) -> _Masked:
    left, right = bounds
    if not 0 <= left <= start < end <= right <= len(text):
        raise ValueError(f"window {bounds} does not hold the span ({start}, {end}) of a text of {len(text)} characters")
    window = text[left:right]
    ids, offsets, head, tail = _encode_window(tokenizer, window)
    word = align_span(window, offsets, start - left, end - left)
    n_special = len(head) + len(tail)
    lo, hi, truncated = 0, len(ids), False
    if max_tokens is not None and len(ids) + n_special > max_tokens:
        room = max_tokens - n_special - (word.last - word.first)
        if room < 0:
            raise ValueError(f"a word of {word.last - word.first} tokens does not fit in {max_tokens} tokens")
        lo = max(0, min(word.first - room // 2, len(ids) - (max_tokens - n_special)))
        hi, truncated = lo + max_tokens - n_special, True
    targets = ids[word.first:word.last]
    full = head + ids[lo:word.first] + [tokenizer.mask_token_id] * len(targets) + ids[word.last:hi] + tail
    first = len(head) + word.first - lo
    return _Masked(full, list(range(first, first + len(targets))), targets, word, word.first - lo, truncated)


def _record(text: str, start: int, end: int, seq: _Masked, lps: Sequence[float], rank: int) -> dict:
    return {"start": start, "end": end, "word": text[start:end], "logprob": float(sum(lps)),
            "first_logprob": float(lps[0]), "rank": int(rank), "n_tokens": len(seq.targets),
            "aligned": seq.word.aligned, "left_tokens": seq.left_tokens, "truncated": seq.truncated,
            "scoring": SCORING}


def _check_tokenizer(tokenizer) -> None:
    if tokenizer.mask_token_id is None:
        raise ValueError(f"a masked LM's tokenizer needs a mask token; {type(tokenizer).__name__} has none")


def _masked_lm_head(model):
    """The module that turns the encoder's last hidden states into a masked LM's logits, position by position
    (``BertForMaskedLM.cls``, ``RobertaForMaskedLM.lm_head``, ``AlbertForMaskedLM.predictions``), or None:
    the model's children must be its base model and one module holding its output embeddings and taking
    one argument, the layout whose forward is ``head(base_model(...)[0])``. A head in several modules
    (DistilBERT's) or taking more (DeBERTa-v2's, given the word embeddings) is None."""
    children = dict(model.named_children())
    base, output = getattr(model, "base_model", None), model.get_output_embeddings()
    heads = [m for m in children.values() if m is not base]
    if base is None or base is model or output is None or len(children) != 2 or len(heads) != 1:
        return None
    head = heads[0]
    required = [p for p in inspect.signature(head.forward).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return head if len(required) == 1 and any(m is output for m in head.modules()) else None


def _masked_position_logits(model, ids, mask, rows, positions):
    """The logits ``[N, V]`` at ``(rows[i], positions[i])`` of a ``[B, T]`` batch: the head applied to those
    positions' hidden states only (a 512-token BERT window's full logits are 60 MB), else read from the
    model's full logits."""
    head = _masked_lm_head(model)
    if head is None:
        return model(input_ids=ids, attention_mask=mask).logits[rows, positions]
    hidden = model.base_model(input_ids=ids, attention_mask=mask)[0]
    return head(hidden[rows, positions])


def compute_masked_word_logprobs(model, tokenizer, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]],
                                 *, bounds: Sequence[Sequence[tuple[int, int]]] | None = None,
                                 batch_size: int = 8, max_tokens: int | None = None) -> list[list[dict]]:
    """Per text, per span (in the order given): the masked word's log-probabilities and rank (module docstring).

    ``bounds``: per text, per span, the ``(left, right)`` characters the model sees around the word
    (default: the whole text). Records as :func:`memaudit.models.word_logprobs.compute_word_logprobs`'s,
    with ``scoring`` ``"masked"``; ``left_tokens`` counts the window's tokens left of the word.
    """
    import torch

    from memaudit.models.forward import right_padded

    check_spans(texts, spans, bounds)
    _check_tokenizer(tokenizer)
    seqs, where = [], []
    for ti, (text, text_spans) in enumerate(zip(texts, spans)):
        text_bounds = bounds[ti] if bounds is not None else [(0, len(text))] * len(text_spans)
        for si, ((s, e), b) in enumerate(zip(text_spans, text_bounds)):
            seqs.append(_masked_sequence(tokenizer, text, s, e, tuple(b), max_tokens))
            where.append((ti, si))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    read: dict[int, tuple[list[float], int]] = {}
    with torch.inference_mode():
        for batch in length_buckets([len(s.ids) for s in seqs], batch_size):
            ids, mask = right_padded([seqs[j].ids for j in batch], range(len(batch)), pad)
            rows = [(r, p) for r, j in enumerate(batch) for p in seqs[j].positions]
            kept = _masked_position_logits(model, ids.to(device), mask.to(device), [r for r, _ in rows],
                                           [p for _, p in rows])
            targets = torch.tensor([t for j in batch for t in seqs[j].targets], device=device)
            lps, ranks = _read_rows(kept, targets)
            n = 0
            for j in batch:
                k = len(seqs[j].targets)
                read[j] = (lps[n:n + k], ranks[n])
                n += k
    out = [[None] * len(text_spans) for text_spans in spans]
    for j, (ti, si) in enumerate(where):
        s, e = spans[ti][si]
        out[ti][si] = _record(texts[ti], s, e, seqs[j], *read[j])
    return out


def masked_word_logprobs_loop(model, tokenizer, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
                              bounds: Sequence[Sequence[tuple[int, int]]] | None = None) -> list[list[dict]]:
    """The authors' way, the reference for :func:`compute_masked_word_logprobs`: per word, the window's
    string with the word replaced by one ``[MASK]`` per piece (the word tokenised on its own), tokenised
    again with the special tokens, one pass, the first mask's row read. Only ``first_logprob`` and ``rank``."""
    import torch

    _check_tokenizer(tokenizer)
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for ti, (text, text_spans) in enumerate(zip(texts, spans)):
            records = []
            for si, (s, e) in enumerate(text_spans):
                left, right = bounds[ti][si] if bounds is not None else (0, len(text))
                pieces = tokenizer.tokenize(text[s:e])
                prompt = text[left:s] + " ".join([tokenizer.mask_token] * len(pieces)) + text[e:right]
                ids = tokenizer(prompt, return_tensors="pt")["input_ids"].to(device)
                at = int((ids[0] == tokenizer.mask_token_id).nonzero()[0, 0])
                logp = torch.log_softmax(model(input_ids=ids).logits[0, at].float(), dim=-1)
                target = tokenizer.convert_tokens_to_ids(pieces[0])
                records.append({"start": s, "end": e, "first_logprob": float(logp[target]),
                                "rank": int((logp > logp[target]).sum())})
            out.append(records)
    return out
