"""The three DE-COP modes: logit (open models), black-box (text only) and likelihood (base models).

Every mode turns multiple-choice items (option 0 is the verbatim passage) into
answer rows, one per (passage, ordering) — see :mod:`memaudit.probes.decop.analysis`.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from memaudit.backends.base import STATUS_ERROR, STATUS_REFUSAL, GenerationParams, option_token_ids
from memaudit.probes.decop.prompts import (LETTERS, closed_model_prompt, correct_position, parse_answer,
                                           system_prompt, user_prompt)

log = logging.getLogger(__name__)


def _messages(item: dict, perm: Sequence[int]) -> list[dict]:
    shown = [item["options"][i] for i in perm]
    meta = item.get("meta", {})
    return [{"role": "system", "content": system_prompt()},
            {"role": "user", "content": user_prompt(meta.get("title", ""), meta.get("author", ""),
                                                    meta.get("kind", "book"), shown)}]


def closed_model(backend) -> bool:
    """Whether ``backend`` is asked Appendix C.1's closed-model prompt: an API model (OpenAI, Anthropic, an
    OpenAI-compatible server: memaudit tells models apart by how they are served); a local model gets C.2's."""
    from memaudit.backends.api import APIBackend

    return isinstance(backend, APIBackend)


def render_question(tokenizer, item: dict, perm: Sequence[int], *, chat: bool = True) -> str:
    """Appendix C.2's prompt as a local model's input: chat template with system + user turns and the
    assistant turn opened, or, for a tokenizer without a chat template, the two as one text (system
    prompt, blank line, question). (What :meth:`HFBackend.option_logprobs` renders from
    :func:`question_prompts`; used by the benchmark's reference way.)"""
    messages = _messages(item, perm)
    if chat and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return messages[0]["content"] + "\n\n" + messages[1]["content"]


def question_prompts(item: dict, perms: Sequence[Sequence[int]], *, closed: bool = False) -> list[str]:
    """The user turn of each ordering's question: C.2's (the system prompt goes in the request's params) or,
    ``closed``, C.1's whole prompt (:func:`~memaudit.probes.decop.prompts.closed_model_prompt`)."""
    users = [_messages(item, perm)[1]["content"] for perm in perms]
    return [closed_model_prompt(user) for user in users] if closed else users


def question_params(*, chat: bool = True, closed: bool = False) -> GenerationParams:
    """One answer token at temperature 0 after C.2's system prompt, or none (``closed``: C.1 has none)."""
    return GenerationParams(max_new_tokens=1, temperature=0.0, system_prompt=None if closed else system_prompt(),
                            chat=chat)


def blackbox_params(max_new_tokens: int, *, closed: bool = False) -> GenerationParams:
    """Black-box mode's decoding: a short greedy answer (Section 5.1.2) after C.2's system prompt, or,
    ``closed``, none (C.1)."""
    return GenerationParams(max_new_tokens=max_new_tokens, temperature=0.0,
                            system_prompt=None if closed else system_prompt())


def letter_probabilities(letter_logprobs: Sequence[dict[str, float]]) -> tuple[np.ndarray, np.ndarray]:
    """``(probs, mass)`` from per-question ``{letter: log p}``: P(letter) renormalised over A-D;
    ``mass`` is the unnormalised total (how much of the next-token distribution is on letters).

    A letter an API did not list among its top log-probabilities (``nan``) counts as 0; a
    question with no letter listed has ``nan`` probabilities.
    """
    raw = np.exp(np.array([[row[letter] for letter in LETTERS] for row in letter_logprobs], dtype=np.float64))
    raw = np.nan_to_num(raw, nan=0.0)
    mass = raw.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        probs = raw / mass[:, None]
    return probs, mass


def reference_probabilities(model, tokenizer, prompts: Sequence[str], *, chat: bool = True):
    """The benchmark's baseline: one ``generate(max_new_tokens=2, output_scores=True)`` per rendered
    prompt, reading the letters' probabilities at the first generated step, as one generate() per
    question (the reference reads step 1 or, for Llama-2-7B-chat, 2, and one token per letter).
    A prompt rendered as plain text (``chat`` false, or a tokenizer without a chat template: see
    :func:`render_question`) follows the context token: :func:`memaudit.models.token_stats.encode`,
    as the HF backend's generate() encodes it (``HFBackend._prompt_ids``)."""
    import torch

    from memaudit.models.forward import check_fits
    from memaudit.models.token_stats import encode

    plain = not (chat and getattr(tokenizer, "chat_template", None))

    letter_ids = [option_token_ids(tokenizer, letter) for letter in LETTERS]
    probs, masses = [], []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.inference_mode():
        for prompt in prompts:
            if plain:
                ids = torch.tensor([encode(tokenizer, prompt, max_tokens=None)], device=model.device)
                enc = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            else:
                enc = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").to(model.device)
            check_fits(model, enc["input_ids"].shape[1])
            out = model.generate(**enc, max_new_tokens=2, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=pad)
            p = torch.softmax(out.scores[0].float(), dim=-1)
            raw = torch.stack([p[:, ids].sum(-1) for ids in letter_ids], dim=-1).double()
            mass = raw.sum(-1, keepdim=True)
            probs.append((raw / mass).cpu().numpy())
            masses.append(mass[:, 0].cpu().numpy())
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


def score_logit(backend, items: Sequence[dict], perms: Sequence[Sequence[int]], *,
                batch_size: int = 24, chat: bool = True,
                progress: Callable[[str], None] = log.info) -> pd.DataFrame:
    """Logit mode: P(A-D) at the answer position through ``Backend.option_logprobs``; ``pred`` = argmax.

    A local model batches all orderings of a passage together (their shared prefix computed
    once); an OpenAI-compatible API reads the letters from the first token's ``top_logprobs``, asked
    Appendix C.1's closed-model prompt (:func:`closed_model`).
    """
    closed = closed_model(backend)
    params = question_params(chat=chat, closed=closed)
    rows = []
    for n, item in enumerate(items):
        prompts = question_prompts(item, perms, closed=closed)
        options = [LETTERS] * len(prompts)
        outcomes = [None] * len(prompts)
        if hasattr(backend, "option_scores"):
            # an API model (api.on_error: record): a request that got no answer is an error, and one the
            # provider refused a refusal, not an answer without a letter (invalid), as black-box mode counts them
            scores = backend.option_scores(prompts, options, params=params)
            logprobs = [s.logprobs for s in scores]
            outcomes = [s.status if s.status in (STATUS_ERROR, STATUS_REFUSAL) else None for s in scores]
        else:
            logprobs = backend.option_logprobs(prompts, options, params=params, batch_size=batch_size)
        probs, mass = letter_probabilities(logprobs)
        for perm, p, m, outcome in zip(perms, probs, mass, outcomes):
            row = _row(item, perm)
            row.update({f"p_{letter}": float(v) for letter, v in zip(LETTERS, p)})
            ok = bool(m > 0) and outcome is None
            row.update(letter_mass=float(m), pred=int(np.argmax(p)) if ok else -1,
                       status=outcome or ("ok" if ok else "invalid"))
            rows.append(row)
        if (n + 1) % 10 == 0 or n + 1 == len(items):
            progress(f"logit mode: {n + 1}/{len(items)} passages")
    return pd.DataFrame(rows)


def score_blackbox(backend, items: Sequence[dict], perms: Sequence[Sequence[int]], *,
                   max_new_tokens: int = 8) -> pd.DataFrame:
    """Black-box mode: the answer letter parsed from the text (strict, then lenient).

    Temperature 0 (Section 5.1.2); an API model is asked Appendix C.1's closed-model prompt, a local
    one C.2's (:func:`closed_model`). A refusal or a reply naming no single letter is kept as
    ``pred = -1`` with its status, counted and scored as wrong.
    """
    closed = closed_model(backend)
    params = blackbox_params(max_new_tokens, closed=closed)
    pairs = list(_rows(items, perms))
    # in the order of pairs
    prompts = [prompt for item in items for prompt in question_prompts(item, perms, closed=closed)]
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
