"""Forward-pass machinery: padded batches, and the next-token distribution after a prompt (teacher forcing).

:func:`right_padded` builds the length-bucketed batches of
:func:`memaudit.models.token_stats.compute_token_stats` (and of the token-probability
benchmark's floor). What :meth:`memaudit.backends.hf.HFBackend.option_logprobs` runs: many prompts that
share their first tokens (DE-COP's orderings of one passage share the system prompt,
the question and "A. "; cloze prompts share their instruction) go through the model
with each shared prefix computed once: in batches around their common prefix, or walked as a
token trie (:func:`tree_next_token_logprobs`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterator, Sequence

from memaudit.errors import PromptTooLongError


@lru_cache(maxsize=1)
def cache_keyword() -> str:
    """The name of a causal LM's key/value cache, as forward keyword and output field: ``cache``
    where transformers has it (``past_key_values``, the old name, warns and goes in 5.40),
    ``past_key_values`` in the 5.x releases before the rename (``pyproject.toml`` allows 5.0)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def right_padded(encoded: Sequence[Sequence[int]], batch: Sequence[int], pad_id: int):
    """``(ids, mask)`` of the sequences ``encoded[i]`` for ``i`` in ``batch``, right-padded to the longest."""
    import torch

    width = max(len(encoded[i]) for i in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for j, i in enumerate(batch):
        ids[j, :len(encoded[i])] = torch.tensor(list(encoded[i]))
        mask[j, :len(encoded[i])] = 1
    return ids, mask


def common_prefix_length(seqs: Sequence[Sequence[int]], start: int = 0) -> int:
    """How many first tokens every sequence shares; the first ``start`` are known to be shared
    (the trie's branches: only the tokens after their parent's prefix are compared)."""
    n = start
    for column in zip(*(seq[start:] for seq in seqs)):
        if any(t != column[0] for t in column):
            break
        n += 1
    return n


def check_fits(model, n_tokens: int) -> None:
    """A clear error, not an index error deep in the model, for a prompt longer than its positions."""
    from memaudit.models.loading import model_max_length

    limit = model_max_length(model)
    if limit is not None and n_tokens > limit:
        raise PromptTooLongError(f"a prompt of {n_tokens} tokens is longer than the {limit} positions of the model; "
                                 "use shorter passages (e.g. probes.decop.lengths) or a likelihood mode")


def next_token_logprobs(model, encoded: Sequence[Sequence[int]], *, pad_id: int, batch_size: int = 24,
                        share_prefix: bool | str = True) -> Iterator:
    """Per batch, the float32 log-softmax of the next-token logits after each prompt ``[rows, vocab]``.

    ``share_prefix``:

    ``"tree"``
        all prompts at once, walked as a token trie (:func:`tree_next_token_logprobs`): every
        prefix that two prompts share goes through the model once, not only the prefix they all
        share. Yields one ``[len(encoded), vocab]`` tensor.
    ``True`` (or ``"batch"``)
        ``batch_size`` prompts at a time; the batch's common prefix goes through the model once
        and its key/value cache serves every prompt of the batch.
    ``False``
        ``batch_size`` prompts at a time, each whole.

    The rest of a prompt is left-padded *after* the prefix ([prefix][pad...][suffix], padding
    masked out, positions continuing the prefix), and ``logits_to_keep=1`` sends only the last
    position through the output layer.
    """
    import torch

    check_fits(model, max(len(ids) for ids in encoded))
    if share_prefix == "tree":
        yield tree_next_token_logprobs(model, encoded, pad_id=pad_id, batch_size=batch_size)
        return
    with torch.inference_mode():
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start:start + batch_size]
            n = (min(common_prefix_length(chunk), min(len(c) for c in chunk) - 1)
                 if share_prefix and len(chunk) > 1 else 0)
            cache = _extend(model, None, list(chunk[0][:n]), 0) if n > 0 else None
            yield _suffix_step(model, cache, n, chunk, pad_id)


def tree_next_token_logprobs(model, encoded: Sequence[Sequence[int]], *, pad_id: int,
                             batch_size: int = 24):
    """``[len(encoded), vocab]``: :func:`next_token_logprobs` of every prompt, through their token trie.

    Depth first from the root: a group of prompts that share tokens ``[0, n)`` (in the key/value
    cache) runs its longer common prefix once (batch of one), then splits by the next token.
    Prompts left alone in their branch (or with one token to go) are the group's leaves: they run
    together, left-padded after the branch's prefix as in :func:`next_token_logprobs`
    (``batch_size`` at a time); branches of two or more recurse on a copy of the cache.

    DE-COP's 24 orderings of four options ``o1..o4`` after a header ``H`` cost ``H + 4L`` tokens each
    as a batch (``24H + 96L``); as a trie ``H`` once, the 4 first options, 12 second, and 24 leaves of
    two options and the answer cue (``H + 64L``). On a CPU, where a forward pass costs in proportion
    to its tokens, that is the time; on a GPU the many small passes can cost more than one large
    batch, which is why :meth:`memaudit.backends.hf.HFBackend.option_logprobs` walks the trie on a
    CPU only. Exact: every token sees the same context at the same position as in the flat batch.
    """
    import copy

    import torch

    out = [None] * len(encoded)

    def node(cache, n: int, idx: list[int]) -> None:
        group = [encoded[i] for i in idx]
        m = min(common_prefix_length(group, n), min(len(s) for s in group) - 1)
        if m > n:
            cache = _extend(model, cache, list(group[0][n:m]), n)
            n = m
        branches: dict[int, list[int]] = {}
        for i in idx:
            branches.setdefault(encoded[i][n], []).append(i)
        leaves, inner = [], []
        for branch in branches.values():
            longer = [i for i in branch if len(encoded[i]) > n + 1]
            if len(longer) > 1:
                inner.append(longer)
                leaves += [i for i in branch if i not in longer]
            else:
                leaves += branch
        steps = [(node, b) for b in inner] + [(leaf, leaves[k:k + batch_size])
                                              for k in range(0, len(leaves), batch_size)]
        for k, (step, part) in enumerate(steps):
            step(cache if k == len(steps) - 1 or cache is None else copy.deepcopy(cache), n, part)

    def leaf(cache, n: int, idx: list[int]) -> None:
        logp = _suffix_step(model, cache, n, [encoded[i] for i in idx], pad_id)
        for row, i in enumerate(idx):
            out[i] = logp[row]

    with torch.inference_mode():
        node(None, 0, list(range(len(encoded))))
        return torch.stack(out)


def _extend(model, cache, ids: list[int], start: int):
    """The key/value cache after running ``ids`` (one sequence) at positions ``start...`` after ``cache``."""
    import torch

    kwargs = dict(input_ids=torch.tensor([ids], device=model.device), use_cache=True,
                  position_ids=torch.arange(start, start + len(ids), device=model.device)[None])
    if cache is not None:
        kwargs[cache_keyword()] = cache
    return getattr(model(**kwargs), cache_keyword())


def _suffix_step(model, cache, n: int, chunk: Sequence[Sequence[int]], pad_id: int):
    """log-softmax ``[len(chunk), vocab]`` after each sequence of ``chunk``, whose first ``n`` tokens
    are in ``cache`` (batch of one; repeated here): [prefix][pad...][suffix]."""
    import torch

    if cache is not None:
        cache.batch_repeat_interleave(len(chunk))
    rest = [list(seq[n:]) for seq in chunk]
    width = max(len(r) for r in rest)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(chunk), n + width), dtype=torch.long)
    positions = torch.zeros((len(chunk), width), dtype=torch.long)
    mask[:, :n] = 1
    for row, seq in enumerate(rest):
        ids[row, width - len(seq):] = torch.tensor(seq)
        mask[row, n + width - len(seq):] = 1
        positions[row, width - len(seq):] = torch.arange(n, n + len(seq))
    kwargs = dict(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                  position_ids=positions.to(model.device), logits_to_keep=1)
    if cache is not None:
        kwargs.update({cache_keyword(): cache, "use_cache": True})
    return torch.log_softmax(model(**kwargs).logits[:, -1].float(), dim=-1)
