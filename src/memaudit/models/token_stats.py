"""Per-token statistics, computed once per (model, texts) and shared by every token-probability method.

For each passage ``x_1..x_T`` (prefixed with one context token, the model's
``context_token`` or else BOS or EOS, so that the first text token is scored too) we keep,
for every position t:

- ``logprob[t] = log p(x_t | x_<t)``
- ``mu[t]    = E_{z~p(.|x_<t)} log p(z | x_<t)``                (Min-K%++, Zhang et al. 2024)
- ``sigma[t] = sqrt(E_z (log p(z|x_<t) - mu[t])^2)``

Passages are sorted by token length and batched (length bucketing), so padding
costs little; statistics are computed in float32 from each sequence's logits in
cache-sized chunks (:func:`next_token_stats`) and stored as flat arrays with
per-passage offsets (CSR layout), with how many leading characters of each text the
scored tokens cover (``chars``: a text cut at ``max_tokens`` is scored on its first part
only, and the zlib score compresses that part) and where in its text each scored token ends
(``ends``: two forward passes cut at different lengths, a reference model's and the model's, or
the model's on a text and on its lowercased copy, are compared on the characters both scored).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from memaudit.io import atomic_path

log = logging.getLogger(__name__)


# The attribute :func:`set_context_token` sets on a tokenizer (a model's ``context_token``).
_CONTEXT_ATTR = "memaudit_context_token_id"
_WARNED_ATTR = "memaudit_context_warned"


def set_context_token(tokenizer, token: str, name: str) -> None:
    """Score and train every text of this tokenizer's model after ``token`` (a model's
    ``context_token``); a token outside the vocabulary is a :class:`ConfigError` naming the model."""
    from memaudit.errors import ConfigError

    vocab = tokenizer.get_vocab()
    if token not in vocab:
        known = [t for t in (tokenizer.bos_token, tokenizer.eos_token, "<|endoftext|>") if t and t in vocab]
        raise ConfigError(f"context_token {token!r}: not a token of the vocabulary of {name}"
                          + (f" (it has {', '.join(map(repr, dict.fromkeys(known)))})" if known else ""))
    setattr(tokenizer, _CONTEXT_ATTR, int(vocab[token]))


def bos_opens_chat_turns(tokenizer) -> bool:
    """Whether the tokenizer's BOS token opens a chat turn (its chat template puts a role name right
    after it, as SmolLM2-Instruct's ``<|im_start|>``) rather than a document: text scored after it
    starts where the model expects ``system`` or ``user``."""
    bos = tokenizer.bos_token
    if not bos or not getattr(tokenizer, "chat_template", None):
        return False
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    except Exception:  # a template that needs more than one user turn: no evidence either way
        return False
    return re.search(re.escape(bos) + r"\s*(system|user|assistant)\b", str(text)) is not None


def context_token_id(tokenizer) -> int:
    """The token every scored or fine-tuned text follows: the model's ``context_token``
    (:func:`set_context_token`), else the BOS token, else the EOS token. A BOS token that opens chat
    turns is used as before, with one warning per tokenizer naming the config key that changes it."""
    tid = getattr(tokenizer, _CONTEXT_ATTR, None)
    if tid is not None:
        return int(tid)
    tid = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if tid is None:
        raise ValueError(f"the tokenizer of {getattr(tokenizer, 'name_or_path', '') or 'this model'} has neither a BOS "
                         "nor an EOS token to put before every text: set the model's context_token "
                         "(models.<name>.context_token, one token of its vocabulary; docs/models.md#the-context-token)")
    if tid == tokenizer.bos_token_id and not getattr(tokenizer, _WARNED_ATTR, False):
        setattr(tokenizer, _WARNED_ATTR, True)
        if bos_opens_chat_turns(tokenizer):
            log.warning(f"texts are scored after {tokenizer.bos_token!r}, the BOS token of "
                        f"{getattr(tokenizer, 'name_or_path', 'this model')}, which opens chat turns: the first "
                        "tokens of every text score as surprises; set the model's context_token (e.g. "
                        "'<|endoftext|>', docs/models.md#the-context-token)")
    return int(tid)


def encode(tokenizer, text: str, max_tokens: int | None) -> list[int]:
    """Token ids of ``text`` with the context token in front, truncated to ``max_tokens`` text tokens."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if max_tokens is not None:
        ids = ids[:max_tokens]
    return [context_token_id(tokenizer)] + list(ids)


def _kept_whole(offsets, max_tokens: int | None) -> int:
    """How many of a text's tokens (their character ``offsets``) a cut at ``max_tokens`` keeps: the first
    ``max_tokens``, less those at the end that share the first left-out token's end. Byte-level BPE splits
    a multi-byte character (CJK, an emoji) into tokens that each carry the whole character's end, so a
    cut among them would score part of a character while its offsets claimed all of it (and a reference
    pass cut elsewhere would be compared over other bytes)."""
    n = len(offsets)
    if max_tokens is None or n <= max_tokens:
        return n
    left_out_end = offsets[max_tokens][1]
    keep = max_tokens
    while keep > 0 and offsets[keep - 1][1] >= left_out_end:
        keep -= 1
    return keep


def scored_chars(tokenizer, text: str, max_tokens: int | None) -> int:
    """How many leading characters of ``text`` the text tokens :func:`encode` keeps cover: all of them,
    unless ``max_tokens`` cut it, then up to the end of the last token kept (its character offsets with
    a fast tokenizer, else the length of the kept tokens decoded)."""
    if max_tokens is None:
        return len(text)
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if len(enc["input_ids"]) <= max_tokens:
            return len(text)
        keep = _kept_whole(enc["offset_mapping"], max_tokens)
        return int(max((end for _, end in enc["offset_mapping"][:keep]), default=0))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return len(text) if len(ids) <= max_tokens else len(tokenizer.decode(ids[:max_tokens]))


def encode_scored(tokenizer, text: str, max_tokens: int | None) -> tuple[list[int], int, np.ndarray | None]:
    """:func:`encode`'s token ids of ``text``, with :func:`scored_chars` and where in ``text`` each kept text
    token ends (its character offset, the running maximum: the byte tokens of one character share its end),
    from one tokenisation with character offsets; ``None`` for the ends with a tokenizer that has no
    offsets (not a fast one). A cut at ``max_tokens`` inside a character keeps none of its tokens
    (:func:`_kept_whole`)."""
    if not getattr(tokenizer, "is_fast", False):
        ids = encode(tokenizer, text, max_tokens)
        return ids, scored_chars(tokenizer, text, max_tokens) if len(ids) - 1 == max_tokens else len(text), None
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    n = _kept_whole(enc["offset_mapping"], max_tokens)
    ends = np.maximum.accumulate(np.array([end for _, end in enc["offset_mapping"][:n]], dtype=np.int32))
    chars = len(text) if n == len(enc["input_ids"]) else int(ends[-1]) if n else 0
    return [context_token_id(tokenizer)] + list(enc["input_ids"][:n]), chars, ends


@dataclass
class TokenStats:
    """Flat per-token arrays; passage i owns ``slice(offsets[i], offsets[i+1])``."""

    offsets: np.ndarray  # int64, n+1
    logprob: np.ndarray  # float32
    mu: np.ndarray  # float32
    sigma: np.ndarray  # float32
    # int64, n: how many leading characters of each text its scored tokens cover (less than the text's
    # length where max_tokens cut it); None in statistics written before it was recorded
    chars: np.ndarray | None = None
    # int32, one per token: where in its text each scored token ends (encode_scored); None in statistics
    # written before it was recorded, or of a tokenizer without character offsets
    ends: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def passage(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = slice(self.offsets[i], self.offsets[i + 1])
        return self.logprob[s], self.mu[s], self.sigma[s]

    def passage_ends(self, i: int) -> np.ndarray | None:
        """Where in passage i's text each of its scored tokens ends (None where not recorded)."""
        return None if self.ends is None else self.ends[self.offsets[i]:self.offsets[i + 1]]

    def take(self, indices: Sequence[int]) -> "TokenStats":
        """The statistics of the passages at ``indices``, in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        starts, stops = self.offsets[idx], self.offsets[idx + 1]
        rows = (np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) if len(idx)
                else np.zeros(0, np.int64))
        offsets = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
        return TokenStats(offsets, self.logprob[rows], self.mu[rows], self.sigma[rows],
                          None if self.chars is None else self.chars[idx],
                          None if self.ends is None else self.ends[rows])

    def mean_nll(self) -> np.ndarray:
        """Per-passage mean negative log-likelihood (nats per token); NaN for a passage without a
        scored token, which the scores' finiteness check then reports (``np.add.reduceat`` alone
        would give an empty segment the next passage's first token)."""
        lengths = np.diff(self.offsets)
        out = np.full(len(lengths), np.nan)
        nonempty = lengths > 0
        if nonempty.any():
            sums = np.add.reduceat(self.logprob.astype(np.float64), self.offsets[:-1][nonempty])
            out[nonempty] = -sums / lengths[nonempty]
        return out

    def save(self, path: Path, **arrays) -> None:
        for k in RECORDED:
            if getattr(self, k) is not None:
                arrays[k] = getattr(self, k)
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez_compressed(tmp, **arrays)

    @classmethod
    def load(cls, path: Path, prefix: str = "") -> "TokenStats":
        with np.load(path) as z:
            return cls(**{k: z[prefix + k] if prefix + k in z.files else None for k in RECORDED})


# the arrays a TokenStats holds, in its fields' order (the names in its files); a job's checkpoint key
# holds them, so that shards written before an array was recorded are discarded, not joined to newer ones
RECORDED = ("offsets", "logprob", "mu", "sigma", "chars", "ends")


def save_many(path: Path, provenance: dict | None = None, **named: TokenStats) -> None:
    """Store several TokenStats (e.g. ``original`` and ``lowercase``) in one npz, with their provenance
    (which model, which dtype) as JSON."""
    arrays = {"__provenance__": np.array(json.dumps(provenance or {}, sort_keys=True))}
    for name, ts in named.items():
        for k in RECORDED:
            if getattr(ts, k) is not None:
                arrays[f"{name}__{k}"] = getattr(ts, k)
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


def concat_stats(parts: Sequence[TokenStats]) -> TokenStats:
    """The statistics of consecutive groups of passages as one (shards back into one table)."""
    if len(parts) == 1:
        return parts[0]
    offsets, base = [np.zeros(1, np.int64)], 0
    for part in parts:
        offsets.append(part.offsets[1:] + base)
        base += int(part.offsets[-1])
    cat = lambda name: (np.concatenate([getattr(p, name) for p in parts]) if parts  # noqa: E731
                        else np.zeros(0, np.float32))
    chars = (np.concatenate([p.chars for p in parts]).astype(np.int64)
             if parts and all(p.chars is not None for p in parts) else None)
    ends = (np.concatenate([p.ends for p in parts]).astype(np.int32)
            if parts and all(p.ends is not None for p in parts) else None)
    return TokenStats(np.concatenate(offsets).astype(np.int64), cat("logprob"), cat("mu"), cat("sigma"), chars,
                      ends)


def load_provenance(path: Path) -> dict:
    """What :func:`save_many` recorded about the statistics (empty for files written before it did)."""
    with np.load(path) as z:
        return json.loads(str(z["__provenance__"])) if "__provenance__" in z.files else {}


def load_many(path: Path, name: str) -> TokenStats:
    return TokenStats.load(path, prefix=f"{name}__")


def length_buckets(lengths: Sequence[int], batch_size: int, max_batch_tokens: int | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches, cur = [], []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]
        if cur and (len(cur) >= batch_size or (max_batch_tokens and width * (len(cur) + 1) > max_batch_tokens)):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


STATS_ROWS = 8  # positions per chunk: a chunk of logits stays in cache through every reduction


def next_token_stats(logits, targets, with_distribution: bool = True):
    """(logprob of each target, mu, sigma) from one sequence's logits ``[n, V]``.

    Works on chunks of :data:`STATS_ROWS` positions so that the log-normaliser,
    the probabilities and both moments are computed while the chunk is in cache,
    instead of materialising several ``n x V`` tensors (the vocabulary of a real
    model is 32k-256k entries, which made those passes cost as much as half the
    forward pass). With ``z = logit - logsumexp(logit)``:
    ``mu = sum_v p_v z_v`` and ``sigma^2 = sum_v p_v (z_v - mu)^2`` (the two-pass form: equal to
    ``sum_v p_v z_v^2 - mu^2``, which loses sigma to cancellation in float32 where ``|mu| >> sigma``).
    """
    import torch

    n = logits.shape[0]
    lp = torch.empty(n, dtype=torch.float32, device=logits.device)
    mu = torch.full((n,), float("nan"), dtype=torch.float32, device=logits.device)
    sd = torch.full((n,), float("nan"), dtype=torch.float32, device=logits.device)
    for a in range(0, n, STATS_ROWS):
        x = logits[a:a + STATS_ROWS].float()
        lse = torch.logsumexp(x, -1, keepdim=True)
        lp[a:a + STATS_ROWS] = (x.gather(-1, targets[a:a + STATS_ROWS, None]) - lse)[:, 0]
        if with_distribution:
            z = x - lse
            p = z.exp()
            # 0 log 0 = 0: a token the model rules out (logit -inf) adds nothing to either moment, where
            # p * z would be 0 * -inf = NaN and make mu and sigma NaN at every position
            z.masked_fill_(p == 0, 0)
            m = torch.linalg.vecdot(p, z)
            mu[a:a + STATS_ROWS] = m
            # Two passes, sum p (z - mu)^2: the one-pass E z^2 - mu^2 cancels in float32 where |mu| >> sigma
            # (a near-uniform row over a 262k vocabulary: sigma 0.0055 or 0 for 0.0010). In place: no more memory.
            sd[a:a + STATS_ROWS] = torch.linalg.vecdot(p, z.sub_(m[:, None]).square_()).sqrt()
    return lp.cpu().numpy(), mu.cpu().numpy(), sd.cpu().numpy()


def compute_token_stats(model, tokenizer, texts: Sequence[str], *, batch_size: int = 8,
                        max_tokens: int | None = 512, with_distribution: bool = True,
                        progress: Callable[[str], None] | None = None) -> TokenStats:
    """Batched, length-bucketed forward passes returning per-token statistics for ``texts``.

    ``with_distribution=False`` skips mu/sigma (filled with NaN) when only the
    target-token log-probabilities are needed (e.g. the lowercase pass).
    """
    import torch

    from memaudit.models.forward import right_padded

    scored = [encode_scored(tokenizer, t, max_tokens) for t in texts]
    encoded = [ids for ids, _, _ in scored]
    lengths = [len(e) for e in encoded]
    chars = np.array([n for _, n, _ in scored], dtype=np.int64)
    ends = [e for _, _, e in scored]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    per_lp: list[np.ndarray] = [np.zeros(0, np.float32)] * len(texts)
    per_mu: list[np.ndarray] = [np.zeros(0, np.float32)] * len(texts)
    per_sd: list[np.ndarray] = [np.zeros(0, np.float32)] * len(texts)
    batches = length_buckets(lengths, batch_size)
    t0, done = time.time(), 0
    with torch.inference_mode():
        for bi, batch in enumerate(batches):
            ids, mask = right_padded(encoded, batch, pad)
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            for j, i in enumerate(batch):
                n = lengths[i] - 1
                # Positions 0..n-1 predict tokens 1..n; padding positions are never touched.
                lp, mu, sd = next_token_stats(logits[j, :n], ids[j, 1:n + 1].to(device), with_distribution)
                per_lp[i], per_mu[i], per_sd[i] = lp, mu, sd
            done += len(batch)
            if progress and (bi % 10 == 0 or bi == len(batches) - 1):
                progress(f"{done}/{len(texts)} passages ({time.time() - t0:.0f}s)")
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(x) for x in per_lp])
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.float32)  # noqa: E731
    ends = None if any(e is None for e in ends) else np.concatenate([np.zeros(0, np.int32), *ends])
    return TokenStats(offsets, cat(per_lp), cat(per_mu), cat(per_sd), chars, ends)
