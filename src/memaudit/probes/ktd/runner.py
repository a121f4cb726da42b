"""KTD's probe job: importance scores of every text and of its knockoffs, W, knockoff+ selection.

Knockoffs come from the benchmark's paraphrase pool: the quality-controlled paraphrases DE-COP's
items hold (``decop_items.jsonl``: the verbatim passage, then its paraphrases), made once per
passage by the paraphraser role (``probes.decop.paraphrase.model``) and shared by DE-COP and
KTD. Definition 1 wants knockoffs independent of the model under test given the texts, so KTD
refuses to run on the paraphraser, or on a model built on the same weights (a fine-tune of it, its
base, a sibling fine-tune: :func:`memaudit.probes.ktd.plan.check_config`).

Importance scores Z (higher = more likely seen), each computed once for every text and knockoff:

``gradnorm``
    ``-||d mean_t log p(x_t | x_<t) / d theta||_2`` over the parameters ``probes.ktd.params``
    selects (KTD Eq. 6, with the mean over tokens for its sum: docs/probes/ktd.md), per-sample
    through :meth:`memaudit.backends.hf.HFBackend.gradient_norms`;
``loss``
    the mean token log-likelihood (memaudit's; the paper describes only the gradient norm as Z);
``min_k``
    the mean of the 20% lowest token log-probabilities (Min-K%; memaudit's too).

Length-matched knockoffs (``probes.ktd.length_match``, on by default; beyond the paper): a
passage and every knockoff in its pool are cut to the word count of the group's shortest text
before Z, so a passage is never compared with knockoffs of another length. Every score here
depends on length (the gradient of a mean over more tokens is smaller; later tokens have more
context), and a paraphraser that shortens its passages makes the original look "seen" to any
model: on the demo, SmolLM2's paraphrases are 0.71x their passages' length and the untouched
base tiny-gpt2-small named 37 of 40 passages at q = 0.1. The cut is a function of the group
alone (its shortest member), so it treats the passage and its knockoffs alike and keeps them
exchangeable where they were. The score-only baselines and ``ktd_z_gradnorm`` (no knockoffs)
read the whole passages.
"""

from __future__ import annotations

import logging
import re
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from memaudit.backends import open_backend
from memaudit.backends.base import TOKEN_LOGPROBS
from memaudit.errors import ConfigError, InputError
from memaudit.io import read_jsonl, write_csv
from memaudit.models import grad_norms  # noqa: F401 -- computes Z (HFBackend.gradient_norms): in KTD's fingerprint
from memaudit.models.token_stats import TokenStats
from memaudit.probes.job import ProbeJob, document_scores
from memaudit.probes.ktd import statistics
from memaudit.probes.ktd.plan import STATISTICS, Z_GRADNORM, w_method
from memaudit.probes.token_prob.methods import (Lowercase, Reference, ScoringContext, Zlib, k_lowest_mean,
                                                zlib_lengths)

log = logging.getLogger(__name__)

_WORD = re.compile(r"\S+")
MIN_K_RATIO = 0.2


def pool_of(item: dict) -> list[str]:
    """An item's knockoff pool: every paraphrase it holds (DE-COP's options after the verbatim one)."""
    if item.get("answer", 0) != 0:
        raise InputError(f"item {item.get('item_id')!r}: the verbatim passage must be option 0 of a pool item")
    return list(item["options"][1:])


def importance_scores(backend, texts: Sequence[str], *, params, progress: Callable[[str], None] = log.info
                      ) -> tuple[dict[str, np.ndarray], TokenStats]:
    """Z of each text for every statistic of :data:`STATISTICS` (higher = more likely seen), and the token
    statistics its loss and Min-K% are read from (the baselines' too: :func:`baseline_scores`)."""
    progress(f"token statistics of {len(texts)} texts")
    stats = backend.token_stats(texts, with_distribution=False)
    cut = int((np.asarray(stats.chars) < np.array([len(t) for t in texts])).sum()) if stats.chars is not None else 0
    if cut:  # each text cut after its own tokens: a passage and its knockoffs then cover different spans
        progress(f"{cut} of {len(texts)} texts longer than the model's max_tokens: each is scored (Z, and the "
                 f"gradient norm) on its first max_tokens tokens only, so a passage and its knockoffs compare "
                 f"different spans (shorter passages, probes.decop.lengths, or the model's max_tokens avoid it)")
    z = {"loss": -stats.mean_nll(),
         "min_k": np.array([k_lowest_mean(stats.passage(i)[0], MIN_K_RATIO) for i in range(len(texts))])}
    progress(f"per-sample gradient norms of {len(texts)} texts (parameters: {params})")
    z["gradnorm"] = -np.asarray(backend.gradient_norms(texts, params=params), dtype=float)
    return z, stats


def match_lengths(group: Sequence[str]) -> tuple[list[str], int]:
    """Every text of ``group`` (a passage and its knockoffs) cut to the shortest one's word count
    (whitespace-separated words; the text up to the end of that many words, as written), and
    that count."""
    ends = [[m.end() for m in _WORD.finditer(t)] for t in group]
    n = min(len(e) for e in ends)
    return [t[:e[n - 1]] if n else "" for t, e in zip(group, ends)], n


def passage_starts(items: Sequence[dict]) -> np.ndarray:
    """Where each item's passage sits among the texts laid out as ``[passage, its pool..., ...]``."""
    return np.cumsum([0] + [1 + len(pool_of(it)) for it in items])[:-1]


def baseline_scores(items: Sequence[dict], z: dict[str, np.ndarray], starts: np.ndarray, *,
                    stats: TokenStats | None = None, lowercase: TokenStats | None = None,
                    references: Mapping[str, TokenStats] | None = None,
                    progress: Callable[[str], None] = log.info) -> dict[str, pd.Series]:
    """The score-only baselines of the KTD paper's Table 2 on the original passages (higher = seen),
    each as token_prob computes it (:mod:`memaudit.probes.token_prob.methods`): LOSS and Min-K%
    from the same forward pass as Z; from ``stats``, that pass's token statistics of the passages:
    zlib, the loss over the zlib-compressed length of the part scored; given the statistics of the
    lowercased passages, ``lowercase`` = L(lower(x)) / L(x); given a reference model's,
    ``ref_<name>`` = L_ref(x) - L(x). The last two compare two passes, each cut at its own
    ``max_tokens``, on the characters both scored (:func:`memaudit.probes.token_prob.methods.shared_span`);
    a passage they cannot compare so is left out of that baseline, counted in one line to ``progress``
    (a baseline left with no passage is left out whole). Without ``stats``, zlib compresses the whole
    passages, and there is no lowercase or reference baseline."""
    ids = np.array([it["item_id"] for it in items], dtype=object)
    texts = [it["options"][0] for it in items]
    nll = -z["loss"][starts]
    out = {"loss": pd.Series(-nll, index=ids), "min_k": pd.Series(z["min_k"][starts], index=ids)}
    if stats is None:
        if lowercase is not None or references:
            raise ValueError("the lowercase and reference baselines need the passages' token statistics (stats)")
        out["zlib"] = pd.Series(-nll / zlib_lengths(texts), index=ids)
        return out
    ctx = ScoringContext(texts, stats, lowercase=lowercase, references=dict(references or {}))
    methods = [Zlib(), *([Lowercase()] if lowercase is not None else []), *map(Reference, ctx.references)]
    for m in methods:
        scores, span = m.score(ctx), m.span(ctx)
        keep = np.ones(len(ids), bool) if span is None else ~span.left_out
        if span is not None and (note := span.note(m.name)) is not None:
            progress(note)
        if keep.any():  # none: no validation set to draw
            out[m.name] = pd.Series(scores[keep], index=ids[keep])
    return out


def ktd_tables(items: Sequence[dict], z: dict[str, np.ndarray], *, ms: Sequence[int], m: int, n_draws: int,
               qs: Sequence[float], seed: int, n_validation: int = 100,
               member_ratios: Sequence[float] = (), baselines: dict[str, pd.Series] | None = None,
               passage_z: dict[str, np.ndarray] | None = None, words: Sequence[int] | None = None
               ) -> dict[str, pd.DataFrame]:
    """Every table of one (benchmark, model) from the scores of the texts laid out as
    ``[item 0's passage, its pool..., item 1's passage, ...]``: knockoff+ over passages (the
    paper's texts), document scores as the mean W of a document's passages.

    ``ms``: the knockoff counts to evaluate (each ``<=`` the smallest pool), ``m`` the one whose
    first draw is the document score; ``n_draws`` knockoff draws per m (seeded by seed, m, draw).
    The selection table also holds the Table 2 baselines at the same q (statistic
    ``validation_<score>``, m 0; :func:`memaudit.probes.ktd.statistics.validation_runs`), with a
    validation set of ``n_validation`` texts (at most half of them) drawn ``n_draws`` times, and
    knockoff+ over the same draws' test texts (``measured_on`` "test"; the rows over every text:
    "all"), so that KTD and the baselines are compared on the same texts.
    ``baselines``: their scores (:func:`baseline_scores`; default LOSS, Min-K% and zlib from ``z``).
    ``passage_z``: Z of the whole passages where ``z`` holds length-matched ones (:func:`match_lengths`),
    for the detector without knockoffs (``ktd_z_gradnorm``) and the default baselines; ``words``:
    the word count each passage's group was cut to (a ``words`` column of the W table).
    ``member_ratios``: the imbalanced test sets of the paper's Appendix B (members per non-member;
    :func:`memaudit.probes.ktd.statistics.imbalanced_runs`), at ``m``, in the ``imbalance`` table.
    """
    if m not in ms:
        raise ConfigError(f"probes.ktd.m: {m} must be one of probes.ktd.ms {list(ms)}")
    pools = [pool_of(it) for it in items]
    starts = passage_starts(items)
    ids = [it["item_id"] for it in items]
    whole = {name: (passage_z or {}).get(name, z[name][starts]) for name in STATISTICS}
    doc_of = pd.Series({it["item_id"]: it["doc_id"] for it in items})
    labels = pd.Series({it["item_id"]: int(it["label"]) for it in items})
    draws: dict[tuple[str, int], list[pd.Series]] = {}
    for name in STATISTICS:
        original_z = z[name][starts]
        pool_z = [z[name][s + 1:s + 1 + len(p)] for s, p in zip(starts, pools)]
        for k in ms:
            draws[(name, k)] = [statistics.passage_w(original_z, pool_z, ids, k, np.random.default_rng([seed, k, d]))
                                for d in range(n_draws)]
    # draws that picked the same knockoffs for every passage (m = every pool's size) give the same W
    distinct = {key: len({w.to_numpy().tobytes() for w in ws}) for key, ws in draws.items()}
    baselines = baselines or baseline_scores(items, whole, np.arange(len(items)))
    runs = pd.concat([statistics.selection_runs(draws, labels, qs),
                      statistics.knockoff_runs_on_test_parts(draws, labels, qs, n_validation=n_validation, seed=seed,
                                                             documents=doc_of),
                      statistics.validation_runs(baselines, labels, qs, n_validation=n_validation,
                                                 n_draws=n_draws, seed=seed, documents=doc_of)],
                     ignore_index=True)
    cut = pd.Series(np.asarray(words, dtype=float) if words is not None else np.nan, index=ids)
    w_rows = [pd.DataFrame({"item_id": w.index, "doc_id": doc_of.loc[w.index].to_numpy(),
                            "label": labels.loc[w.index].to_numpy(), "statistic": name, "m": k, "draw": d,
                            "w": w.to_numpy(), "words": cut.loc[w.index].to_numpy()})
              for (name, k), ws in sorted(draws.items()) for d, w in enumerate(ws)]

    def per_document(values: pd.Series, method: str) -> pd.DataFrame:
        means = values.groupby(doc_of.loc[values.index].to_numpy()).mean().sort_index()
        return pd.DataFrame({"doc_id": means.index, "method": method, "score": means.to_numpy()})

    scores = [per_document(draws[(name, m)][0], w_method(name)) for name in STATISTICS]
    # the gradient norm alone is a detector too (loss and Min-K% are token_prob's methods)
    scores.append(per_document(pd.Series(whole["gradnorm"], index=ids), Z_GRADNORM))
    documents = pd.concat(scores, ignore_index=True)
    doc_labels = pd.Series({it["doc_id"]: int(it["label"]) for it in items})
    documents.insert(1, "label", doc_labels.loc[documents["doc_id"]].to_numpy())
    imbalance = statistics.imbalanced_runs(draws, labels, qs, ratios=member_ratios, m=m, seed=seed)
    return {"documents": documents, "selection": statistics.summarise_selection(runs, distinct),
            "symmetry": statistics.symmetry_table(draws, labels), "w": pd.concat(w_rows, ignore_index=True),
            "imbalance": statistics.summarise_imbalance(imbalance)}


def run_job(job: ProbeJob) -> None:
    cfg = job.settings
    items = read_jsonl(job.inputs["records"])
    if not items:
        raise InputError(f"{job.inputs['records']}: no items (every passage failed quality control?)")
    short = [it["item_id"] for it in items if len(pool_of(it)) < max(cfg["ms"])]
    if short:
        raise InputError(f"{job.inputs['records']}: {len(short)} item(s) hold fewer than "
                         f"{max(cfg['ms'])} knockoffs (probes.ktd.ms), e.g. {short[0]!r}")
    groups = [[it["options"][0], *pool_of(it)] for it in items]
    job.progress(f"{len(items)} passages of {len({it['doc_id'] for it in items})} documents, "
                 f"{sum(map(len, groups)) - len(items)} knockoffs")
    originals = [it["options"][0] for it in items]
    words = None
    if cfg["length_match"]:
        groups, words = map(list, zip(*(match_lengths(g) for g in groups)))
        full = [len(_WORD.findall(t)) for t in originals]
        job.progress(f"length-matched: each passage and its knockoffs cut to the shortest's word count "
                     f"(median {np.median(words):.0f} words; passages kept {np.sum(words) / np.sum(full):.0%} "
                     f"of their words)")
    texts = [t for g in groups for t in g]
    with job.opened_backend() as backend:
        z, stats = importance_scores(backend, texts, params=cfg["params"], progress=job.progress)
        if cfg["length_match"]:  # the detectors without knockoffs read the whole passages
            job.progress("Z of the whole passages (the baselines and ktd_z_gradnorm)")
            passage_z, passage_stats = importance_scores(backend, originals, params=cfg["params"],
                                                         progress=job.progress)
        else:
            passage_z, passage_stats = None, stats.take(passage_starts(items))
        job.progress(f"token statistics of the {len(originals)} lowercased passages (the lowercase baseline)")
        lowercase = backend.token_stats([t.lower() for t in originals], with_distribution=False)
        dtype = getattr(backend, "dtype", None)
    references = {}
    for name, path in zip(job.params.get("reference_models") or [], job.inputs.get("references") or []):
        job.progress(f"token statistics of the {len(originals)} passages under reference model {name}")
        ref = open_backend(job.config, name, model_dir=path, rule=job.rule,  # a local model (check_config)
                           role="probes.ktd.reference_models", needs={TOKEN_LOGPROBS})
        references[name] = ref.token_stats(originals, with_distribution=False)
        del ref
    whole, at = (passage_z, np.arange(len(items))) if passage_z is not None else (z, passage_starts(items))
    baselines = baseline_scores(items, whole, at, stats=passage_stats, lowercase=lowercase, references=references,
                                progress=lambda line: job.progress(f"{job.benchmark}, {job.model}: {line}"))
    tables = ktd_tables(items, z, ms=cfg["ms"], m=int(cfg["m"]), n_draws=int(cfg["n_draws"]), qs=cfg["qs"],
                        seed=int(job.config["seed"]), n_validation=int(cfg["validation_texts"]),
                        member_ratios=cfg["member_ratios"], baselines=baselines, passage_z=passage_z,
                        words=words)
    write_csv(job.outputs["documents"], document_scores(tables["documents"], model=job.model, dtype=dtype))
    ids = {"benchmark": job.benchmark, "model": job.model}
    for name in ("selection", "symmetry", "w", "imbalance"):
        frame = tables[name]
        write_csv(job.outputs[name], frame.assign(**ids)[[*ids, *frame.columns]])
    at = tables["selection"]
    at = at[at["measured_on"] == statistics.ALL_TEXTS]
    main = at[(at["statistic"] == "gradnorm") & (at["m"] == int(cfg["m"]))]
    for r in main[main["q"].isin([0.1, 0.2])].itertuples():
        job.progress(f"KTD gradnorm m={r.m} q={r.q:g}: FDR {r.fdr:.3f}, power {r.power:.3f}")
