"""Batched top-k sampling on the CPU that stops each sequence as soon as it is done.

``generate()`` keeps every row of a batch running until the longest one ends: a batch of
paraphrases ran its full token limit (186 steps) when the mean paraphrase was 63 tokens.
Here a row leaves the batch (its key/value cache rows are dropped) when it emits an end
token, reaches its own token limit or a caller's ``done`` test says its text is complete, so
the work follows the sum of the lengths instead of batch size × the longest. Several samples
of one prompt share that prompt's prefill (the cache rows are repeated after it).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, width - len(seq):] = torch.tensor(list(seq), dtype=torch.long)
            mask[row, width - len(seq):] = 1
    return ids, mask


def _next_tokens(logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator) -> torch.Tensor:
    logits = logits.float()
    if temperature <= 0 or top_k == 1:
        return logits.argmax(-1)
    values, index = logits.topk(min(top_k, logits.shape[-1]), dim=-1) if top_k else logits.sort(-1, descending=True)
    probs = torch.softmax(values / temperature, dim=-1)
    pick = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return index.gather(-1, pick[:, None]).squeeze(-1)


@torch.inference_mode()
def sample(model, prompts: Sequence[Sequence[int]], n_samples: Sequence[int], max_new_tokens: Sequence[int], *,
           eos_ids: Sequence[int], pad_id: int, temperature: float = 0.7, top_k: int = 50, seed: int = 0,
           done: Callable[[int, list[int]], bool] | None = None, check_every: int = 4) -> list[list[list[int]]]:
    """``n_samples[i]`` continuations (token ids, end token excluded) of each tokenised prompt.

    ``done(i, tokens)`` (optional) is asked every ``check_every`` steps whether a sample of
    prompt ``i`` is complete, e.g. long enough and at a sentence end. ``temperature`` 0 or
    ``top_k`` 1 is greedy decoding. Deterministic for a seed and the same inputs.
    """
    from transformers import DynamicCache

    if not (len(prompts) == len(n_samples) == len(max_new_tokens)):
        raise ValueError("prompts, n_samples and max_new_tokens differ in length")
    out: list[list[list[int]]] = [[] for _ in prompts]
    wanted = [i for i, k in enumerate(n_samples) if k > 0]
    if not wanted:
        return out
    device = next(model.parameters()).device
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    eos = torch.tensor(sorted(set(int(e) for e in eos_ids)), dtype=torch.long)
    ids, mask = _left_pad([prompts[i] for i in wanted], pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                   past_key_values=cache, use_cache=True).logits[:, -1, :]
    # one row per sample: the prompt's cache rows repeated
    rows = torch.tensor([r for r, i in enumerate(wanted) for _ in range(n_samples[i])], dtype=torch.long)
    cache.batch_select_indices(rows.to(device))
    logits, mask = logits[rows.to(device)], mask[rows]
    owner = [wanted[r] for r in rows.tolist()]
    limits = [int(max_new_tokens[i]) for i in owner]
    tokens: list[list[int]] = [[] for _ in owner]
    active = list(range(len(owner)))  # sample index of each batch row
    step = 0
    while active:
        nxt = _next_tokens(logits, temperature, top_k, generator).cpu()
        is_eos = torch.isin(nxt, eos).tolist()
        keep = []
        for row, (sample_i, tok, end) in enumerate(zip(active, nxt.tolist(), is_eos)):
            if not end:
                tokens[sample_i].append(tok)
            finished = end or len(tokens[sample_i]) >= limits[sample_i] or (
                done is not None and (step + 1) % check_every == 0 and done(owner[sample_i], tokens[sample_i]))
            if not finished:
                keep.append(row)
        step += 1
        if len(keep) < len(active):
            if not keep:
                break
            index = torch.tensor(keep, dtype=torch.long)
            cache.batch_select_indices(index.to(device))
            mask, nxt = mask[index], nxt[index]
            active = [active[r] for r in keep]
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
        logits = model(input_ids=nxt[:, None].to(device), attention_mask=mask.to(device),
                       position_ids=(mask.sum(-1, keepdim=True) - 1).to(device),
                       past_key_values=cache, use_cache=True).logits[:, -1, :]
    for sample_i, i in enumerate(owner):
        out[i].append(tokens[sample_i])
    return out
