"""Forward-pass machinery: padded batches, and the next-token distribution after a prompt (teacher forcing).

:func:`right_padded` builds the length-bucketed batches of
:func:`memaudit.models.token_stats.compute_token_stats` (and of the token-probability
benchmark's floor). What :meth:`memaudit.backends.hf.HFBackend.option_logprobs` runs: many prompts that
share their first tokens (DE-COP's orderings of one passage share the system prompt,
the question and "A. "; cloze prompts share their instruction) go through the model
in batches whose common prefix is computed once.
"""

from __future__ import annotations

from typing import Iterator, Sequence


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


def common_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    n = 0
    for column in zip(*seqs):
        if any(t != column[0] for t in column):
            break
        n += 1
    return n


def check_fits(model, n_tokens: int) -> None:
    """A clear error, not an index error deep in the model, for a prompt longer than its positions."""
    from memaudit.models.loading import model_max_length

    limit = model_max_length(model)
    if limit is not None and n_tokens > limit:
        raise ValueError(f"a prompt of {n_tokens} tokens is longer than the {limit} positions of the model; "
                         "use shorter passages (e.g. probes.decop.lengths) or a likelihood mode")


def next_token_logprobs(model, encoded: Sequence[Sequence[int]], *, pad_id: int, batch_size: int = 24,
                        share_prefix: bool = True) -> Iterator:
    """Per batch, the float32 log-softmax of the next-token logits after each prompt ``[rows, vocab]``.

    With ``share_prefix`` the batch's common prefix goes through the model once and its
    key/value cache serves every prompt of the batch. The rest is left-padded *after* the
    prefix ([prefix][pad...][suffix], padding masked out, positions continuing the
    prefix), and ``logits_to_keep=1`` sends only the last position through the output layer.
    """
    import torch

    check_fits(model, max(len(ids) for ids in encoded))
    with torch.inference_mode():
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start:start + batch_size]
            n = (min(common_prefix_length(chunk), min(len(c) for c in chunk) - 1)
                 if share_prefix and len(chunk) > 1 else 0)
            cache = None
            if n > 0:
                cache = model(input_ids=torch.tensor([list(chunk[0][:n])], device=model.device),
                              use_cache=True).past_key_values
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
                kwargs.update(past_key_values=cache, use_cache=True)
            yield torch.log_softmax(model(**kwargs).logits[:, -1].float(), dim=-1)
