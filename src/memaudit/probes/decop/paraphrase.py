"""Three paraphrases per passage, and quality control before they are used.

Real runs ask Claude or GPT with the paper's prompts (Appendix B, temperature 0.1,
one reply holding "Example B: ... Example C: ... Example D: ..."). The demo asks
the local instruct model for one paraphrase at a time (it cannot follow the
three-in-one format), sampled, in batches.

Quality control (:func:`check_paraphrase`) rejects a candidate that is empty,
identical or near-identical to the passage or to an accepted paraphrase, far off
in length (word ratio outside ``length_ratio``, 0.6-1.6) or semantically
unrelated (MiniLM cosine below ``min_cosine``); rejected slots are asked again,
up to ``max_attempts`` rounds. A passage that never gets three accepted
paraphrases is dropped and counted: the QC table reports every rate per document.
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from memaudit.backends.base import GenerationParams
# re-exported: workflow/scripts/decop_items.py imports it from here (editing a script reruns its jobs)
from memaudit.models.encoder import MiniLMEncoder  # noqa: F401
from memaudit.probes.decop.prompts import PARAPHRASE_PROMPT_SINGLE, paraphrase_prompt, parse_paraphrases

log = logging.getLogger(__name__)

REASONS = ("empty", "near_identical", "duplicate", "length", "unrelated")


@dataclass(frozen=True)
class QCSettings:
    min_cosine: float = 0.5
    length_ratio: tuple[float, float] = (0.6, 1.6)
    max_similarity: float = 0.9  # difflib ratio at or above which a candidate is near-identical
    max_attempts: int = 3

    @classmethod
    def from_config(cls, cfg: dict) -> "QCSettings":
        lo, hi = cfg.get("length_ratio", [0.6, 1.6])
        return cls(float(cfg.get("min_cosine", 0.5)), (float(lo), float(hi)),
                   float(cfg.get("max_similarity", 0.9)), int(cfg.get("max_attempts", 3)))


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def similarity(a: str, b: str) -> float:
    """Character-level similarity of the normalised texts (difflib ratio, 1 = identical)."""
    return difflib.SequenceMatcher(None, _norm(a), _norm(b), autojunk=False).ratio()


def check_paraphrase(original: str, candidate: str, accepted: Sequence[str], cosine: float,
                     qc: QCSettings) -> str | None:
    """The first reason to reject ``candidate`` (see :data:`REASONS`), or ``None`` to accept it."""
    if not candidate or not _norm(candidate):
        return "empty"
    if similarity(original, candidate) >= qc.max_similarity:
        return "near_identical"
    if any(similarity(a, candidate) >= qc.max_similarity for a in accepted):
        return "duplicate"
    ratio = len(candidate.split()) / max(1, len(original.split()))
    if not qc.length_ratio[0] <= ratio <= qc.length_ratio[1]:
        return "length"
    if cosine < qc.min_cosine:
        return "unrelated"
    return None


_LEAD_RE = re.compile(r"^\s*(?:(?:here(?:'s| is)|sure)[^\n:]*:|(?:rewritten|paraphrased?|new)\s+(?:text|version)\s*:"
                      r"|text\s*:)\s*", re.IGNORECASE)


def clean_candidate(text: str) -> str:
    """Strip what chat models wrap around a paraphrase: "Here is ...:" leads, quotes, blank lines."""
    text = _LEAD_RE.sub("", (text or "").strip())
    text = text.strip().strip('"“”').strip()
    return re.sub(r"\s*\n\s*\n\s*", "\n\n", text)


def _paragraphs(text: str) -> list[str]:
    """The non-blank paragraphs of ``text`` (split at blank lines)."""
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def trim_commentary(candidate: str, original: str) -> str:
    """Keep as many leading paragraphs as the original has: small chat models follow the
    paraphrase with a blank line and a comment on it ("This version ..."), which would fail
    the length check of an otherwise usable paraphrase."""
    paragraphs = _paragraphs(candidate)
    keep = len(_paragraphs(original)) or 1
    return "\n\n".join(paragraphs[:keep])


def trim_to_length(candidate: str, original: str, *, stop_at: float = 0.9) -> str:
    """Drop a last sentence left unfinished (the generation hit its token limit), then cut an
    overlong candidate after the sentence that brings it to ``stop_at`` of the original's words.

    Small local models follow a usable paraphrase with sentences of their own; cut there, the
    candidate still has to pass every quality check (one that ends up too short is rejected for
    its length). API paraphrases are not trimmed: the paper's models keep to the length.
    """
    from memaudit.datasets.text import split_sentences
    from memaudit.probes.decop.construct import ENDS_WITH_PUNCT

    sentences = [(i, sent) for i, para in enumerate(re.split(r"\n\s*\n", candidate))
                 for sent in split_sentences(para)]
    if len(sentences) > 1 and not ENDS_WITH_PUNCT.search(sentences[-1][1]):
        sentences.pop()
    kept, n = [], 0
    for i, sent in sentences:
        if n >= stop_at * len(original.split()):
            break
        kept.append((i, sent))
        n += len(sent.split())
    if not kept:
        return candidate
    paragraphs: dict[int, list[str]] = {}
    for i, sent in kept:
        paragraphs.setdefault(i, []).append(sent)
    return "\n\n".join(" ".join(p) for p in paragraphs.values())


class LocalParaphraser:
    """A local instruct model, one paraphrase per sample (top-k), batched; see :mod:`memaudit.models.sampling`."""

    def __init__(self, model, tokenizer, *, name: str, temperature: float = 0.7, batch_size: int = 8,
                 seed: int = 0, top_k: int = 50, stop_at: float = 0.9):
        self.model, self.tokenizer = model, tokenizer
        self.name, self.temperature, self.batch_size, self.seed = name, temperature, batch_size, seed
        self.top_k, self.stop_at = top_k, stop_at

    def describe(self) -> dict:
        return {"paraphraser": self.name, "prompt": "single", "temperature": self.temperature, "top_k": self.top_k}

    def candidates(self, texts: Sequence[str], lengths: Sequence[int], attempt: int,
                   wanted: Sequence[int] | None = None) -> list[list[str]]:
        """``wanted[i]`` candidates for text ``i`` (default three), sampled from one shared prompt
        prefill: a retry asks only for the paraphrases quality control has not yet accepted.

        A sample stops at its end token, at its token limit, or once it is as long as the
        passage at a sentence end (what :func:`trim_to_length` would keep anyway), so a model
        that rambles on after its paraphrase costs no more steps.
        """
        import torch

        from memaudit.probes.decop.construct import ENDS_WITH_PUNCT
        from memaudit.models.sampling import sample

        tok = self.tokenizer
        wanted = [3] * len(texts) if wanted is None else list(wanted)
        eos = {t for t in (tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")) if isinstance(t, int) and t >= 0}
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        prompts = [tok.apply_chat_template([{"role": "user", "content": PARAPHRASE_PROMPT_SINGLE.format(ref_text=t)}],
                                           tokenize=False, add_generation_prompt=True) for t in texts]
        prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        words = [len(t.split()) for t in texts]
        paragraphs = [len(_paragraphs(t)) or 1 for t in texts]

        def done(i: int, ids: list[int]) -> bool:
            text = tok.decode(ids, skip_special_tokens=True).strip()
            if len(_paragraphs(text)) > paragraphs[i]:
                return True  # a comment after the paraphrase, which trim_commentary drops
            return len(text.split()) >= self.stop_at * words[i] and bool(ENDS_WITH_PUNCT.search(text))

        outs: list[list[str]] = [[] for _ in texts]
        order = sorted((i for i in range(len(texts)) if wanted[i] > 0), key=lambda i: len(prompt_ids[i]))
        # Token-by-token decoding is many small kernels with a thread barrier each: on a busy
        # machine a second thread made it 5x slower (wall) and 6x costlier (CPU), so one thread.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            samples = sample(self.model, [prompt_ids[i] for i in order], [wanted[i] for i in order],
                             [int(words[i] * 1.4 * 1.3) + 8 for i in order], eos_ids=sorted(eos), pad_id=pad,
                             temperature=self.temperature, top_k=self.top_k, max_rows=self.batch_size,
                             seed=self.seed * 7919 + attempt * 104729, done=lambda row, ids: done(order[row], ids))
        finally:
            torch.set_num_threads(threads)
        for i, ids_list in zip(order, samples):
            for ids in ids_list:
                text = trim_commentary(clean_candidate(tok.decode(ids, skip_special_tokens=True)), texts[i])
                outs[i].append(trim_to_length(text, texts[i], stop_at=self.stop_at))
        return outs


class BackendParaphraser:
    """Any backend that generates (Claude, GPT, a served model): the paper's prompts, temperature 0.1."""

    def __init__(self, backend, *, name: str, temperature: float = 0.1, max_new_tokens: int = 1500):
        self.backend, self.name = backend, name
        self.temperature, self.max_new_tokens = temperature, max_new_tokens

    def describe(self) -> dict:
        return {"paraphraser": self.name, "prompt": "paper", "temperature": self.temperature}

    def candidates(self, texts: Sequence[str], lengths: Sequence[int], attempt: int,
                   wanted: Sequence[int] | None = None) -> list[list[str]]:
        """Three candidates per text from one reply (the paper's prompt asks for B, C and D at once,
        so ``wanted`` does not make a retry cheaper)."""
        params = GenerationParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                  sample_index=attempt)
        gens = self.backend.generate([paraphrase_prompt(t, n) for t, n in zip(texts, lengths)], params)
        return [[clean_candidate(p) for p in parse_paraphrases(g.text or "")] for g in gens]


@dataclass
class ParaphraseResult:
    paraphrases: list[str] | None  # three accepted, or None when the passage is dropped
    attempts: int
    rejected: dict = field(default_factory=lambda: {r: 0 for r in REASONS})
    n_candidates: int = 0


def paraphrase_with_qc(texts: Sequence[str], lengths: Sequence[int], paraphraser, encoder,
                       qc: QCSettings, *, progress: Callable[[str], None] = log.info) -> list[ParaphraseResult]:
    """Ask for three paraphrases per text; reject by :func:`check_paraphrase`; re-ask the missing ones."""
    results = [ParaphraseResult([], 0) for _ in texts]
    for attempt in range(qc.max_attempts):
        todo = [i for i, r in enumerate(results) if len(r.paraphrases) < 3]
        if not todo:
            break
        progress(f"paraphrase round {attempt + 1}: {len(todo)} passage(s)")
        cands = paraphraser.candidates([texts[i] for i in todo], [lengths[i] for i in todo], attempt,
                                       [3 - len(results[i].paraphrases) for i in todo])
        flat = [(i, c) for i, cs in zip(todo, cands) for c in cs]
        cos = encoder.cosine([texts[i] for i, _ in flat], [c or " " for _, c in flat]) if flat else []
        for (i, cand), c in zip(flat, cos):
            r = results[i]
            r.attempts = attempt + 1
            if len(r.paraphrases) >= 3:
                continue
            r.n_candidates += 1
            reason = check_paraphrase(texts[i], cand, r.paraphrases, float(c), qc)
            if reason is None:
                r.paraphrases.append(cand)
            else:
                r.rejected[reason] += 1
    for r in results:
        if len(r.paraphrases) < 3:
            r.paraphrases = None
    return results
