"""Log-probability and rank of given words of a text under a causal LM, read with the context on *both* sides.

The information-guided probes' reference model is a masked LM (BERT, Ravichander et al. §3): it
scores a word with the text on both sides of it, so a word the right context gives away ("paid in
[MASK], the currency of the euro area") is no surprisal token. A causal LM reads the left context
only (:mod:`memaudit.models.word_logprobs`). This module lets a causal LM read the right side too,
by scoring *candidate fills* of the word's slot by the likelihood of the whole window:

1. **proposals**: the window (``bounds``, the context the probe shows) up to the word goes through
   the model once; the ``fills`` most probable next tokens that are words (:func:`fill_words`) are
   the candidate fills ``f_1 .. f_K``, each a word of one token, put in the word's place;
2. **whole-window likelihood**: ``ll(x) = log p(window with x in the slot)`` for the word and each
   fill. The tokens left of the word are the same in every one of these windows, and their
   log-probabilities cancel below, so only the rest is summed: the left part's key/value cache from
   step 1 serves the ``K + 1`` rests, which go through the model together (``batch_size`` at a time).
   Where a fill changes how the text left of it is tokenised (:func:`shares_prefix`), the word's
   windows go through whole, summed from the first token at which they differ;
3. for the word ``w``, over the set ``C = {w, f_1, .., f_K}``:

   - ``logprob`` = ``first_logprob`` = ``ll(w) - logsumexp_{x in C} ll(x)``: the word's posterior
     in its slot given both sides, normalised over the candidates. It is an upper bound of the
     posterior over every word (the fills not proposed are left out of the sum), tight when the
     proposals hold most of the mass. The word is scored whole, so ``first_logprob`` equals
     ``logprob``;
   - ``rank`` = ``|{f in C : ll(f) > ll(w)}|``, from 0 (no fill beats the word) to K (all do):
     a rank among the K + 1 candidates, not the vocabulary's; a Rank threshold must be below K
     (checked with the config).

The other record keys are those of :func:`memaudit.models.word_logprobs.compute_word_logprobs`,
with ``scoring`` ``"window"``, and three more: ``left_first_logprob`` and ``left_rank`` (the
word's first token read from the window's left side alone, step 1), ``n_fills`` (the fills
scored: fewer than K when fewer proposals are words) and ``best_fill`` (the candidate with the
highest whole-window likelihood: the word itself when none beats it).

Cost: for each word, one pass over the window's left part and ``K + 1`` over its right part (the
fill or the word, and the text after it). A causal reference reads every word of a text from one
pass over the text, so this costs about ``(K + 2) / 2`` window-lengths per word where that costs
one text-length per text: 33 times a causal reference's time on six 120-word passages with six words
each and ``K = 10`` (``results/bench/window_word_logprobs.json``). A
window longer than ``max_tokens`` tokens is cut to characters around the word (``truncated``).
:func:`window_word_logprobs_loop` is the naive way (one sequence at a time, every token of it
summed): the two agree to float rounding (``tests/test_window_word_logprobs.py``).

**Beyond the paper.** The paper's reference is BERT; nothing like it ships offline, and a causal LM
scores a word from its left only. This mode is the nearest a causal model comes to BERT's reading,
at K + 1 times the cost; the config's ``probes.cloze.reference.fills`` turns it on.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from memaudit.models.forward import cache_keyword, common_prefix_length, right_padded
from memaudit.models.token_stats import context_token_id, length_buckets
from memaudit.models.word_logprobs import (WordTokens, _forward_rows, _read_rows, align_span, check_spans,
                                           encode_with_offsets)

SCORING = "window"  # a record's ``scoring``: a causal LM's candidate fills scored by whole-window likelihood
WORD_MARKS = ("\u0120", "\u2581")  # the markers of a token that starts a word: GPT-2's "Ġ", SentencePiece's "▁"


@dataclass(frozen=True)
class _Slot:
    """One word's window: characters ``[left, right)`` of its text, its tokens, and its proposals' prefix."""

    text: int
    span: int
    left: int
    right: int
    word: WordTokens
    ids: list[int]  # the context token, then the window's tokens
    truncated: bool


def starts_word(tokenizer, token_id: int) -> bool:
    """Whether a token starts a word: a leading space (GPT-2-style, ``"Ġword"``) or SentencePiece's ``"▁"``."""
    piece = tokenizer.convert_ids_to_tokens(int(token_id)) or ""
    return piece.startswith(WORD_MARKS) or tokenizer.decode([int(token_id)])[:1].isspace()


@lru_cache(maxsize=4)
def word_tokens(tokenizer) -> tuple[tuple[str | None, bool], ...]:
    """Per token id: the word it decodes to (``None`` unless letters or digits, ``str.isalnum``) and
    whether it starts a word; computed once per tokenizer (one decode per vocabulary entry)."""
    out = []
    for tid in range(len(tokenizer)):
        word = tokenizer.decode([tid]).strip()
        out.append((word if word.isalnum() else None, starts_word(tokenizer, tid)))
    return tuple(out)


def fill_words(tokenizer, ranked_ids: Iterable[int], word: str, first_id: int, k: int) -> list[str]:
    """The first ``k`` tokens of ``ranked_ids`` (most probable first) that make a fill of ``word``'s slot.

    A fill is a token that decodes to a word of letters or digits (``str.isalnum``, as candidate words
    are), starts a word exactly when ``word``'s own first token ``first_id`` does (so a subword
    piece is never proposed where a word begins), and is not ``word`` itself or a fill already taken,
    without case (``Paris`` and ``paris`` are one answer to a cloze question). ``ranked_ids`` is read
    only as far as it takes: pass the whole vocabulary's order, and the fills are the ``k`` most
    probable word tokens whatever their ranks.
    """
    table = word_tokens(tokenizer)
    lead = table[first_id][1] if first_id < len(table) else starts_word(tokenizer, first_id)
    seen = {word.casefold()}
    out = []
    for tid in ranked_ids:
        tid = int(tid)
        if tid >= len(table):  # an output row past the tokenizer's vocabulary (a padded embedding)
            continue
        fill, starts = table[tid]
        if fill is None or starts != lead or fill.casefold() in seen:
            continue
        seen.add(fill.casefold())
        out.append(fill)
        if len(out) == k:
            break
    return out


def _slot(tokenizer, ctx: int, ti: int, si: int, text: str, start: int, end: int, bounds: tuple[int, int],
          max_tokens: int | None) -> _Slot:
    left, right = bounds
    if not 0 <= left <= start < end <= right <= len(text):
        raise ValueError(f"window {bounds} does not hold the span ({start}, {end}) of a text of {len(text)} characters")
    ids, offsets = encode_with_offsets(tokenizer, text[left:right])
    word = align_span(text[left:right], offsets, start - left, end - left)
    truncated = False
    if max_tokens is not None and len(ids) > max_tokens:
        # cut in characters, so that every fill's window is cut alike: the tokens around the word
        room = max_tokens - (word.last - word.first)
        if room < 0:
            raise ValueError(f"a word of {word.last - word.first} tokens does not fit in {max_tokens} tokens")
        lo = max(0, min(word.first - room // 2, len(ids) - max_tokens))
        hi = lo + max_tokens
        while True:
            cut_left, cut_right = left + offsets[lo][0], left + offsets[hi - 1][1]
            cut, cut_offsets = encode_with_offsets(tokenizer, text[cut_left:cut_right])
            # the cut text tokenised on its own may take a token more at an edge: drop one from the far side
            if len(cut) <= max_tokens or hi - lo <= word.last - word.first:
                break
            lo, hi = (lo + 1, hi) if word.first - lo > hi - word.last else (lo, hi - 1)
        left, right, ids = cut_left, cut_right, cut
        word = align_span(text[left:right], cut_offsets, start - left, end - left)
        truncated = True
    return _Slot(ti, si, left, right, word, [ctx] + ids, truncated)


def shares_prefix(group: Sequence[Sequence[int]], n: int) -> bool:
    """Whether every sequence of a word's group (the word's window, then its fills') starts with the same
    ``n`` tokens: the context token and the window's tokens left of the word, which then go through the
    model once for all of them. A fill that changes how the text left of it is tokenised breaks it."""
    return all(list(q[:n]) == list(group[0][:n]) for q in group)


def _kept(model, keep, **inputs):
    """The model's output and the logits of the positions ``keep`` (an int: the last ``keep``; a bool
    ``[B, T]`` mask: those, flattened in row-major order), through ``logits_to_keep`` where the model takes it."""
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        out = model(**inputs, logits_to_keep=keep)
        return out, out.logits
    out = model(**inputs)
    return out, out.logits[:, -keep:] if isinstance(keep, int) else out.logits[keep]


def _prefix_pass(model, prefix: Sequence[int]):
    """The next-token logits after ``prefix`` (one sequence) ``[V]``, and its key/value cache."""
    import torch

    device = next(model.parameters()).device
    out, logits = _kept(model, 1, input_ids=torch.tensor([list(prefix)], device=device), use_cache=True,
                        position_ids=torch.arange(len(prefix), device=device)[None])
    return logits[0, -1], getattr(out, cache_keyword())


def _continued(model, cache, n: int, first_logp, rests: Sequence[Sequence[int]], pad: int, batch_size: int) -> list[float]:
    """Per sequence ``rests[i]`` following the ``n`` tokens in ``cache`` (batch of one, repeated here):
    the sum of its tokens' log-probabilities, the first read from ``first_logp`` (the log-softmax after
    the prefix), the others from one right-padded pass over the rests, ``batch_size`` at a time."""
    import copy

    import torch

    device = next(model.parameters()).device
    out = []
    chunks = [rests[k:k + batch_size] for k in range(0, len(rests), batch_size)]
    for c, chunk in enumerate(chunks):
        part = cache if c == len(chunks) - 1 else copy.deepcopy(cache)
        part.batch_repeat_interleave(len(chunk))
        width = max(len(r) for r in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), n + width), dtype=torch.long)
        keep = torch.zeros((len(chunk), width), dtype=torch.bool)
        mask[:, :n] = 1
        for row, rest in enumerate(chunk):
            ids[row, :len(rest)] = torch.tensor(list(rest))
            mask[row, n:n + len(rest)] = 1
            keep[row, :len(rest) - 1] = True  # row p predicts rest[p + 1]
        positions = torch.arange(n, n + width)[None].expand(len(chunk), width)
        _, logits = _kept(model, keep.to(device), input_ids=ids.to(device), attention_mask=mask.to(device),
                          position_ids=positions.to(device), use_cache=True, **{cache_keyword(): part})
        targets = torch.tensor([t for rest in chunk for t in rest[1:]], device=device)
        lps, _ = _read_rows(logits, targets)
        at = 0
        for rest in chunk:
            k = len(rest) - 1
            out.append(float(first_logp[rest[0]]) + float(sum(lps[at:at + k])))
            at += k
    return out


def _fill_sequences(tokenizer, ctx: int, text: str, slot: _Slot, start: int, end: int,
                    fills: Sequence[str], max_tokens: int | None) -> list[list[int]]:
    """The window with each fill in the word's place (the context token first); fills whose window
    outgrows ``max_tokens`` are left out (``None``)."""
    out = []
    for fill in fills:
        ids, _ = encode_with_offsets(tokenizer, text[slot.left:start] + fill + text[end:slot.right])
        out.append(None if max_tokens is not None and len(ids) > max_tokens else [ctx] + ids)
    return out


def _summed(model, seqs: Sequence[Sequence[int]], froms: Sequence[int], batch_size: int, pad: int) -> list[float]:
    """Per sequence ``i``: the sum of ``log p(seqs[i][t] | seqs[i][:t])`` over ``t >= froms[i]``."""
    import torch

    device = next(model.parameters()).device
    out = [0.0] * len(seqs)
    for batch in length_buckets([len(s) for s in seqs], batch_size):
        ids, mask = right_padded(seqs, batch, pad)
        keep = torch.zeros_like(mask, dtype=torch.bool)
        for row, j in enumerate(batch):
            keep[row, froms[j] - 1:len(seqs[j]) - 1] = True  # row p predicts token p + 1
        targets = torch.tensor([t for j in batch for t in seqs[j][froms[j]:]], device=device)
        lps, _ = _read_rows(_forward_rows(model, ids.to(device), mask.to(device), keep.to(device)), targets)
        n = 0
        for j in batch:
            k = len(seqs[j]) - froms[j]
            out[j] = float(sum(lps[n:n + k]))
            n += k
    return out


def _record(text: str, start: int, end: int, slot: _Slot, word_ll: float, fills: Sequence[str],
            fill_lls: Sequence[float], left_lp: float, left_rank: int) -> dict:
    from scipy.special import logsumexp

    lls = [word_ll, *fill_lls]
    norm = float(logsumexp(lls))
    best = max(range(len(lls)), key=lambda i: (lls[i], -i))
    logprob = word_ll - norm
    return {"start": start, "end": end, "word": text[start:end], "logprob": logprob, "first_logprob": logprob,
            "rank": sum(v > word_ll for v in fill_lls), "n_tokens": slot.word.last - slot.word.first,
            "aligned": slot.word.aligned, "left_tokens": slot.word.first, "truncated": slot.truncated,
            "scoring": SCORING, "left_first_logprob": float(left_lp), "left_rank": int(left_rank),
            "n_fills": len(fills), "best_fill": text[start:end] if best == 0 else fills[best - 1]}


def _check(texts, spans, bounds, fills: int) -> None:
    if fills < 1:
        raise ValueError(f"fills: {fills}; whole-window scoring needs at least one candidate fill")
    check_spans(texts, spans, bounds)


def compute_window_word_logprobs(model, tokenizer, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]],
                                 *, fills: int, bounds: Sequence[Sequence[tuple[int, int]]] | None = None,
                                 batch_size: int = 8, max_tokens: int | None = None) -> list[list[dict]]:
    """Per text, per span (in the order given): the word's whole-window log-probability among ``fills``
    candidate fills, and its rank among them (module docstring).

    ``bounds``: per text, per span, the ``(left, right)`` characters the model reads around the word
    (default: the whole text).
    """
    import torch

    _check(texts, spans, bounds, fills)
    ctx = context_token_id(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else ctx
    slots = [_slot(tokenizer, ctx, ti, si, text, s, e, tuple(bounds[ti][si]) if bounds is not None else (0, len(text)),
                   max_tokens)
             for ti, (text, text_spans) in enumerate(zip(texts, spans)) for si, (s, e) in enumerate(text_spans)]
    out = [[None] * len(text_spans) for text_spans in spans]
    late = []  # groups whose fills change the tokens left of the word: summed whole (_summed), at the end
    with torch.inference_mode():
        for slot in slots:
            s, e = spans[slot.text][slot.span]
            text = texts[slot.text]
            n = 1 + slot.word.first
            last, cache = _prefix_pass(model, slot.ids[:n])
            logp = torch.log_softmax(last.float(), dim=-1)
            first = slot.ids[n]
            (left_lp,), (left_rank,) = _read_rows(last[None], torch.tensor([first], device=last.device))
            words = fill_words(tokenizer, torch.argsort(logp, descending=True).cpu().tolist(), text[s:e], first, fills)
            kept = [(w, q) for w, q in zip(words, _fill_sequences(tokenizer, ctx, text, slot, s, e, words, max_tokens))
                    if q is not None]
            group = [slot.ids] + [q for _, q in kept]
            args = (slot, [w for w, _ in kept], left_lp, left_rank)
            if shares_prefix(group, n):  # the usual case: only the rests differ
                lls = _continued(model, cache, n, logp, [q[n:] for q in group], pad, batch_size)
                out[slot.text][slot.span] = _record(text, s, e, slot, lls[0], args[1], lls[1:], left_lp, left_rank)
            else:
                late.append((group, args))
        if late:
            # from the first token at which any of a group's sequences differs: the rest is shared
            starts = [min([1 + args[0].word.first] + [common_prefix_length([group[0], q]) for q in group[1:]])
                      for group, args in late]
            lls = _summed(model, [q for group, _ in late for q in group],
                          [start for (group, _), start in zip(late, starts) for _ in group], batch_size, pad)
            at = 0
            for group, (slot, words, left_lp, left_rank) in late:
                s, e = spans[slot.text][slot.span]
                out[slot.text][slot.span] = _record(texts[slot.text], s, e, slot, lls[at], words,
                                                    lls[at + 1:at + len(group)], left_lp, left_rank)
                at += len(group)
    return out


def window_word_logprobs_loop(model, tokenizer, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
                              fills: int, bounds: Sequence[Sequence[tuple[int, int]]] | None = None) -> list[list[dict]]:
    """The naive way, the reference for :func:`compute_window_word_logprobs`: per word, the proposals from
    the left window's own pass, then each window (word, fills) through the model alone, every token of it
    summed (no shared prefix left out). Only ``logprob``, ``rank``, ``fills`` and ``best_fill``."""
    import math

    import torch

    ctx = context_token_id(tokenizer)
    device = next(model.parameters()).device
    out = []

    def total(ids: list[int]) -> float:
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids], device=device)).logits[0, :-1].float(), dim=-1)
        return float(logp.gather(-1, torch.tensor(ids[1:], device=device)[:, None]).sum())

    with torch.inference_mode():
        for ti, (text, text_spans) in enumerate(zip(texts, spans)):
            records = []
            for si, (s, e) in enumerate(text_spans):
                left, right = bounds[ti][si] if bounds is not None else (0, len(text))
                whole, offsets = encode_with_offsets(tokenizer, text[left:right])
                word = align_span(text[left:right], offsets, s - left, e - left)
                prefix = [ctx] + whole[:word.first]
                logits = model(input_ids=torch.tensor([prefix], device=device)).logits[0, -1].float()
                ranked = torch.argsort(logits, descending=True).tolist()
                words = fill_words(tokenizer, ranked, text[s:e], whole[word.first], fills)
                lls = [total([ctx] + encode_with_offsets(tokenizer, text[left:s] + x + text[e:right])[0])
                       for x in [text[s:e], *words]]
                top = max(lls)
                norm = top + math.log(sum(math.exp(v - top) for v in lls))
                best = max(range(len(lls)), key=lambda i: (lls[i], -i))
                records.append({"start": s, "end": e, "logprob": lls[0] - norm, "rank": sum(v > lls[0] for v in lls[1:]),
                                "fills": words, "best_fill": ([text[s:e], *words])[best]})
            out.append(records)
    return out
