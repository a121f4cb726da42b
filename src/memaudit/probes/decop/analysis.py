"""Calibration (Algorithm 1), per-document accuracy and the suspect list.

Answers are one row per (passage, ordering) with ``doc_id``, ``label``, ``role``
("evaluate" or "calibrate"), ``correct`` (position 0-3 of the verbatim option),
``pred`` (chosen position, -1 = no valid answer) and, in logit mode, ``p_A`` ... ``p_D``:
the four option-letter probabilities renormalised to sum to 1 (likelihood mode: ``ll_A`` ...
``ll_D``, the options' mean token log-likelihoods).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from memaudit.stats import selection

PROB_COLUMNS = ("p_A", "p_B", "p_C", "p_D")
LL_COLUMNS = ("ll_A", "ll_B", "ll_C", "ll_D")


def label_adjustments(answers: pd.DataFrame) -> np.ndarray:
    """Algorithm 1 (Appendix E): Δ_ℓ = 0.25 − P̄_ℓ for ℓ in A-D.

    ``p̄_{j,ℓ}`` is the mean probability of label ℓ over every question (passage ×
    ordering) of clean document j; ``P̄_ℓ`` is the mean of ``p̄_{j,ℓ}`` over the clean
    documents (each document weighs the same, as in the algorithm).
    Fix to the paper: Δ is only meaningful when the four probabilities sum to one
    (its 0.25 is a uniform distribution over four labels), so they are the letter
    probabilities renormalised over A-D, not raw vocabulary probabilities.
    """
    if answers.empty:
        raise ValueError("calibration needs at least one clean calibration document")
    per_doc = answers.groupby("doc_id")[list(PROB_COLUMNS)].mean()
    return 0.25 - per_doc.mean(axis=0).to_numpy()


def predict(probs: np.ndarray, delta: np.ndarray | None = None) -> np.ndarray:
    """argmax over the four labels, after adding Δ (Section 4.1: re-calibrate, then pick); -1 (no
    answer, scored wrong) for a question without probabilities (an API that listed no letter),
    which ``argmax`` over NaN would read as A."""
    p = np.asarray(probs, dtype=float)
    if delta is not None:
        p = p + np.asarray(delta, dtype=float)[None, :]
    return np.where(np.isnan(p).any(axis=1), -1, p.argmax(axis=1))


def verbatim_probability(answers: pd.DataFrame, mode: str) -> pd.Series | None:
    """Per question, the probability of the verbatim option; ``None`` for black-box answers.

    Logit mode: its letter probability (renormalised over A-D). Likelihood mode: the softmax
    of the four options' mean token log-likelihoods, i.e. each option's geometric-mean token
    probability, normalised over the four.
    """
    columns = {"logit": PROB_COLUMNS, "likelihood": LL_COLUMNS}.get(mode)
    if columns is None or answers.empty:
        return None
    values = answers[list(columns)].to_numpy(dtype=float)
    if mode == "likelihood":
        from scipy.special import softmax

        values = softmax(values, axis=1)
    p = pd.Series(values[np.arange(len(values)), answers["correct"].to_numpy(dtype=int)], index=answers.index)
    # A reply that listed no option letter (invalid, or a refusal) has no probability: it counts 0, as it counts
    # wrong in the accuracy; the mean skipped it, so a document the model often would not answer scored on its few
    # answered questions, ranked opposite to its accuracy. A request with no reply (error) is left out of both.
    errored = answers["status"].eq("error") if "status" in answers else pd.Series(False, index=answers.index)
    return p.where(p.notna() | errored, 0.0)


def document_accuracy(answers: pd.DataFrame, pred_column: str = "pred") -> pd.DataFrame:
    """Per document: questions asked, failed, answered, correct, accuracy over the questions that got a reply.

    An invalid answer or refusal (``pred == -1``) counts as wrong in ``accuracy``, so a model
    that refuses more on some documents never looks more accurate on them;
    ``accuracy_valid`` is over valid answers only. A request that got no reply at all (status
    ``error``, under an API model's ``on_error: record``) says nothing about the model: it is
    counted in ``n_error`` and left out of both (``accuracy`` is NaN where every request failed).
    """
    errored = answers["status"].eq("error") if "status" in answers else pd.Series(False, index=answers.index)
    a = answers.assign(_hit=(answers[pred_column] == answers["correct"]).astype(int),
                       _valid=(answers[pred_column] >= 0).astype(int), _error=errored.astype(int))
    g = a.groupby("doc_id", sort=True)
    out = pd.DataFrame({
        "label": g["label"].first(),
        "role": g["role"].first(),
        "n_passages": g["passage_id"].nunique(),
        "n_questions": g.size(),
        "n_error": g["_error"].sum(),
        "n_valid": g["_valid"].sum(),
        "n_correct": g["_hit"].sum(),
    })
    out["accuracy"] = out["n_correct"] / (out["n_questions"] - out["n_error"]).where(lambda n: n > 0)
    out["accuracy_valid"] = np.where(out["n_valid"] > 0, out["n_correct"] / out["n_valid"].clip(lower=1), np.nan)
    return out.reset_index()


def suspect_list(table: pd.DataFrame, fdr: float, clean_accuracy=None) -> pd.DataFrame:
    """A conformal p-value of each document's accuracy against the held-out clean documents', then BH.

    H0 for document d: its accuracy is exchangeable with the clean documents' (it is one more clean
    document). ``p = (1 + #{clean accuracy >= d's}) / (n_clean + 1)``
    (:func:`memaudit.stats.selection.conformal_pvalues`), and ``suspect`` = rejected by
    Benjamini-Hochberg at ``fdr``: among the documents named, the expected share of clean ones is
    at most ``fdr`` (conformal p-values are PRDS, so BH holds; Bates et al., 2023). Beyond the
    paper, which thresholds accuracy in-sample. The smallest p-value is ``1 / (n_clean + 1)``: with
    the demo's 4 clean documents none is below 0.2, so nothing is named at 0.1, as it should be.

    Fix to this module's earlier test (Fisher's exact test of a document's correct answers against
    the clean documents', every (passage, ordering) question a trial): the orderings of one passage
    are one passage asked 4 or 24 times, and a document's passages share its book, so the trials
    are far from independent and the p-values far too small. Simulated clean documents (34
    passages, each with its own chance of being answered right, 24 orderings) gave p < 0.05 for
    30% of them and put 47 of 200 on the list at fdr 0.1. A document is the unit here, as in the
    paper's t-test and AUC. Without clean documents (``clean_accuracy`` empty) there is no test:
    chance (0.25) is no null rate, since a paraphraser's length cue and a model's letter bias move
    clean documents' accuracy far from it (41% on the published arXivTection for a reader that sees
    only lengths); ``test`` is ``none`` and the p-value, q-value and ``suspect`` columns are empty.
    """
    out = table.copy()
    clean = np.asarray([] if clean_accuracy is None else clean_accuracy, dtype=float)
    out["n_clean"] = clean.size
    if clean.size == 0:
        out["clean_rate"], out["test"] = np.nan, "none"
        out[["p_value", "q_value", "suspect"]] = np.nan
        return out
    out["clean_rate"], out["test"] = float(clean.mean()), "conformal"
    out["p_value"] = selection.conformal_pvalues(out["accuracy"].to_numpy(dtype=float), clean)
    out["q_value"] = selection.bh_adjusted_pvalues(out["p_value"].to_numpy())
    out["suspect"] = selection.rejected_at(out["q_value"].to_numpy(), fdr)
    return out


def suspect_list_note(n_clean: int, fdr: float) -> str | None:
    """Why :func:`suspect_list` can name no document, for the job's log; ``None`` where it can.

    Without clean documents there is no test; with ``n_clean`` of them every p-value is at least
    ``1 / (n_clean + 1)`` (:func:`memaudit.stats.selection.min_resolvable_q`), and BH rejects none
    above ``fdr``: a column of False that says nothing about the documents."""
    if n_clean == 0:
        return ("no clean reference document (probes.decop.calibration_documents is 0, or quality control "
                "rejected them all): no suspect list (test none)")
    min_q = selection.min_resolvable_q(n_clean)
    if fdr >= min_q:
        return None
    needed = max(1, math.ceil(1 / fdr - 1))
    return (f"{n_clean} clean reference document(s): the smallest conformal p-value, 1/({n_clean} + 1) = "
            f"{min_q:.3g}, is above fdr {fdr:g}, so the suspect list names no document whatever its accuracy "
            f"(at least {needed} are needed: raise probes.decop.calibration_documents)")


def leave_one_out_predictions(calibration: pd.DataFrame) -> np.ndarray:
    """Calibrated predictions of the calibration documents' own questions, each document's with the
    Δ of the others (Algorithm 1 without it), so that their calibrated accuracies are out of sample
    like every evaluated document's (the suspect list's reference); one calibration document: its
    own Δ (the only one there is; its p-value is 1/2 at least anyway)."""
    probs = calibration[list(PROB_COLUMNS)].to_numpy(dtype=float)
    docs = calibration["doc_id"].to_numpy()
    if len(np.unique(docs)) < 2:
        return predict(probs, label_adjustments(calibration))
    pred = np.empty(len(calibration), dtype=int)
    for doc in np.unique(docs):
        mine = docs == doc
        pred[mine] = predict(probs[mine], label_adjustments(calibration[~mine]))
    return pred


def accuracy_by_position(answers: pd.DataFrame, pred_column: str = "pred") -> pd.DataFrame:
    """Accuracy by the position (A-D) of the verbatim option, per group (selection bias, Appendix D); failed
    requests (status ``error``) left out, as in :func:`document_accuracy`."""
    if "status" in answers:
        answers = answers[answers["status"] != "error"]
    a = answers.assign(hit=(answers[pred_column] == answers["correct"]).astype(float),
                       position=answers["correct"].map(dict(enumerate("ABCD"))))
    return a.groupby(["label", "position"], as_index=False)["hit"].mean().rename(columns={"hit": "accuracy"})


def auc_summary(tables: dict[str, pd.DataFrame], n_params: dict[str, int]) -> pd.DataFrame:
    """AUC (member vs non-member, evaluated documents) per (model, method, length) from the
    per-document tables (their ``score``: accuracy, or the verbatim option's mean probability
    for ``-prob`` methods); ``n_params`` from the model manifests (API models: missing)."""
    from memaudit.stats.metrics import roc_auc

    rows = []
    for model, table in tables.items():
        score = "score" if "score" in table else "accuracy"
        ev = table[table["role"] == "evaluate"]
        for (method, length), g in ev.groupby(["method", "length"], sort=True):
            rows.append({"model": model, "method": method, "length": int(length),
                         "n_params": n_params.get(model), "n_documents": len(g),
                         "auc": roc_auc(g[score].to_numpy(), g["label"].to_numpy()),
                         "accuracy_members": g.loc[g["label"] == 1, "accuracy"].mean(),
                         "accuracy_nonmembers": g.loc[g["label"] == 0, "accuracy"].mean(),
                         "score_members": g.loc[g["label"] == 1, score].mean(),
                         "score_nonmembers": g.loc[g["label"] == 0, score].mean(),
                         **_suspects(g)})
    return pd.DataFrame(rows)


BLIND_MODEL = "(none)"  # as token_prob's blind baseline rows in metrics.csv
LONGEST = "decop-longest-option"


def longest_option_rows(items) -> pd.DataFrame:
    """The length cue of a DE-COP item set: rows of :func:`auc_summary`'s table for a model that
    sees nothing and picks the longest option (most words; a tie shared among the tied).

    Every DE-COP accuracy should be read against it. Four options make chance 25%. But where the
    paraphraser shortens passages, "the longest one is the verbatim one" scores far more, on
    members and non-members alike. It is 41% on the published arXivTection (Claude's
    paraphrases): 44% on members' passages and 39% on non-members', a blind AUC of 0.60. It is 73%
    on the demo's novels (SmolLM2's paraphrases). Per document: the share of its evaluated
    passages whose verbatim option is the longest; AUC of that share against membership.
    """
    from memaudit.stats.metrics import roc_auc

    per_passage = []
    for it, words in _evaluated_word_counts(items):
        longest = np.flatnonzero(words == words.max())
        per_passage.append({"doc_id": it["doc_id"], "label": int(it["label"]),
                            "length": int((it.get("meta") or {}).get("length_tokens", 0)),
                            "hit": float(int(it["answer"]) in longest) / len(longest)})
    if not per_passage:
        return pd.DataFrame()
    docs = pd.DataFrame(per_passage).groupby(["length", "doc_id", "label"], as_index=False)["hit"].mean()
    rows = []
    for length, g in docs.groupby("length", sort=True):
        by_label = {k: g.loc[g["label"] == k, "hit"].mean() for k in (0, 1)}
        rows.append({"model": BLIND_MODEL, "method": LONGEST, "length": int(length), "n_params": None,
                     "n_documents": len(g), "auc": roc_auc(g["hit"].to_numpy(), g["label"].to_numpy()),
                     "accuracy_members": by_label[1], "accuracy_nonmembers": by_label[0],
                     "score_members": by_label[1], "score_nonmembers": by_label[0],
                     "n_suspect": np.nan, "n_suspect_members": np.nan})
    return pd.DataFrame(rows)


def longest_option_rate(items) -> tuple[int, int, float]:
    """(passages whose verbatim option is the strictly longest, evaluated passages, binomial
    p-value of that count against 1/4): the log line of the length cue."""
    from scipy.stats import binomtest

    counted = list(_evaluated_word_counts(items))
    hits = sum(int((words == words.max()).sum() == 1 and words.argmax() == int(it["answer"])) for it, words in counted)
    n = len(counted)
    return hits, n, (binomtest(hits, n, 1 / len(items[0]["options"]), alternative="greater").pvalue if n else 1.0)


def _evaluated_word_counts(items):
    """``(item, word count of each option)`` for the items of evaluated documents (not calibration)."""
    for it in items:
        if (it.get("meta") or {}).get("role", "evaluate") == "evaluate":
            yield it, np.array([len(str(o).split()) for o in it["options"]])


def _suspects(g: pd.DataFrame) -> dict:
    """Suspect counts of one method's documents; NaN for a score without a test (``-prob``)."""
    if "suspect" not in g or g["suspect"].isna().all():
        return {"n_suspect": np.nan, "n_suspect_members": np.nan}
    suspect = g["suspect"].astype(bool)
    return {"n_suspect": int(suspect.sum()), "n_suspect_members": int(suspect[g["label"] == 1].sum())}
