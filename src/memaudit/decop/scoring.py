"""The three DE-COP modes: logit (open models), black-box (text only) and likelihood (base models).

Every mode turns multiple-choice items (option 0 is the verbatim passage) into
answer rows, one per (passage, ordering) — see :mod:`memaudit.decop.analysis`.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from memaudit.backends.base import GenerationParams, option_variants
from memaudit.decop.prompts import LETTERS, correct_position, parse_answer, system_prompt, user_prompt

log = logging.getLogger(__name__)


def _messages(item: dict, perm: Sequence[int]) -> list[dict]:
    shown = [item["options"][i] for i in perm]
    meta = item.get("meta", {})
    return [{"role": "system", "content": system_prompt()},
            {"role": "user", "content": user_prompt(meta.get("title", ""), meta.get("author", ""),
                                                    meta.get("kind", "book"), shown)}]


def render_question(tokenizer, item: dict, perm: Sequence[int], *, chat: bool = True) -> str:
    """Appendix C prompt as model input: chat template with system + user turns (C.2) and the
    assistant turn opened, or, for a tokenizer without a chat template, C.1's single text."""
    messages = _messages(item, perm)
    if chat and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return messages[0]["content"] + "\n\n" + messages[1]["content"]


def letter_token_ids(tokenizer) -> list[list[int]]:
    """Per letter, the first-token ids of its variants ("A" and " A", :func:`option_variants`)."""
    out = []
    for letter in LETTERS:
        ids = {tokenizer(v, add_special_tokens=False)["input_ids"][0] for v in option_variants(letter)}
        out.append(sorted(ids))
    return out


def letter_probabilities(logits, letter_ids: Sequence[Sequence[int]]):
    """``(probs, mass)``: per row, P(letter) = Σ_variants softmax(logits), renormalised over A-D;
    ``mass`` is the unnormalised total (how much of the next-token distribution is on letters)."""
    import torch

    p = torch.softmax(logits.float(), dim=-1)
    raw = torch.stack([p[:, ids].sum(-1) for ids in letter_ids], dim=-1).double()
    mass = raw.sum(-1, keepdim=True)
    return (raw / mass).cpu().numpy(), mass[:, 0].cpu().numpy()


def _check_fits(model, n_tokens: int) -> None:
    from memaudit.models.loading import model_max_length

    limit = model_max_length(model)
    if limit is not None and n_tokens > limit:
        raise ValueError(f"a DE-COP prompt of {n_tokens} tokens is longer than the {limit} positions of the model; "
                         "use shorter passages (probes.decop.lengths) or the likelihood mode")


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    n = 0
    for column in zip(*seqs):
        if any(t != column[0] for t in column):
            break
        n += 1
    return n


def logit_probabilities(model, tokenizer, prompts: Sequence[str], letter_ids, *, batch_size: int = 24,
                        share_prefix: bool = True):
    """Teacher-forced letter probabilities at the answer position, prompts batched together.

    The orderings of one passage share their first tokens (system prompt, question, "A. "):
    with ``share_prefix`` that prefix goes through the model once and its key/value cache
    serves every prompt of the batch. The rest is left-padded *after* the prefix
    ([prefix][pad...][suffix], padding masked out, positions continuing the prefix), and
    ``logits_to_keep=1`` sends only the answer position through the output layer.
    """
    import torch

    probs, masses = [], []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    _check_fits(model, max(len(ids) for ids in encoded))
    with torch.inference_mode():
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start:start + batch_size]
            n = min(_common_prefix(chunk), min(len(c) for c in chunk) - 1) if share_prefix and len(chunk) > 1 else 0
            cache = None
            if n > 0:
                cache = model(input_ids=torch.tensor([chunk[0][:n]], device=model.device), use_cache=True).past_key_values
                cache.batch_repeat_interleave(len(chunk))
            rest = [seq[n:] for seq in chunk]
            width = max(len(r) for r in rest)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
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
            logits = model(**kwargs).logits[:, -1]
            p, m = letter_probabilities(logits, letter_ids)
            probs.append(p)
            masses.append(m)
    return np.concatenate(probs), np.concatenate(masses)


def reference_probabilities(model, tokenizer, prompts: Sequence[str], letter_ids):
    """The reference implementation's way: one ``generate(max_new_tokens=2, output_scores=True)``
    per prompt, reading the scores of the first generated step (the baseline of the benchmark)."""
    import torch

    probs, masses = [], []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.inference_mode():
        for prompt in prompts:
            enc = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").to(model.device)
            _check_fits(model, enc["input_ids"].shape[1])
            out = model.generate(**enc, max_new_tokens=2, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=pad)
            p, m = letter_probabilities(out.scores[0], letter_ids)
            probs.append(p)
            masses.append(m)
    return np.concatenate(probs), np.concatenate(masses)


def _rows(items: Sequence[dict], perms: Sequence[Sequence[int]]):
    for item in items:
        for perm in perms:
            yield item, perm


def _row(item: dict, perm: Sequence[int]) -> dict:
    meta = item.get("meta", {})
    return {"item_id": item["item_id"], "passage_id": item["passage_id"], "doc_id": item["doc_id"],
            "label": int(item["label"]), "role": meta.get("role", "evaluate"),
            "length": int(meta.get("length_tokens", 0)), "ordering": "".join(map(str, perm)),
            "correct": correct_position(perm, int(item.get("answer", 0)))}


def score_logit(model, tokenizer, items: Sequence[dict], perms: Sequence[Sequence[int]], *,
                batch_size: int = 24, chat: bool = True,
                progress: Callable[[str], None] = log.info) -> pd.DataFrame:
    """Logit mode: all orderings of a passage in one batch; ``pred`` = argmax of P(A-D)."""
    letter_ids = letter_token_ids(tokenizer)
    rows = []
    for n, item in enumerate(items):
        prompts = [render_question(tokenizer, item, perm, chat=chat) for perm in perms]
        probs, mass = logit_probabilities(model, tokenizer, prompts, letter_ids, batch_size=batch_size)
        for perm, p, m in zip(perms, probs, mass):
            row = _row(item, perm)
            row.update({f"p_{letter}": float(v) for letter, v in zip(LETTERS, p)})
            row.update(letter_mass=float(m), pred=int(np.argmax(p)), status="ok")
            rows.append(row)
        if (n + 1) % 10 == 0 or n + 1 == len(items):
            progress(f"logit mode: {n + 1}/{len(items)} passages")
    return pd.DataFrame(rows)


def score_blackbox(backend, items: Sequence[dict], perms: Sequence[Sequence[int]], *,
                   max_new_tokens: int = 8) -> pd.DataFrame:
    """Black-box mode: the answer letter parsed from the text (strict, then lenient).

    Temperature 0 (Section 5.1.2). A refusal or a reply naming no single letter is kept
    as ``pred = -1`` with its status, counted and scored as wrong.
    """
    params = GenerationParams(max_new_tokens=max_new_tokens, temperature=0.0, system_prompt=system_prompt())
    pairs = list(_rows(items, perms))
    prompts = [_messages(item, perm)[1]["content"] for item, perm in pairs]
    gens = backend.generate(prompts, params)
    rows = []
    for (item, perm), gen in zip(pairs, gens):
        row = _row(item, perm)
        if gen.status == "error":
            status, letter, how = "error", None, "error"
        else:
            status, letter, how = parse_answer(gen.text, provider_refusal=gen.status == "refusal"
                                               and not gen.text)
        row.update(pred=LETTERS.index(letter) if letter else -1, status=status, parse=how,
                   reply=(gen.text or "")[:200], from_cache=bool(gen.from_cache))
        rows.append(row)
    return pd.DataFrame(rows)


def score_likelihood(backend, items: Sequence[dict]) -> pd.DataFrame:
    """Likelihood mode: the option with the highest length-normalised log-likelihood
    (mean token log-probability, each option scored as plain text). Order does not
    matter, so there is one question per passage (``ordering`` "0123")."""
    texts = [opt for item in items for opt in item["options"]]
    stats = backend.token_stats(texts, with_distribution=False)
    mean_lp = -stats.mean_nll().reshape(len(items), 4)
    rows = []
    for item, lp in zip(items, mean_lp):
        row = _row(item, (0, 1, 2, 3))
        row.update({f"ll_{letter}": float(v) for letter, v in zip(LETTERS, lp)})
        row.update(pred=int(np.argmax(lp)), status="ok")
        rows.append(row)
    return pd.DataFrame(rows)
