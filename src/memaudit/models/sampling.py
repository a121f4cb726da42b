"""Batched top-k (and top-p) sampling on the CPU with continuous batching: a row leaves the moment it is done
and waiting prompts take its place.

``generate()`` keeps every row of a batch running until the longest one ends: a batch of
paraphrases ran its full token limit (186 steps) when the mean paraphrase was 63 tokens. On a
CPU a decoding step of a 135M model at small batch sizes costs about the same for 8 rows as for
48 (it is bound by reading the weights), so the rows a step carries should stay many and busy:

- a row leaves the batch (its key/value cache rows are dropped) when it emits an end token,
  reaches its own token limit, or the caller's ``done`` test says its text is complete;
- when the batch falls to half of ``max_rows``, the next waiting prompts are prefilled and
  joined to it (caches aligned by left padding; columns that are padding in every row are
  cropped, so the cache does not grow with the run);
- several samples of one prompt share that prompt's prefill (its cache rows are repeated), and
  the prompts prefilled together run their common prefix once (:func:`_prefill`);
- a decoding step writes its key/value column into spare room of the cache (:func:`_growing_cache`)
  instead of copying the whole cache, as transformers' ``DynamicCache`` does with ``torch.cat``.

Decoding can take transformers' repetition penalty and a caller's logits processor
(CopyBench's greedy decoding with penalty 1.1, MemFree n-gram rejection:
:mod:`memaudit.probes.copybench.memfree`); with neither, the logits are used as they are.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch

from memaudit.models.forward import cache_keyword, common_prefix_length


def _pad_prompts(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, width - len(seq):] = torch.tensor(list(seq), dtype=torch.long)
            mask[row, width - len(seq):] = 1
    return ids, mask


def _next_tokens(logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator,
                 top_p: float = 1.0) -> torch.Tensor:
    """One token per row: greedy at ``temperature`` 0 or ``top_k`` 1, else drawn from the ``top_k``
    most likely tokens at ``temperature`` and, with ``top_p`` < 1, from the fewest of those whose
    probability reaches ``top_p`` (the nucleus: a token is kept while the tokens more likely than it
    hold less than ``top_p``), in ``generate()``'s order: temperature, top-k, top-p."""
    logits = logits.float()
    if temperature <= 0 or top_k == 1:
        return logits.argmax(-1)
    values, index = logits.topk(min(top_k, logits.shape[-1]), dim=-1) if top_k else logits.sort(-1, descending=True)
    probs = torch.softmax(values / temperature, dim=-1)
    if top_p < 1.0:  # values are sorted, most likely first; the first token always stays
        probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p, 0.0)
    # drawn where the generator is (the CPU): a CUDA tensor with a CPU generator is an error, and a
    # model on a GPU then draws from the same seeded stream as on the CPU
    pick = torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(-1)
    return index.gather(-1, pick.to(index.device)[:, None]).squeeze(-1)


def _penalise_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' ``RepetitionPenaltyLogitsProcessor``: every token already in a row's prompt or
    output has its logit divided by ``penalty`` if positive, multiplied by it if negative.

    ``seen`` is the rows' boolean token-presence mask (rows x vocabulary), kept up to date by one
    scatter a step instead of gathering over a growing history.
    """
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


@functools.cache
def _growing_layer_class():
    """The cache layer class of :func:`_growing_cache` (made once: transformers is imported lazily)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys and values are views of buffers with spare columns.

        ``DynamicLayer.update`` concatenates, so each decoding step copies the layer's whole
        cache: at 48 rows and 200 cached tokens, SmolLM2-135M's 30 layers copied 440 MB a step,
        over half of a float32 step on a 2-core AVX2 CPU (``torch.cat`` 53% of the time, the
        matrix products 32%). Here a step writes its column in place; a buffer that is full
        grows by half its width, and one the sampler replaced (rows dropped or joined,
        padding cropped: ``keys`` is no longer the view handed out) is rebuilt once, so
        ``keys``/``values`` always hold exactly what ``DynamicLayer`` would -- the same
        numbers, in a tensor with a wider stride.
        """

        _kbuf = _vbuf = _kview = None

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = self.keys.shape[-2] if self.keys.numel() else 0
            q = key_states.shape[-2]
            buf = self._kbuf
            if (buf is None or self.keys is not self._kview or n + q > buf.shape[-2]
                    or buf.shape[0] != key_states.shape[0]):
                width = n + q + max(16, (n + q) // 2)
                self._kbuf, self._vbuf = (
                    torch.empty((*t.shape[:-2], width, t.shape[-1]), dtype=t.dtype, device=t.device)
                    for t in (key_states, value_states))  # a value head may differ from a key head
                if n:
                    self._kbuf[..., :n, :] = self.keys
                    self._vbuf[..., :n, :] = self.values
            self._kbuf[..., n:n + q, :] = key_states
            self._vbuf[..., n:n + q, :] = value_states
            self.keys, self.values = self._kbuf[..., :n + q, :], self._vbuf[..., :n + q, :]
            self._kview = self.keys
            return self.keys, self.values

        def batch_select_indices(self, indices) -> None:
            """The rows ``indices`` of the buffers (spare columns kept), not of the views only."""
            if self.get_seq_length() > 0 and self.keys is self._kview:
                n = self.keys.shape[-2]
                self._kbuf, self._vbuf = self._kbuf[indices, ...], self._vbuf[indices, ...]
                self.keys, self.values = self._kbuf[..., :n, :], self._vbuf[..., :n, :]
                self._kview = self.keys
            else:
                super().batch_select_indices(indices)

    return GrowingLayer


def _growing_cache():
    """A ``DynamicCache`` of :func:`_growing_layer_class` layers (appended as the model fills them);
    a plain ``DynamicCache`` (slower, the same numbers) from a transformers release whose cache does
    not create its layers from ``layer_class_to_replicate``."""
    from transformers import DynamicCache

    cache = DynamicCache()
    if getattr(cache, "layer_class_to_replicate", None) is not None and not cache.layers:
        cache.layer_class_to_replicate = _growing_layer_class()
    return cache


def _layers(cache) -> list:
    layers = getattr(cache, "layers", None)
    if layers is None or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
        raise TypeError("memaudit.models.sampling needs a transformers DynamicCache with per-layer keys/values")
    return layers


def _pad_left(t: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    if n == 0:
        return t
    shape = list(t.shape)
    shape[dim] = n
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)


def _join(cache, mask: torch.Tensor, new_cache, new_mask: torch.Tensor) -> torch.Tensor:
    """Append ``new_cache``'s rows to ``cache`` (in place), aligning both on the right; the joined mask."""
    width = max(mask.shape[1], new_mask.shape[1])
    for layer, new in zip(_layers(cache), _layers(new_cache)):
        layer.keys = torch.cat([_pad_left(layer.keys, width - mask.shape[1], 2),
                                _pad_left(new.keys, width - new_mask.shape[1], 2)], dim=0)
        layer.values = torch.cat([_pad_left(layer.values, width - mask.shape[1], 2),
                                  _pad_left(new.values, width - new_mask.shape[1], 2)], dim=0)
    return torch.cat([_pad_left(mask, width - mask.shape[1], 1), _pad_left(new_mask, width - new_mask.shape[1], 1)])


def _crop_padding(cache, mask: torch.Tensor) -> torch.Tensor:
    """Drop the leading columns that are padding in every row (of the cache and the mask)."""
    used = mask.any(0).nonzero()
    start = int(used[0]) if len(used) else 0
    if start:
        for layer in _layers(cache):
            layer.keys, layer.values = layer.keys[:, :, start:], layer.values[:, :, start:]
        mask = mask[:, start:]
    return mask


def _prefill(model, group: Sequence[Sequence[int]], pad_id: int, device):
    """The cache, ids, mask and last-position logits of a group of prompts, prefilled together.

    The prompts' common prefix (a chat template's system turn and an instruction: 51 of DE-COP's
    138-token paraphrase prompts) goes through the model once and its cache is repeated for every
    prompt; the rest of each prompt follows it left-padded, ``[prefix][pad...][rest]``, positions
    continuing the prefix (as :func:`memaudit.models.forward.next_token_logprobs` does). The mask
    marks the padding, so each row's cache holds what it would alone. ``logits_to_keep=1``: only
    the last position goes through the output layer (for SmolLM2's 49,152 tokens the other
    positions' logits were a fifth of the prefill's products and a float32 tensor of 0.5 GB for
    21 prompts of 130 tokens).
    """
    n = min(common_prefix_length(group), min(len(p) for p in group) - 1) if len(group) > 1 else 0
    head = torch.tensor(list(group[0][:n]), dtype=torch.long)
    cache = _growing_cache()
    if n > 0:
        model(input_ids=head[None].to(device), **{cache_keyword(): cache}, use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(len(group))
    rest, rest_mask = _pad_prompts([p[n:] for p in group], pad_id)
    ids = torch.cat([head.expand(len(group), n), rest], 1)
    mask = torch.cat([torch.ones((len(group), n), dtype=torch.long), rest_mask], 1)
    logits = model(input_ids=rest.to(device), attention_mask=mask.to(device),
                   position_ids=(mask.cumsum(-1) - 1).clamp(min=0)[:, n:].to(device),
                   **{cache_keyword(): cache}, use_cache=True, logits_to_keep=1).logits[:, -1, :]
    return cache, ids, mask, logits


@torch.inference_mode()
def sample(model, prompts: Sequence[Sequence[int]], n_samples: Sequence[int], max_new_tokens: Sequence[int], *,
           eos_ids: Sequence[int], pad_id: int, temperature: float = 0.7, top_k: int = 50, top_p: float = 1.0,
           seed: int = 0, done: Callable[[int, list[int]], bool] | None = None, check_every: int = 4,
           max_rows: int = 64, repetition_penalty: float = 1.0,
           min_new_tokens: Sequence[int] | None = None, barred_ids: Sequence[Sequence[int]] | None = None,
           processor: Callable[[list[list[int]], torch.Tensor], torch.Tensor] | None = None) -> list[list[list[int]]]:
    """``n_samples[i]`` continuations (token ids, end token excluded) of each tokenised prompt.

    Prompts are admitted in the order given (sort them by length to waste less padding), at
    most ``max_rows`` samples decoding at once. ``done(i, tokens)`` (optional) is asked every
    ``check_every`` steps whether a sample of prompt ``i`` is complete, e.g. long enough and at
    a sentence end. ``temperature`` 0 or ``top_k`` 1 is greedy decoding; ``top_p`` < 1 samples
    from the nucleus of the top-k tokens (1.0: off; :func:`_next_tokens`). Deterministic for a
    seed and the same inputs (and the same ``max_rows``: one generator draws for every row of a
    step, so which prompts decode together changes the samples); the draws are made on the CPU
    whatever the model's device.

    ``max_new_tokens[i]`` is at least 1 (a ValueError otherwise, as ``generate()`` gives).

    ``min_new_tokens[i]`` (optional): a sample of prompt ``i`` may not end before it has that many
    tokens: the end tokens' logits are ``-inf`` until then, as ``generate(min_new_tokens=...)``
    does, and so are ``barred_ids[i]``'s (optional; e.g. line breaks, so that a paraphrase cannot
    end its paragraph early either).

    Before a token is chosen, the next-token logits (in float32, as ``generate()`` processes
    them) go through ``repetition_penalty`` (1.0: none; :func:`_penalise_repeats`, over the
    prompt and the tokens generated so far) and then ``processor(histories, logits)``, which
    gets each batch row's full token history (prompt + generated, read-only) in row order and
    returns the processed logits. That is the order in which ``generate()`` runs its own
    repetition penalty and then a ``logits_processor`` it is given, so greedy tokens match.
    """
    if not (len(prompts) == len(n_samples) == len(max_new_tokens)):
        raise ValueError("prompts, n_samples and max_new_tokens differ in length")
    if barred_ids is not None and min_new_tokens is None:
        raise ValueError("barred_ids are barred until min_new_tokens: give both")
    # a row's first token is taken before its limit is read; configs and requests ask for at least 1, and
    # generate() refuses 0, so a smaller limit is a caller's bug (it got one token)
    too_few = next(((i, int(n)) for i, n in enumerate(max_new_tokens) if int(n) < 1), None)
    if too_few is not None:
        raise ValueError(f"max_new_tokens must be at least 1: prompt {too_few[0]} asks for {too_few[1]}")
    out: list[list[list[int]]] = [[] for _ in prompts]
    waiting = [i for i, k in enumerate(n_samples) if k > 0]
    if not waiting:
        return out
    device = next(model.parameters()).device
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    eos = torch.tensor(sorted(set(int(e) for e in eos_ids)), dtype=torch.long)
    owner: list[int] = []  # prompt of each sample
    tokens: list[list[int]] = []  # tokens of each sample
    active: list[int] = []  # sample of each batch row
    cache, mask, logits = _growing_cache(), torch.zeros((0, 0), dtype=torch.long), None
    steps: list[int] = []  # steps taken by each sample (for check_every)
    penalise = float(repetition_penalty) != 1.0
    history: list[list[int]] = []  # prompt + tokens of each sample (only kept for a processor)
    seen = None  # token-presence mask of the batch rows (only kept for the repetition penalty)

    def admit() -> None:
        nonlocal cache, mask, logits, seen
        group, rows = [], len(active)
        while waiting and (not group or rows + n_samples[waiting[0]] <= max_rows):
            rows += n_samples[waiting[0]]
            group.append(waiting.pop(0))
        new_cache, ids, new_mask, new_logits = _prefill(model, [prompts[i] for i in group], pad_id, device)
        repeat = torch.tensor([r for r, i in enumerate(group) for _ in range(n_samples[i])], dtype=torch.long)
        new_cache.batch_select_indices(repeat.to(device))
        new_logits, new_mask = new_logits[repeat.to(device)], new_mask[repeat]
        for i in group:
            for _ in range(n_samples[i]):
                active.append(len(owner))
                owner.append(i)
                tokens.append([])
                steps.append(0)
                if processor is not None:
                    history.append(list(prompts[i]))
        if penalise:  # the prompt's tokens; padding goes to an extra column, then dropped
            vocab = new_logits.shape[-1]
            new_seen = torch.zeros((len(repeat), vocab + 1), dtype=torch.bool)
            new_seen.scatter_(1, torch.where(new_mask.bool(), ids[repeat].clamp(max=vocab), vocab), True)
            new_seen = new_seen[:, :vocab].to(device)
        if logits is None:
            cache, mask, logits = new_cache, new_mask, new_logits
            if penalise:
                seen = new_seen
        else:
            mask = _join(cache, mask, new_cache, new_mask)
            logits = torch.cat([logits, new_logits])
            if penalise:
                seen = torch.cat([seen, new_seen])

    admit()
    while active:
        if penalise or processor is not None:
            logits = logits.float()
            if penalise:
                logits = _penalise_repeats(logits, seen, float(repetition_penalty))
            if processor is not None:
                logits = processor([history[s] for s in active], logits)
        if min_new_tokens is not None:
            short = [(r, owner[s]) for r, s in enumerate(active) if len(tokens[s]) < int(min_new_tokens[owner[s]])]
            if short:
                logits = logits.clone()
                rows = torch.tensor([r for r, _ in short])
                logits[rows[:, None], eos[None, :].to(logits.device)] = float("-inf")
                for r, i in short:
                    if barred_ids is not None and len(barred_ids[i]):
                        logits[r, torch.as_tensor(barred_ids[i], device=logits.device)] = float("-inf")
        nxt = _next_tokens(logits, temperature, top_k, generator, top_p).cpu()
        is_eos = torch.isin(nxt, eos).tolist()
        if penalise:
            seen.scatter_(1, nxt[:, None].to(device), True)
        keep = []
        for row, (s, tok, end) in enumerate(zip(active, nxt.tolist(), is_eos)):
            steps[s] += 1
            if not end:
                tokens[s].append(tok)
                if processor is not None:
                    history[s].append(tok)
            finished = end or len(tokens[s]) >= int(max_new_tokens[owner[s]]) or (
                done is not None and steps[s] % check_every == 0 and done(owner[s], tokens[s]))
            if not finished:
                keep.append(row)
        if len(keep) < len(active):
            index = torch.tensor(keep, dtype=torch.long)
            cache.batch_select_indices(index.to(device))
            mask, nxt = mask[index], nxt[index]
            if penalise:
                seen = seen[index.to(device)]
            active = [active[r] for r in keep]
            mask = _crop_padding(cache, mask) if keep else mask
        if active:
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
            logits = model(input_ids=nxt[:, None].to(device), attention_mask=mask.to(device),
                           position_ids=(mask.sum(-1, keepdim=True) - 1).to(device),
                           **{cache_keyword(): cache}, use_cache=True).logits[:, -1, :]
        if waiting and len(active) <= max_rows // 2:
            if not active:
                cache, mask, logits, seen = _growing_cache(), torch.zeros((0, 0), dtype=torch.long), None, None
            admit()
    for s, i in enumerate(owner):
        out[i].append(tokens[s])
    return out
