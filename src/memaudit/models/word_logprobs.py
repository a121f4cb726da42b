"""Log-probability and rank of given words of a text under a causal LM, all read from one forward pass.

What the information-guided probes' surprisal-token selection needs from a reference model
(Ravichander et al., "Information-guided identification of training data imprint", §3, Eq. 2
and 3): for a word ``w`` at character span ``[start, end)`` of a text, with ``c`` the text to
its left,

- ``logprob``       = ``log p(w | c)``, the sum over the word's tokens ``log p(x_t | x_<t)``;
- ``first_logprob`` = ``log p(x_a | x_<a)`` of the word's first token ``x_a`` alone (Eq. 2 is
  ``-first_logprob`` when the word is one token; the authors' code reads the first word piece);
- ``rank``          = ``|{v in V : p(v | x_<a) > p(x_a | x_<a)}|``, Eq. 3: the number of tokens
  strictly more probable than the first token at its position (0 = the model's top choice);
- ``greedy``        = whether *every* token of the word is the top choice given the ones before it,
  i.e. greedy decoding from ``c`` writes the word's tokens (the first one alone would count the
  ``" 19"`` of ``" 1914"`` in any year the model guesses).

The word's tokens are those of the *whole text's* tokenisation whose character offsets (fast
tokenizer, ``return_offsets_mapping``) overlap ``[start, end)``; a leading space stays where the
tokenizer put it (GPT-2-style BPE folds it into the word's first token, ``" Darcy"``; a tokenizer
that emits it as a token of its own leaves it in the left context). ``aligned`` is false when the
tokens reach outside the word (beyond the whitespace before it), so the numbers describe more than
the word.

One forward pass per text (:func:`compute_word_logprobs`): a causal model's prediction at
position ``t`` depends on ``x_<t`` only, so every word of a text is read from the same pass, which
runs up to the last token of the last word asked for. Texts are right-padded into length-bucketed
batches, and only the rows of the words' tokens go through the output layer
(``logits_to_keep``). :func:`word_logprobs_loop` is the naive way, one pass per word over the
text cut after it; the two agree to float rounding (``benchmarks/bench_word_logprobs.py``).

Texts longer than ``max_tokens`` tokens: the text is read in windows of ``max_tokens`` tokens
every ``max_tokens // 2`` tokens (each window again after the context token), and each word is
read from the first window that holds all of it, which leaves it at least ``max_tokens // 2``
tokens minus its own length of left context (a word no window of that grid holds, longer than
about half a window, from a window of its own ending at its last token, as the loop reads it);
``left_tokens`` says how many it had and
``truncated`` that the left context was cut. Such a text costs one pass per window that holds a
word. The loop cuts the left context to the last ``max_tokens`` tokens instead, so the two agree
only on texts that fit.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

from memaudit.models.token_stats import context_token_id, length_buckets

ROWS_PER_CHUNK = 64  # output-layer rows normalised at a time: bounds the float32 copy of the logits


@dataclass(frozen=True)
class WordTokens:
    """Where a character span's tokens are in a text's tokenisation: ``ids[first:last]``."""

    first: int
    last: int
    aligned: bool


def require_fast(tokenizer) -> None:
    """Word log-probabilities find a word's tokens by their character offsets, which only a fast tokenizer gives."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"word log-probabilities need a fast tokenizer (character offsets); "
                         f"{type(tokenizer).__name__} is not one")


def check_spans(texts: Sequence[str], spans: Sequence[Sequence], bounds: Sequence[Sequence] | None = None) -> None:
    """One span list per text, and, with ``bounds``, one ``(left, right)`` window per span."""
    if len(texts) != len(spans) or (bounds is not None and len(bounds) != len(texts)):
        raise ValueError(f"{len(texts)} texts but {len(spans)} span lists"
                         + ("" if bounds is None else f" and {len(bounds)} bound lists"))
    for ti, text_spans in enumerate(spans):
        if bounds is not None and len(bounds[ti]) != len(text_spans):
            raise ValueError(f"text {ti}: {len(text_spans)} spans but {len(bounds[ti])} bounds")


def encode_with_offsets(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of ``text`` (no special tokens) and each token's character span."""
    require_fast(tokenizer)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def align_span(text: str, offsets: Sequence[tuple[int, int]], start: int, end: int) -> WordTokens:
    """The tokens whose character spans overlap ``[start, end)``.

    Aligned: the first token starts at ``start`` or within the whitespace just before it, and the
    last token ends at ``end``.
    """
    if not 0 <= start < end <= len(text):
        raise ValueError(f"span ({start}, {end}) is not a non-empty span of a text of {len(text)} characters")
    hits = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
    if not hits:
        raise ValueError(f"span ({start}, {end}) {text[start:end]!r} covers no token")
    first, last = hits[0], hits[-1] + 1
    lead = text[offsets[first][0]:start]
    aligned = (lead == "" or lead.isspace()) and offsets[last - 1][1] == end
    return WordTokens(first, last, aligned)


def plan_windows(n_tokens: int, words: Sequence[WordTokens], max_tokens: int | None) -> list[tuple[int, list[int]]]:
    """``(window_start, word indices)`` for the windows a text is read in (see the module docstring).

    A text of at most ``max_tokens`` tokens is one window from 0; a longer one is read in windows
    starting every ``max_tokens // 2`` tokens, each word in the first that holds all of it. A word
    no window of that grid holds (longer than about half a window: the first window reaching its
    last token starts after its first) gets a window of its own ending at its last token, the
    left context :func:`word_logprobs_loop` gives it.
    """
    if max_tokens is None or n_tokens <= max_tokens:
        return [(0, list(range(len(words))))] if words else []
    stride = max(1, max_tokens // 2)
    windows: dict[int, list[int]] = {}
    for i, w in enumerate(words):
        if w.last - w.first > max_tokens:
            raise ValueError(f"a word of {w.last - w.first} tokens does not fit in {max_tokens} tokens")
        start = max(0, -(-(w.last - max_tokens) // stride)) * stride  # ceil((last - max_tokens) / stride)
        if start > w.first:  # that window cuts the word's first tokens off
            start = w.last - max_tokens
        windows.setdefault(start, []).append(i)
    return sorted(windows.items())


def _forward_rows(model, ids, mask, keep):
    """Logits ``[n_kept, V]`` of the positions ``keep`` (bool ``[B, T]``), in row-major order.

    ``logits_to_keep`` sends only those positions through the output layer where the model takes it.
    """
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        return model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
    return model(input_ids=ids, attention_mask=mask).logits[keep]


def _last_logits(model, ids, n: int):
    """Logits ``[n, V]`` of the last ``n`` positions of the one sequence ``ids`` ``[1, T]``."""
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        return model(input_ids=ids, logits_to_keep=n).logits[0]
    return model(input_ids=ids).logits[0, -n:]


def _read_rows(logits, targets) -> tuple[list[float], list[int]]:
    """Per row of ``logits`` ``[n, V]``: ``log p(target)`` and the target's rank (Eq. 3), in float32."""
    import torch

    lps, ranks = [], []
    for a in range(0, logits.shape[0], ROWS_PER_CHUNK):
        logp = torch.log_softmax(logits[a:a + ROWS_PER_CHUNK].float(), dim=-1)
        lp = logp.gather(-1, targets[a:a + ROWS_PER_CHUNK, None])
        lps.append(lp[:, 0])
        ranks.append((logp > lp).sum(-1))  # tokens strictly more probable
    if not lps:
        return [], []
    return torch.cat(lps).cpu().tolist(), torch.cat(ranks).cpu().tolist()


def _record(text: str, start: int, end: int, word: WordTokens, lps: Sequence[float], rank: int,
            window_start: int, greedy: bool) -> dict:
    return {"start": start, "end": end, "word": text[start:end], "logprob": float(sum(lps)),
            "first_logprob": float(lps[0]), "rank": int(rank), "greedy": bool(greedy),
            "n_tokens": word.last - word.first,
            "aligned": word.aligned, "left_tokens": word.first - window_start, "truncated": window_start > 0,
            "scoring": "causal"}


@dataclass(frozen=True)
class _Window:
    """One sequence through the model: text ``text``'s tokens from ``start`` on, after the context token,
    up to the last token of the words ``words`` read from it."""

    text: int
    start: int
    words: list[int]
    ids: list[int]


def _plan(tokenizer, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]],
          max_tokens: int | None) -> tuple[list[list[WordTokens]], list[_Window]]:
    """Every span's tokens, and the windows (sequences) that read them."""
    ctx = context_token_id(tokenizer)
    aligned, windows = [], []
    for ti, (text, text_spans) in enumerate(zip(texts, spans)):
        ids, offsets = encode_with_offsets(tokenizer, text)
        words = [align_span(text, offsets, s, e) for s, e in text_spans]
        aligned.append(words)
        for w0, members in plan_windows(len(ids), words, max_tokens):
            w1 = max(words[i].last for i in members)  # later tokens cannot change these predictions
            windows.append(_Window(ti, w0, members, [ctx] + ids[w0:w1]))
    return aligned, windows


def _read_batch(model, windows: Sequence[_Window], aligned: Sequence[Sequence[WordTokens]], pad: int) -> dict:
    """One padded forward pass over ``windows``.

    Returns ``{(text, word): (the word's token log-probs, its first token's rank, window start, greedy)}``.
    """
    import torch

    from memaudit.models.forward import right_padded

    ids, mask = right_padded([w.ids for w in windows], range(len(windows)), pad)
    keep = torch.zeros_like(mask, dtype=torch.bool)
    for row, win in enumerate(windows):
        for i in win.words:
            w = aligned[win.text][i]
            keep[row, w.first - win.start:w.last - win.start] = True  # row r predicts ids[start + r]
    kept = keep.nonzero().tolist()  # (row, position), in the order the kept logits come out
    index = {(r, p): n for n, (r, p) in enumerate(kept)}
    device = next(model.parameters()).device
    targets = torch.tensor([windows[r].ids[p + 1] for r, p in kept], device=device)
    lps, ranks = _read_rows(_forward_rows(model, ids.to(device), mask.to(device), keep.to(device)), targets)
    out = {}
    for row, win in enumerate(windows):
        for i in win.words:
            w = aligned[win.text][i]
            rows = [index[row, p] for p in range(w.first - win.start, w.last - win.start)]
            out[win.text, i] = ([lps[n] for n in rows], ranks[rows[0]], win.start, all(ranks[n] == 0 for n in rows))
    return out


def compute_word_logprobs(model, tokenizer, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
                          batch_size: int = 8, max_tokens: int | None = None) -> list[list[dict]]:
    """Per text, per span (in the order given): the word's log-probabilities and rank (module docstring).

    Each record: ``start``, ``end``, ``word``, ``logprob``, ``first_logprob``, ``rank``, ``greedy``,
    ``n_tokens``, ``aligned``, ``left_tokens`` (text tokens of left context the model saw) and
    ``truncated``. One forward pass per text that fits in ``max_tokens`` tokens (after the context
    token, as :func:`memaudit.models.token_stats.encode` scores texts), ``batch_size`` texts at a
    time by length.
    """
    import torch

    if len(texts) != len(spans):
        raise ValueError(f"{len(texts)} texts but {len(spans)} span lists")
    aligned, windows = _plan(tokenizer, texts, spans, max_tokens)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else context_token_id(tokenizer)
    read: dict = {}
    with torch.inference_mode():
        for batch in length_buckets([len(w.ids) for w in windows], batch_size):
            read.update(_read_batch(model, [windows[j] for j in batch], aligned, pad))
    return [[_record(text, s, e, aligned[ti][i], *read[ti, i]) for i, (s, e) in enumerate(text_spans)]
            for ti, (text, text_spans) in enumerate(zip(texts, spans))]


def word_logprobs_loop(model, tokenizer, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
                       max_tokens: int | None = None) -> list[list[dict]]:
    """The naive way, the reference for :func:`compute_word_logprobs`: one forward pass per word.

    For each span the text is cut after the word (``text[:end]``, tokenised on its own), the left
    context cut to the last ``max_tokens`` tokens, and the word's rows read at the end of the pass.
    """
    import torch

    ctx = context_token_id(tokenizer)
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for text, text_spans in zip(texts, spans):
            records = []
            for s, e in text_spans:
                ids, offsets = encode_with_offsets(tokenizer, text[:e])
                w = align_span(text[:e], offsets, s, e)
                w0 = 0 if max_tokens is None else max(0, w.last - max_tokens)
                seq = [ctx] + ids[w0:w.last]
                n = w.last - w.first
                logp = torch.log_softmax(_last_logits(model, torch.tensor([seq], device=device), n + 1)[:n].float(),
                                         dim=-1)
                targets = torch.tensor(seq[-n:], device=device)
                lps = logp.gather(-1, targets[:, None])[:, 0]
                ranks = (logp > lps[:, None]).sum(-1)
                records.append(_record(text, s, e, w, lps.cpu().tolist(), int(ranks[0]), w0,
                                       bool((ranks == 0).all())))
            out.append(records)
    return out
