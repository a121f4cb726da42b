"""Model-free "blind" baseline: can members be told from non-members by their text alone?

Membership benchmarks built from a date cutoff (books published before vs after
a model's training) differ in topic, names and style as well as in membership.
A detector can then score well without any memorisation.  Following Das et al.
(2024, "Blind baselines beat membership inference attacks for foundation
models"), we fit a bag-of-words classifier on the texts and labels only, with
no access to any language model; its out-of-fold AUC is a floor that a real
membership signal has to beat.  An AUC near 0.5 means the benchmark is not
separable by surface features; near 1.0 means detector AUCs on it say little
about memorisation.

Where labels are given per book (``split_by: book``, a user's ``labels`` file, BookTection's
books, a QA set split by article), the folds keep each book whole (``groups``). Otherwise a
held-out chapter's book sits in the training folds with its label, and the classifier scores
how well it recognises the book, not how the member books differ from the non-member ones: on
the demo's QA set (questions of 70 articles, split by article) 0.86 with folds by document and
0.53 with folds by article; on six Austen novels labelled three against three, 0.83 and 0.48.
Das et al. fold by sample; their datasets' non-members (later texts) differ from the members
in ways a new book of either side shares, which whole-book folds still show.

The AUC is taken within folds (:func:`memaudit.stats.metrics.fold_auc`): each fold's scores come from a
model of its own, with an intercept of its own, and one AUC over the pooled scores ranks one fold's
documents against another's by those intercepts (Parker et al. 2007; Forman & Scholz 2010). With folds
by book the held-out side is short in training and its fold's intercept leans the other way, so the
pooled AUC sits below 0.5 where the sides do not differ (six books three against three: 0.37) and
hides a real difference (0.45 where the folds' own AUCs average 0.67).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline

from memaudit.errors import InputError


class BlindScores(NamedTuple):
    """Out-of-fold member probabilities and the fold (0, 1, ...) whose model scored each document."""

    scores: np.ndarray
    fold: np.ndarray


def blind_baseline_scores(
    texts: Sequence[str], labels, *, n_splits: int = 5, seed: int = 0, groups: Sequence[str] | None = None
) -> np.ndarray:
    """The scores of :func:`blind_baseline` (without the folds: pool them only where one model scored all)."""
    return blind_baseline(texts, labels, n_splits=n_splits, seed=seed, groups=groups).scores


def blind_baseline(
    texts: Sequence[str], labels, *, n_splits: int = 5, seed: int = 0, groups: Sequence[str] | None = None
) -> BlindScores:
    """Out-of-fold member probabilities from a TF-IDF + logistic-regression classifier, with each one's fold.

    Features: word 1- and 2-grams, ``tf = 1 + log(count)`` (sublinear_tf),
    ``min_df=1``, L2-normalised TF-IDF rows.  Classifier: L2-regularised
    logistic regression, ``P(member | x) = sigmoid(w . x + b)``.

    Each document's score comes from a model fitted on the other folds of a
    ``StratifiedKFold(n_splits, shuffle=True, random_state=seed)``; the
    vectoriser is refitted inside each fold so the held-out fold's vocabulary
    never leaks into training.  ``n_splits`` is lowered to the size of the
    smaller class when that is smaller (every fold needs one document of each
    class); fewer than 2 documents in a class raises :class:`InputError`. With
    ``groups`` (:func:`memaudit.stats.metrics.label_groups`), a ``StratifiedGroupKFold`` keeps each
    group in one fold, ``n_splits`` lowered to the groups of the smaller class.

    Returns scores aligned with ``texts`` (higher = more likely member) and the fold of each, for
    :func:`memaudit.stats.metrics.compute_metrics`'s ``folds``: each fold's model has its own intercept,
    so scores of two folds are not comparable and the AUC counts only pairs that one fold holds.
    """
    texts = [str(t) for t in texts]
    labels = np.asarray(labels).ravel()
    if len(texts) != labels.size:
        raise InputError(f"texts and labels differ in length ({len(texts)} vs {labels.size})")
    if not np.isin(labels, (0, 1)).all():
        raise InputError("labels must be 0 (non-member) or 1 (member)")
    labels = labels.astype(int)
    smallest_class = int(min((labels == 1).sum(), (labels == 0).sum()))
    if smallest_class < 2:
        raise InputError(
            f"blind baseline needs at least 2 documents per class, got "
            f"{int((labels == 1).sum())} member(s) and {int((labels == 0).sum())} non-member(s)"
        )
    if n_splits < 2:
        raise InputError(f"n_splits must be >= 2, got {n_splits}")
    n_splits = min(n_splits, smallest_class)
    if groups is not None:
        groups = [str(g) for g in groups]
        if len(groups) != labels.size:
            raise InputError(f"texts and groups differ in length ({len(texts)} vs {len(groups)})")
        n_splits = min(n_splits, *(len({g for g, y in zip(groups, labels) if y == c}) for c in (0, 1)))
        if n_splits < 2:
            raise InputError("blind baseline: folds that keep each group whole need 2 groups of each class")

    classifier = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1),
        LogisticRegression(max_iter=1000),
    )
    folds = (StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed) if groups is None
             else StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed))
    splits = list(folds.split(texts, labels, groups))
    fold = np.empty(labels.size, dtype=int)
    for index, (_, held_out) in enumerate(splits):
        fold[held_out] = index
    try:
        proba = cross_val_predict(classifier, texts, labels, cv=splits, method="predict_proba")
    except ValueError as exc:
        # TfidfVectorizer raises this when a training fold has no words at all.
        if "empty vocabulary" in str(exc):
            raise InputError("blind baseline: the texts contain no words") from None
        raise
    # Column order follows the sorted classes [0, 1].
    return BlindScores(proba[:, 1], fold)
