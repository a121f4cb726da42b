"""Three paraphrases per passage, and quality control before they are used.

Real runs ask Claude or GPT with the paper's prompts (Appendix B, temperature 0.1,
one reply holding "Example B: ... Example C: ... Example D: ..."). The demo asks
the local instruct model for one paraphrase at a time (it cannot follow the
three-in-one format), sampled, in batches. A local encoder-decoder paraphrase
model (the KTD paper's T5) reads "paraphrase: <passage>" and is sampled by
``generate()`` (:class:`Seq2SeqParaphraser`).

Quality control (:func:`check_paraphrase`) rejects a candidate that is empty,
identical or near-identical to the passage or to an accepted paraphrase, holds a
verbatim run of half the passage's words or more (``max_verbatim_run``), far off
in length (word ratio outside ``length_ratio``, 0.6-1.6) or semantically
unrelated (MiniLM cosine below ``min_cosine``); rejected slots are asked again,
up to ``max_attempts`` rounds. A passage that never gets three accepted
paraphrases is dropped and counted: the QC table reports every rate per document.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from memaudit.backends.base import GenerationParams
# re-exported: workflow/scripts/decop_items.py imports it from here (editing a script reruns its jobs)
from memaudit.models.encoder import MiniLMEncoder  # noqa: F401
from memaudit.probes.decop.prompts import PARAPHRASE_PROMPT_SINGLE, paraphrase_prompt, parse_paraphrases
from memaudit.probes.overlap import longest_common_run

log = logging.getLogger(__name__)

REASONS = ("empty", "near_identical", "verbatim_run", "duplicate", "length", "unrelated")

# Where probes.decop.paraphrase.max_verbatim_run is absent (no schema default: a config without it
# keeps its jobs' params). Half: a distractor whose one verbatim run is as long as the rest of the
# passage is recognised as the passage is; the demo's paraphrases share runs of a median 0.11 of it
# (0.33 at the 90th percentile; docs/probes/decop.md#the-verbatim-run-check).
DEFAULT_MAX_VERBATIM_RUN = 0.5


@dataclass(frozen=True)
class QCSettings:
    min_cosine: float = 0.5
    length_ratio: tuple[float, float] = (0.6, 1.6)
    max_similarity: float = 0.9  # difflib ratio at or above which a candidate is near-identical
    max_attempts: int = 3
    # longest run of the passage's words a candidate repeats, as a share of them, at or above which it is rejected
    max_verbatim_run: float = DEFAULT_MAX_VERBATIM_RUN

    @classmethod
    def from_config(cls, cfg: dict) -> "QCSettings":
        lo, hi = cfg.get("length_ratio", [0.6, 1.6])
        return cls(float(cfg.get("min_cosine", 0.5)), (float(lo), float(hi)),
                   float(cfg.get("max_similarity", 0.9)), int(cfg.get("max_attempts", 3)),
                   float(cfg.get("max_verbatim_run", DEFAULT_MAX_VERBATIM_RUN)))


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def similarity(a: str, b: str) -> float:
    """Character-level similarity of the normalised texts (difflib ratio, 1 = identical)."""
    return difflib.SequenceMatcher(None, _norm(a), _norm(b), autojunk=False).ratio()


def verbatim_run_share(original: str, candidate: str) -> float:
    """The longest run of consecutive words of ``original`` that ``candidate`` repeats (normalised
    as :func:`similarity` does), over ``original``'s words: 1 where it holds the whole passage."""
    words = _norm(original).split()
    return longest_common_run(words, _norm(candidate).split()) / max(1, len(words))


def check_paraphrase(original: str, candidate: str, accepted: Sequence[str], cosine: float,
                     qc: QCSettings) -> str | None:
    """The first reason to reject ``candidate`` (see :data:`REASONS`), or ``None`` to accept it."""
    if not candidate or not _norm(candidate):
        return "empty"
    if similarity(original, candidate) >= qc.max_similarity:
        return "near_identical"
    # the passage copied whole (or most of it) with a sentence added is under max_similarity and the
    # length ratio, yet as a distractor it is a second verbatim option, and as a knockoff no knockoff
    if verbatim_run_share(original, candidate) >= qc.max_verbatim_run:
        return "verbatim_run"
    if any(similarity(a, candidate) >= qc.max_similarity for a in accepted):
        return "duplicate"
    ratio = len(candidate.split()) / max(1, len(original.split()))
    if not qc.length_ratio[0] <= ratio <= qc.length_ratio[1]:
        return "length"
    if cosine < qc.min_cosine:
        return "unrelated"
    return None


# A preamble before the paraphrase: a first sentence "Here is/Here's/Sure, here are ... <paraphrase, rewritten,
# rephrased, my version ...>:" (no sentence end before its colon), or a "Rewritten text:"-type label. A
# passage's own opening sentence with a colon ("Surely, he thought, there was only one answer: to run
# away", "Here is the garden they liked: ...") is no preamble and is kept whole.
_LEAD_RE = re.compile(
    r"^\s*(?:(?:(?:sure|certainly|of\s+course|okay)\b[\s,.!]*)?here(?:'s|’s|\s+is|\s+are)\s[^\n:.!?]*?"
    r"\b(?:paraphras\w*|rewrit\w*|rephras\w*|reword\w*|(?:new|revised|alternative|another|my)\s+versions?"
    r"|versions?\s+of\s+the\s+(?:text|passage))\b[^\n:.!?]*:"
    r"|(?:rewritten|paraphrased?|new)\s+(?:text|version)\s*:|text\s*:)\s*", re.IGNORECASE)


def clean_candidate(text: str) -> str:
    """Strip what chat models wrap around a paraphrase: "Here is ...:" leads, quotes, blank lines."""
    text = _LEAD_RE.sub("", (text or "").strip())
    text = text.strip().strip('"“”').strip()
    return re.sub(r"\s*\n\s*\n\s*", "\n\n", text)


def _paragraphs(text: str) -> list[str]:
    """The non-blank paragraphs of ``text`` (split at blank lines)."""
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


# A paragraph a small chat model writes about its paraphrase instead of paraphrasing, as
# SmolLM2-135M-Instruct does in the demo: "The rewritten text is:", "The original text is: ...",
# "Explanation: ...", "I'm sorry for the error. Here's the rewritten text ...:", "While rewriting
# the text ...". Counting it as a paragraph kept it in a distractor whenever the passage had as
# many paragraphs (7% of the demo's distractors carried one), and a distractor that talks about
# rewriting tells any reader which option is not the original. A paragraph that opens "The passage of
# time ...", "This version of events ..." or "My version of the story ..." is prose (an earlier pattern
# dropped it): a plain "the/this/my text, passage, sentence, version" is commentary only where what
# follows says so ("is:", "is a paraphrase", "conveys the same meaning").
_ABOUT_REWRITING = (r"(?:is\s*:|(?:is|was|has\s+been|can\s+be)\s+(?:\w+\s+){0,3}?(?:rewritten|paraphrased?|rephrased|"
                    r"reworded|revised|rewrite)\b|(?:conveys|maintains|keeps|retains|preserves|captures)\s+"
                    r"(?:\w+\s+){0,3}?(?:meaning|sense|message|essence|idea|information|tone)\b"
                    r"|uses\s+(?:\w+\s+){0,2}?(?:words|synonyms|language|phrasing|vocabulary)\b)")
_COMMENTARY_RE = re.compile(
    r"\s*(?:(?:the|this|your|my)\s+(?:(?:above|rewritten|revised|paraphrased|rephrased|reworded)\s+)"
    r"(?:text|sentences?|passage|version|paraphrase|rewrite)\b"
    r"|(?:this|your|my)\s+(?:paraphrases?|rewrites?|rewriting|rephrasing)\b|the\s+paraphrases?\b"
    r"|the\s+above\s+(?:is|was)\b"
    rf"|(?:the|this|my)\s+(?:(?:original|following|new)\s+)?(?:text|sentences?|passage|version)\s+{_ABOUT_REWRITING}"
    r"|your\s+(?:text|sentences?|passage|version)\b"
    r"|(?:original\s+text|explanation|note)\s*:"
    r"|i(?:'m|\s+am)\s+sorry\b|i\s+apologi[sz]e\b"
    r"|here(?:'s|\s+is)\s+(?:the|a|my)\s+(?:rewritten|paraphrased|revised|new)\b"
    r"|while\s+rewriting\b)", re.IGNORECASE)
# A sentence about the rewriting inside a paraphrase's paragraph ("This rewriting of the original
# text is a variation ...", "The text conveys both ...", "I have made multiple changes ..."): once a
# local paraphraser may not end early (``min_length``), it writes there the comment it would have
# put after a blank line (on the demo's novels 10 of 108 candidates against 3 of 114 distractors
# without ``min_length``, where it is left alone: cutting there too redraws every demo question).
_COMMENTARY_SENTENCE_RE = re.compile(
    r"\b(?:original|rewritten|rephrased|reworded|revised|paraphrased)\s+(?:text|sentence|passage|version)\b"
    r"|\b(?:this|the|my|in\s+this)\s+(?:rewriting|rewrite|rephrasing|paraphrase|paraphrasing)\b"
    r"|^(?:the|this)\s+(?:text|passage|sentence|version)\s+(?:conveys|highlights|describes|maintains|keeps|uses)\b"
    r"|\bi(?:'ve|\s+have)?\s+(?:made|maintained|kept|changed|rewritten|rephrased)\b"
    r"|\b(?:using\s+)?different\s+words\s+while\s+keeping\b", re.IGNORECASE)
# A label before the paraphrase itself ("Rewrite: Anne's thoughts ..."): dropped, the text kept.
_LABEL_RE = re.compile(r"\s*(?:rewrite|rewritten(?:\s+text)?|paraphrase[ds]?)\s*:\s*", re.IGNORECASE)


def content_paragraphs(text: str) -> list[str]:
    """The paragraphs of a generated paraphrase less commentary about it (:data:`_COMMENTARY_RE`),
    each without a leading "Rewrite:" label."""
    out = []
    for para in _paragraphs(text):
        para = para[_LABEL_RE.match(para).end():] if _LABEL_RE.match(para) else para
        if para.strip() and not _COMMENTARY_RE.match(para):
            out.append(para)
    return out


def trim_commentary(candidate: str, original: str) -> str:
    """Keep as many leading paragraphs as the original has, commentary left out
    (:func:`content_paragraphs`): small chat models follow the paraphrase with a blank line and a
    comment on it ("This version ..."), or open with one, which would fail the length check of an
    otherwise usable paraphrase, or pass it and give the original away."""
    keep = len(_paragraphs(original)) or 1
    return "\n\n".join(content_paragraphs(candidate)[:keep])


def trim_to_length(candidate: str, original: str, *, stop_at: float = 0.9, cut_commentary: bool = False) -> str:
    """Drop a last sentence left unfinished (the generation hit its token limit), with
    ``cut_commentary`` cut the candidate before its first sentence about the rewriting
    (:data:`_COMMENTARY_SENTENCE_RE`, unless the original says the same), then cut an overlong
    candidate after the sentence that brings it to ``stop_at`` of the original's words.

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
        said = _COMMENTARY_SENTENCE_RE.search(sent) if cut_commentary else None
        if said and said.group(0).lower() not in original.lower():
            break
        kept.append((i, sent))
        n += len(sent.split())
    if not kept:
        return "" if cut_commentary and sentences and _COMMENTARY_SENTENCE_RE.search(sentences[0][1]) else candidate
    paragraphs: dict[int, list[str]] = {}
    for i, sent in kept:
        paragraphs.setdefault(i, []).append(sent)
    return "\n\n".join(" ".join(p) for p in paragraphs.values())


# What a local paraphraser samples with where ``probes.decop.paraphrase`` does not say (the keys have no
# schema default, so a config without them keeps its jobs' params): top-k 50, as the sampler always
# had; top-p 1.0, off; an encoder-decoder model's input prefix, the T5 paraphrasers' "paraphrase: ".
DEFAULT_TOP_K = 50
DEFAULT_TOP_P = 1.0
DEFAULT_PREFIX = "paraphrase: "


def local_paraphraser(model, tokenizer, *, name: str, settings: dict, seed: int):
    """The paraphraser a local model makes with ``probes.decop.paraphrase`` (``settings``, schema
    defaults filled): an encoder-decoder model (``model.config.is_encoder_decoder``, e.g. the KTD
    paper's T5) a :class:`Seq2SeqParaphraser`, a causal instruct model a :class:`LocalParaphraser`.

    A key only the other kind reads is a :class:`~memaudit.errors.ConfigError` naming it, not
    ignored: ``prefix`` with a causal model (it is asked through its chat template), ``min_length``
    with an encoder-decoder model (its samples end where it likes).
    """
    from memaudit.errors import ConfigError
    from memaudit.models.loading import is_encoder_decoder

    if is_encoder_decoder(model):
        if float(settings.get("min_length", 0)) > 0:
            raise ConfigError(f"probes.decop.paraphrase.min_length: {settings['min_length']}, but the paraphraser "
                              f"{name!r} is an encoder-decoder model ({model.config.model_type}), which samples "
                              f"through generate() without a length floor; remove the key")
        return Seq2SeqParaphraser.from_settings(model, tokenizer, name=name, settings=settings, seed=seed)
    if settings.get("prefix") is not None:
        raise ConfigError(f"probes.decop.paraphrase.prefix: {settings['prefix']!r}, but the paraphraser {name!r} is "
                          f"a causal model, asked through its chat template; only an encoder-decoder paraphraser "
                          f"(T5) reads the prefix; remove the key")
    return LocalParaphraser.from_settings(model, tokenizer, name=name, settings=settings, seed=seed)


class LocalParaphraser:
    """A local instruct model, one paraphrase per sample (top-k, top-p), batched; see
    :mod:`memaudit.models.sampling`."""

    def __init__(self, model, tokenizer, *, name: str, temperature: float = 0.7, batch_size: int = 8,
                 seed: int = 0, top_k: int = DEFAULT_TOP_K, top_p: float = DEFAULT_TOP_P, stop_at: float = 0.9,
                 min_length: float = 0.0):
        self.model, self.tokenizer = model, tokenizer
        self.name, self.temperature, self.batch_size, self.seed = name, temperature, batch_size, seed
        self.top_k, self.top_p, self.stop_at, self.min_length = top_k, float(top_p), stop_at, float(min_length)
        self._newlines: list[int] | None = None

    @classmethod
    def from_settings(cls, model, tokenizer, *, name: str, settings: dict, seed: int) -> "LocalParaphraser":
        """The paraphraser ``probes.decop.paraphrase`` (``settings``, schema defaults filled) describes."""
        return cls(model, tokenizer, name=name, temperature=float(settings["temperature"]),
                   batch_size=int(settings["batch_size"]), seed=seed, min_length=float(settings["min_length"]),
                   top_k=int(settings.get("top_k", DEFAULT_TOP_K)), top_p=float(settings.get("top_p", DEFAULT_TOP_P)))

    def newline_ids(self) -> list[int]:
        """The vocabulary's tokens that hold a line break (barred, with the end tokens, from a
        one-paragraph passage's paraphrase until it is ``min_length`` long)."""
        if self._newlines is None:
            pieces = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            self._newlines = [i for i, piece in enumerate(pieces) if "\n" in piece]
        return self._newlines

    def describe(self) -> dict:
        """The settings each item records (``meta``); ``top_p`` and ``min_length`` only where they are on."""
        out = {"paraphraser": self.name, "prompt": "single", "temperature": self.temperature, "top_k": self.top_k}
        if self.top_p < 1:
            out["top_p"] = self.top_p
        return {**out, "min_length": self.min_length} if self.min_length > 0 else out

    def candidates(self, texts: Sequence[str], lengths: Sequence[int], attempt: int,
                   wanted: Sequence[int] | None = None) -> list[list[str]]:
        """``wanted[i]`` candidates for text ``i`` (default three), sampled from one shared prompt
        prefill: a retry asks only for the paraphrases quality control has not yet accepted.

        A sample stops at its end token, at its token limit, or once it is as long as the
        passage at a sentence end (what :func:`trim_to_length` would keep anyway), so a model
        that rambles on after its paraphrase costs no more steps.

        ``min_length`` > 0 (``probes.decop.paraphrase.min_length``; default 0): a sample may not
        end (nor, for a one-paragraph passage, break the line) before it has ``min_length`` times
        the passage's tokens. Left to end where it likes, SmolLM2-135M-Instruct condenses: on the
        demo's novels its paraphrases have a median 0.66 of the passage's words, and a reader that
        picks the longest option finds the verbatim one in 0.56-0.88 of the members' questions
        (techdocs 0.60-0.75). At 0.9 the median is 0.96 and that reader's accuracy 0.22 (techdocs
        0.15; chance 0.25). But the demo leaves it off: what SmolLM2 writes to reach the length is
        mostly not a paraphrase, and KTD, whose knockoffs these are, then finds the untouched base
        models' W asymmetric (the knockoff+ null check names 11-12 passages at q = 0.1 where at
        most about 2 may be named).
        """
        import torch

        from memaudit.models.loading import generation_end_ids
        from memaudit.models.sampling import sample
        from memaudit.probes.decop.construct import ENDS_WITH_PUNCT

        tok = self.tokenizer
        wanted = [3] * len(texts) if wanted is None else list(wanted)
        # the end tokens generate() stops at (the generation config's: Gemma's <end_of_turn>, Phi-3's <|end|>)
        # besides the tokenizer's and ChatML's
        eos = {t for t in (tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>"), *generation_end_ids(self.model))
               if isinstance(t, int) and t >= 0}
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        prompts = [tok.apply_chat_template([{"role": "user", "content": PARAPHRASE_PROMPT_SINGLE.format(ref_text=t)}],
                                           tokenize=False, add_generation_prompt=True) for t in texts]
        prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        words = [len(t.split()) for t in texts]
        paragraphs = [len(_paragraphs(t)) or 1 for t in texts]
        floors, barred = None, None
        if self.min_length > 0:
            floors = [int(self.min_length * len(tok(t, add_special_tokens=False)["input_ids"])) for t in texts]
            barred = [self.newline_ids() if n == 1 else [] for n in paragraphs]

        def done(i: int, ids: list[int]) -> bool:
            text = tok.decode(ids, skip_special_tokens=True).strip()
            if len(content_paragraphs(text)) > paragraphs[i]:
                return True  # a paragraph past the passage's, which trim_commentary drops
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
                             temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                             max_rows=self.batch_size,
                             min_new_tokens=None if floors is None else [floors[i] for i in order],
                             barred_ids=None if barred is None else [barred[i] for i in order],
                             seed=self.seed * 7919 + attempt * 104729, done=lambda row, ids: done(order[row], ids))
        finally:
            torch.set_num_threads(threads)
        for i, ids_list in zip(order, samples):
            for ids in ids_list:
                text = trim_commentary(clean_candidate(tok.decode(ids, skip_special_tokens=True)), texts[i])
                # a sample held back from ending writes its comment inline, not after a blank line
                outs[i].append(trim_to_length(text, texts[i], stop_at=self.stop_at, cut_commentary=self.min_length > 0))
        return outs


class Seq2SeqParaphraser:
    """An encoder-decoder paraphrase model, e.g. the KTD paper's T5 (``humarin/chatgpt_paraphraser_on_T5_base``):
    its encoder reads ``prefix`` + passage ("paraphrase: ", as the model card prompts it) and
    ``generate()`` samples each candidate (top-k, top-p, temperature; the paper's Appendix A.4: 50,
    0.95, 1.9), passages in batches of at most ``batch_size`` sampled rows (a passage that wants
    more goes alone).

    Candidates are used as decoded (less wrapping quotes, :func:`clean_candidate`): a paraphrase model
    writes no commentary to trim, and quality control judges each as it is. A sample ends at the end
    token or after 1.6 times its batch's longest passage's tokens plus 8 (1.6: quality control's
    default upper length ratio; a longer paraphrase would be rejected). One beam whatever the
    checkpoint's generation config says; its other settings apply as ``generate()`` reads them.
    """

    def __init__(self, model, tokenizer, *, name: str, temperature: float = 1.0, top_k: int = DEFAULT_TOP_K,
                 top_p: float = DEFAULT_TOP_P, prefix: str = DEFAULT_PREFIX, batch_size: int = 8, seed: int = 0):
        self.model, self.tokenizer = model, tokenizer
        self.name, self.temperature, self.top_k, self.top_p = name, float(temperature), int(top_k), float(top_p)
        self.prefix, self.batch_size, self.seed = prefix, batch_size, seed

    @classmethod
    def from_settings(cls, model, tokenizer, *, name: str, settings: dict, seed: int) -> "Seq2SeqParaphraser":
        """The paraphraser ``probes.decop.paraphrase`` (``settings``, schema defaults filled) describes."""
        return cls(model, tokenizer, name=name, temperature=float(settings["temperature"]),
                   top_k=int(settings.get("top_k", DEFAULT_TOP_K)), top_p=float(settings.get("top_p", DEFAULT_TOP_P)),
                   prefix=str(settings.get("prefix", DEFAULT_PREFIX)), batch_size=int(settings["batch_size"]),
                   seed=seed)

    def describe(self) -> dict:
        return {"paraphraser": self.name, "prompt": "seq2seq", "prefix": self.prefix, "temperature": self.temperature,
                "top_k": self.top_k, "top_p": self.top_p}

    def encode(self, text: str) -> list[int]:
        """The encoder's input for a passage: ``prefix`` + passage with the tokenizer's special tokens
        (T5's closing ``</s>``), as the model was trained."""
        return list(self.tokenizer(self.prefix + text)["input_ids"])

    def candidates(self, texts: Sequence[str], lengths: Sequence[int], attempt: int,
                   wanted: Sequence[int] | None = None) -> list[list[str]]:
        """``wanted[i]`` candidates for text ``i`` (default three): ``num_return_sequences`` of
        ``generate()`` for a batch of passages that want as many, shortest first.

        Seeded like :class:`LocalParaphraser` (by the paraphraser's seed, the round ``attempt`` and the
        batch), the global random state left as it was: the same inputs give the same candidates.
        Temperature 0 or top-k 1 decodes greedily, one candidate repeated (quality control rejects
        the repeats as duplicates).
        """
        import torch

        tok = self.tokenizer
        wanted = [3] * len(texts) if wanted is None else list(wanted)
        encoded = [self.encode(t) for t in texts]
        limits = [int(1.6 * len(tok(t, add_special_tokens=False)["input_ids"])) + 8 for t in texts]
        order = sorted((i for i in range(len(texts)) if wanted[i] > 0), key=lambda i: (wanted[i], len(encoded[i])))
        batches: list[list[int]] = []
        for i in order:
            last = batches[-1] if batches else None
            if last and wanted[last[0]] == wanted[i] and (len(last) + 1) * wanted[i] <= self.batch_size:
                last.append(i)
            else:
                batches.append([i])
        greedy = self.temperature <= 0 or self.top_k == 1
        sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": self.temperature,
                                                         "top_k": self.top_k, "top_p": self.top_p}
        eos = tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
        device = next(self.model.parameters()).device
        # the random state generate() draws from is seeded here and restored after each batch
        rng_devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
        outs: list[list[str]] = [[] for _ in texts]
        # as LocalParaphraser: token-by-token decoding on one thread
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for b, batch in enumerate(batches):
                width = max(len(encoded[i]) for i in batch)
                ids = torch.tensor([encoded[i] + [pad] * (width - len(encoded[i])) for i in batch], device=device)
                mask = torch.tensor([[1] * len(encoded[i]) + [0] * (width - len(encoded[i])) for i in batch],
                                    device=device)
                n = 1 if greedy else wanted[batch[0]]
                with torch.random.fork_rng(devices=rng_devices), torch.inference_mode():
                    torch.manual_seed(self.seed * 7919 + attempt * 104729 + b)
                    seqs = self.model.generate(input_ids=ids, attention_mask=mask, num_beams=1,
                                               num_return_sequences=n, max_new_tokens=max(limits[i] for i in batch),
                                               pad_token_id=pad, **sampling)
                rows = seqs[:, 1:].tolist()  # after the decoder's start token
                for k, i in enumerate(batch):
                    for row in rows[k * n:(k + 1) * n]:
                        new = row[:row.index(eos)] if eos in row else row
                        text = clean_candidate(tok.decode(new, skip_special_tokens=True))
                        outs[i].extend([text] * (wanted[i] if greedy else 1))
        finally:
            torch.set_num_threads(threads)
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
        """Three candidates per reply (the paper's prompt asks for B, C and D at once), as many
        replies per text as ``wanted`` needs (a pool beyond three for KTD); the first reply of a
        round is sample ``attempt``, as DE-COP has always asked it, the k-th one sample
        ``attempt + 1000 * k`` (a request the cache has not seen)."""
        replies = [max(1, math.ceil(w / 3)) for w in wanted] if wanted is not None else [1] * len(texts)
        outs: list[list[str]] = [[] for _ in texts]
        for k in range(max(replies, default=0)):
            todo = [i for i, r in enumerate(replies) if r > k]
            params = GenerationParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                      sample_index=attempt + 1000 * k)
            gens = self.backend.generate([paraphrase_prompt(texts[i], lengths[i]) for i in todo], params)
            for i, g in zip(todo, gens):
                outs[i].extend(clean_candidate(p) for p in parse_paraphrases(g.text or ""))
        return outs


@dataclass
class ParaphraseResult:
    paraphrases: list[str] | None  # the n accepted, or None when the passage is dropped
    attempts: int
    rejected: dict = field(default_factory=lambda: {r: 0 for r in REASONS})
    n_candidates: int = 0


def paraphrase_with_qc(texts: Sequence[str], lengths: Sequence[int], paraphraser, encoder,
                       qc: QCSettings, *, n: int = 3, accepted: Sequence[Sequence[str]] | None = None,
                       first_attempt: int = 0, progress: Callable[[str], None] = log.info) -> list[ParaphraseResult]:
    """Ask for ``n`` paraphrases per text (DE-COP's three); reject by :func:`check_paraphrase`;
    re-ask the missing ones, at most ``qc.max_attempts`` rounds.

    ``accepted``: paraphrases each text already has (KTD's pool tops DE-COP's three up to m): they
    count towards ``n`` and a new candidate must not duplicate them. ``first_attempt`` numbers the
    rounds (a paraphraser's sampling seed and an API request's sample index follow it), so a top-up
    does not replay the rounds that made the accepted ones. A text left short has ``paraphrases``
    None.
    """
    results = [ParaphraseResult(list(accepted[i]) if accepted else [], 0) for i in range(len(texts))]
    for attempt in range(first_attempt, first_attempt + qc.max_attempts):
        todo = [i for i, r in enumerate(results) if len(r.paraphrases) < n]
        if not todo:
            break
        progress(f"paraphrase round {attempt - first_attempt + 1}: {len(todo)} passage(s)")
        cands = paraphraser.candidates([texts[i] for i in todo], [lengths[i] for i in todo], attempt,
                                       [n - len(results[i].paraphrases) for i in todo])
        flat = [(i, c) for i, cs in zip(todo, cands) for c in cs]
        cos = encoder.cosine([texts[i] for i, _ in flat], [c or " " for _, c in flat]) if flat else []
        for (i, cand), c in zip(flat, cos):
            r = results[i]
            r.attempts = attempt + 1 - first_attempt
            if len(r.paraphrases) >= n:
                continue
            r.n_candidates += 1
            reason = check_paraphrase(texts[i], cand, r.paraphrases, float(c), qc)
            if reason is None:
                r.paraphrases.append(cand)
            else:
                r.rejected[reason] += 1
    for r in results:
        if len(r.paraphrases) < n:
            r.paraphrases = None
    return results


def quality_table(passages: Sequence[tuple[str, int, str]], results: Sequence[ParaphraseResult], *, paraphraser: str,
                  per_passage: int, documents: Sequence[tuple[str, int, str]] = ()):
    """Quality control per document (``decop_qc.csv``): passages, passages kept, candidates, each
    rejection reason as a count and a rate, and ``accept_rate`` (the ``per_passage`` new paraphrases
    of each kept passage per candidate). ``passages[i]`` is ``(doc_id, label, role)`` of the text
    ``results[i]`` paraphrased; ``documents``, every document probed as ``(doc_id, label, role)``, gives
    one that yielded no passage its row too (``n_passages`` 0), so none is left out unseen."""
    import pandas as pd

    rows: dict[str, dict] = {}
    for (doc_id, label, role), res in [*((d, None) for d in documents), *zip(passages, results)]:
        row = rows.setdefault(doc_id, {"doc_id": doc_id, "label": int(label), "role": role, "n_passages": 0,
                                       "n_kept": 0, "n_candidates": 0, **{f"n_{r}": 0 for r in REASONS}})
        if res is None:
            continue
        row["n_passages"] += 1
        row["n_candidates"] += res.n_candidates
        for r in REASONS:
            row[f"n_{r}"] += res.rejected[r]
        row["n_kept"] += res.paraphrases is not None
    table = pd.DataFrame(list(rows.values()))
    # a document with no passage had no candidate: its rates are not measured (empty), not 0
    candidates = table["n_candidates"].where(table["n_candidates"] > 0)
    table["accept_rate"] = per_passage * table["n_kept"] / candidates
    for r in REASONS:
        table[f"{r}_rate"] = table[f"n_{r}"] / candidates
    table["paraphraser"] = paraphraser
    return table
