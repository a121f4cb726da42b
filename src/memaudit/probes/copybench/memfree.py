"""MemFree decoding (Ippolito et al. 2023) as CopyBench runs it (Chen et al. 2024, §5.2 and App. B).

At every decoding step MemFree rejects each next token that would complete an n-gram of a
*rejection corpus*: the candidate token and the n-1 tokens before it must not stand together
in the corpus. CopyBench decodes greedily with repetition penalty 1.1 (App. B.1), so the
model's best remaining token is taken instead; its rejection corpus is the books' reference
texts, not the pretraining corpus (App. B.2). Ippolito et al. kept the corpus's n-grams in a
Bloom filter; :class:`NGramIndex` is exact (a dict from each (n-1)-gram to the tokens that
complete one of the corpus's n-grams: one lookup a row a step), so it rejects no token that
does not really complete a corpus n-gram, and misses none.

What the guarantee covers:

- **Local models only.** MemFree works inside the decoding loop, on the next-token scores. An
  API model decodes on the provider's side: nothing can be rejected there, and its outputs can
  only be *measured* afterwards (:func:`text_ngram_overlap`), never protected.
- **n counts tokens of the model's own tokenizer.** The corpus is tokenised with the tokenizer
  of the model being decoded; n = 10 is about 8 English words with SmolLM2's 49k-token BPE (7.9
  on the demo's Austen passages) and a different span of text with another tokenizer, so one n
  protects different amounts of text on models with different tokenizers.
- **The prompt counts.** A row's history is its prompt followed by what it has generated, and
  the n-gram checked is formed with the most recent tokens wherever they came from, as in
  Ippolito et al. CopyBench's literal-copying prompts *are* book text: if the prompt did not
  count, the first n-1 generated tokens could continue the book verbatim (no n-gram inside the
  output is complete yet). With a chat template the prompt ends in template tokens, which
  rarely continue a corpus n-gram, so counting it costs nothing there. With a left-padded batch
  in ``model.generate`` the padding would count too: give
  :class:`MemFreeLogitsProcessor` one prompt at a time, or prompts of at least n-1 tokens.
- **Per token sequence, not per text.** No n-gram of the generated token ids (nor of the prompt's
  last n-1 tokens followed by them) is in the corpus. A tokenizer can write one text with
  several token sequences: the model may spell a corpus passage in another split ("hel" +
  "lo" where the corpus has "hello"), which the index does not see; and the decoded text,
  tokenised again, may give the corpus's split. :func:`text_ngram_overlap` re-tokenises a text
  and reports the corpus n-grams it contains: a measured number, not a guarantee.
- Only verbatim runs of n tokens are stopped: a copy with a changed token every n-1 tokens, or
  the same events and characters in other words (non-literal copying), passes (CopyBench §5.2).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch
from transformers import LogitsProcessor

_NONE: frozenset[int] = frozenset()


class NGramIndex:
    """The n-grams of a rejection corpus of token ids, keyed by their first n-1 tokens.

    ``next_tokens[prefix]`` is the set of tokens ``t`` such that ``prefix + (t,)`` occurs in
    the corpus. Build it once with :meth:`build`; it is not changed afterwards.
    """

    def __init__(self, n: int, next_tokens: Mapping[tuple[int, ...], Iterable[int]] | None = None):
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        self.n = int(n)
        self._next: dict[tuple[int, ...], frozenset[int]] = {}
        for prefix, tokens in (next_tokens or {}).items():
            if len(prefix) != self.n - 1:
                raise ValueError(f"prefix {prefix!r} is not {self.n - 1} tokens long")
            self._next[tuple(int(t) for t in prefix)] = frozenset(int(t) for t in tokens)
        self._n_ngrams = sum(len(v) for v in self._next.values())

    @classmethod
    def build(cls, sequences: Iterable[Sequence[int]], n: int) -> NGramIndex:
        """Every length-``n`` window of every sequence (n-grams do not cross sequences)."""
        k = int(n) - 1
        table: dict[tuple[int, ...], set[int]] = {}
        for seq in sequences:
            ids = [int(t) for t in seq]
            for i in range(len(ids) - k):
                table.setdefault(tuple(ids[i:i + k]), set()).add(ids[i + k])
        return cls(n, table)

    def __len__(self) -> int:
        """Distinct n-grams in the index."""
        return self._n_ngrams

    def describe(self) -> dict:
        """Its size: n, distinct n-grams and (n-1)-gram prefixes, and the bytes Python holds for it."""
        size = sys.getsizeof(self._next) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in self._next.items())
        return {"n": self.n, "n_ngrams": self._n_ngrams, "n_prefixes": len(self._next), "bytes": size}

    def blocked(self, history: Sequence[int]) -> frozenset[int]:
        """The tokens that would complete a corpus n-gram after ``history`` (read: its last n-1 tokens)."""
        k = self.n - 1
        if len(history) < k:
            return _NONE
        return self._next.get(tuple(history[len(history) - k:]), _NONE)

    def contains_ngram(self, tokens: Sequence[int]) -> list[int]:
        """Start positions of the length-n windows of ``tokens`` that are corpus n-grams."""
        ids = [int(t) for t in tokens]
        k = self.n - 1
        return [i for i in range(len(ids) - k) if ids[i + k] in self._next.get(tuple(ids[i:i + k]), _NONE)]

    def mask_logits(self, histories: Sequence[Sequence[int]], logits: torch.Tensor) -> torch.Tensor:
        """Set each row's blocked tokens (:meth:`blocked` of its history) to -inf, in place.

        The processor :func:`memaudit.models.sampling.sample` takes: ``histories[r]`` is row ``r``'s
        prompt followed by its generated tokens.
        """
        rows: list[int] = []
        cols: list[int] = []
        for row, history in enumerate(histories):
            tokens = self.blocked(history)
            rows.extend([row] * len(tokens))
            cols.extend(tokens)
        if rows:
            index = (torch.tensor(rows, device=logits.device), torch.tensor(cols, device=logits.device))
            logits.index_put_(index, torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device))
        return logits


class MemFreeLogitsProcessor(LogitsProcessor):
    """MemFree for ``model.generate(logits_processor=LogitsProcessorList([...]))``.

    A row's history is its ``input_ids``: the prompt and the tokens generated so far (see the
    module docstring on why the prompt counts, and on padding).
    """

    def __init__(self, index: NGramIndex):
        self.index = index

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        width = input_ids.shape[1]
        tails = input_ids[:, max(0, width - (self.index.n - 1)):].tolist()
        return self.index.mask_logits(tails, scores)


@dataclass(frozen=True)
class NGramOverlap:
    """Corpus n-grams found in a re-tokenised text."""

    n_windows: int  # length-n windows of the text's tokens
    positions: tuple[int, ...]  # start of each window that is a corpus n-gram
    ngrams: tuple[str, ...]  # their text

    @property
    def fraction(self) -> float:
        return len(self.positions) / self.n_windows if self.n_windows else 0.0


def text_ngram_overlap(text: str, index: NGramIndex, tokenizer) -> NGramOverlap:
    """Tokenise ``text`` again (no special tokens) and find the corpus n-grams in it.

    MemFree's guarantee is about the token ids the model emitted; the same text in the
    tokenizer's own split can still hold a corpus n-gram. This measures how many.
    """
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    found = index.contains_ngram(ids)
    return NGramOverlap(n_windows=max(0, len(ids) - index.n + 1), positions=tuple(found),
                        ngrams=tuple(tokenizer.decode(ids[i:i + index.n]) for i in found))
