"""What the workflow's ``decop_probe`` rule calls: probe each model on the items (built by
:mod:`memaudit.probes.decop.items`), score and tabulate."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from memaudit.backends.api import APIRequestError
from memaudit.probes.decop import analysis
# workflow/scripts/decop_items.py and ktd_pool.py import the item builders from here, as before they
# moved to memaudit.probes.decop.items: Snakemake reruns a rule whose script text changes, and a
# finished paraphrase pool must not be redone for a move
from memaudit.probes.decop.items import build_items, make_paraphraser, published_items_for_run  # noqa: F401
from memaudit.probes.decop.plan import method_name
from memaudit.probes.decop.prompts import orderings
from memaudit.io import read_jsonl, write_csv, write_json
from memaudit.probes.job import document_scores
from memaudit.probes.registry import modes_of

log = logging.getLogger(__name__)

MODES = tuple(modes_of("decop"))


# ----------------------------------------------------------------------------- scoring

def _evaluate(answers: pd.DataFrame, mode: str, lengths: Sequence[int], fdr: float, *,
              calibration_documents: int | None = None):
    """Document scores (evaluated documents) and the per-document table (all), per variant and length.
    ``calibration_documents``: the number configured for this benchmark (0: no calibrated variant)."""
    doc_rows, tables, calibration = [], [], {}
    for length in lengths:
        ans = answers[answers["length"] == length]
        if ans.empty:
            continue
        variants = [("pred", "")]
        if mode == "logit" and calibration_documents == 0:
            log.info("%d-token passages: probes.decop.calibration_documents is 0 for this benchmark; "
                     "decop-logit-calibrated is not computed", length)
            calibration[str(length)] = {"skipped": "probes.decop.calibration_documents is 0 for this benchmark",
                                        "n_calibration_documents": 0}
        elif mode == "logit" and ans[ans["role"] == "calibrate"].empty:
            # Quality control can reject every clean calibration passage: report the
            # uncalibrated variant and say why the calibrated one is missing, never crash.
            log.warning("%d-token passages: no clean calibration document survived quality control; "
                        "decop-logit-calibrated is skipped (raise probes.decop.calibration_documents)", length)
            calibration[str(length)] = {"skipped": "no clean calibration document survived quality control",
                                        "n_calibration_documents": 0}
        elif mode == "logit":
            calib = ans[ans["role"] == "calibrate"]
            delta = analysis.label_adjustments(calib)
            probs = ans[list(analysis.PROB_COLUMNS)].to_numpy()
            ans = ans.assign(pred_calibrated=analysis.predict(probs, delta))
            # the clean reference documents' own calibrated answers, out of sample (leave one out)
            ans.loc[calib.index, "pred_calibrated"] = analysis.leave_one_out_predictions(calib)
            answers.loc[ans.index, "pred_calibrated"] = ans["pred_calibrated"]
            calibration[str(length)] = {
                "delta": dict(zip("ABCD", map(float, delta))),
                "mean_before": dict(zip("ABCD", map(float, 0.25 - delta))),
                "n_calibration_documents": int(calib["doc_id"].nunique())}
            variants.append(("pred_calibrated", "calibrated"))
        p_verbatim = analysis.verbatim_probability(ans, mode)
        note = analysis.suspect_list_note(int(ans.loc[ans["role"] == "calibrate", "doc_id"].nunique()), fdr)
        if note:
            log.warning("%d-token passages: %s", length, note)
        for column, variant in variants:
            table = analysis.document_accuracy(ans, column)
            # the held-out clean documents' accuracies are the suspect list's reference (none: no list)
            clean = table.loc[table["role"] == "calibrate", "accuracy"].to_numpy()
            evaluated = analysis.suspect_list(table[table["role"] == "evaluate"], fdr, clean)
            table = pd.concat([evaluated, table[table["role"] == "calibrate"]], ignore_index=True)
            table["score"] = table["accuracy"]
            _add_table(tables, doc_rows, table, method_name(mode, length, lengths, variant), length)
            if variant == "" and p_verbatim is not None:
                # Beyond the paper: the mean probability of the verbatim option. Accuracy over a few
                # passages takes a handful of values (0, 1/3, 2/3, 1 with 3 passages) and throws away
                # how far the verbatim option is ahead; this score keeps it. No exact test: the
                # suspect list belongs to the accuracy variants.
                prob = table.assign(score=table["doc_id"].map(p_verbatim.groupby(ans["doc_id"]).mean()))
                prob[["p_value", "q_value", "suspect"]] = np.nan
                _add_table(tables, doc_rows, prob, method_name(mode, length, lengths, "prob"), length)
    return pd.concat(doc_rows, ignore_index=True), pd.concat(tables, ignore_index=True), calibration


def _add_table(tables: list, doc_rows: list, table: pd.DataFrame, method: str, length: int) -> None:
    table = table.copy()
    table.insert(0, "method", method)
    table.insert(1, "length", length)
    tables.append(table)
    evaluated = table[table["role"] == "evaluate"]
    doc_rows.append(pd.DataFrame({"doc_id": evaluated["doc_id"], "label": evaluated["label"],
                                  "method": method, "score": evaluated["score"]}))


def first_passages(items: Sequence[dict], per_document: int | None) -> list[dict]:
    """At most ``per_document`` items per (document, passage length), the first in file order
    (built items are written in text order); ``None`` keeps all."""
    if per_document is None:
        return list(items)
    seen: dict[tuple, int] = {}
    kept = []
    for item in items:
        key = (item["doc_id"], item.get("meta", {}).get("length_tokens"))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= per_document:
            kept.append(item)
    return kept


def _check_answered(answers: pd.DataFrame, mode: str) -> None:
    """Stop where every request for a document (at a passage length) failed (``on_error: record``): it has
    no accuracy (0 of 0), and the document scores take no NaN; the prefix and CopyBench jobs stop on any."""
    failed = answers["status"].eq("error").groupby([answers["doc_id"], answers["length"]]).all()
    if failed.any():
        (doc, length), n = failed[failed].index[0], int(failed.sum())
        raise APIRequestError(f"DE-COP {mode}: every request for {n} document{'s' if n > 1 else ''} (passage "
                              f"length) failed, e.g. {doc!r} ({length} tokens): no accuracy to score "
                              f"{'them' if n > 1 else 'it'} by (on_error: record; the answered ones are cached: a "
                              "rerun sends only what failed)")


def run_job(job) -> pd.DataFrame:
    """One DE-COP probe job (:class:`memaudit.probes.job.ProbeJob`): one mode on one model."""
    with job.opened_backend() as backend:
        # the shared settings (probes.decop, per-benchmark values resolved for this benchmark) build
        # the items; a mode's own passages_per_document (probes.decop_<mode>) probes only the first of them
        from memaudit.probes.decop.plan import settings

        return run_decop(job.mode, backend, job.inputs["mcq"], settings(job.config, job.benchmark),
                         out_answers=job.outputs["answers"], out_documents=job.outputs["documents"],
                         out_table=job.outputs["table"], out_calibration=job.outputs["calibration"],
                         passages_per_document=job.config["probes"][job.probe].get("passages_per_document"),
                         progress=job.progress)


def run_decop(mode: str, backend, items_path: str | Path, cfg: dict, *, out_answers: str | Path,
              out_documents: str | Path, out_table: str | Path, out_calibration: str | Path,
              passages_per_document: int | None = None,
              progress: Callable[[str], None] = log.info) -> pd.DataFrame:
    """One DE-COP mode on one model: answers, document scores (``score`` = accuracy, higher = member),
    the per-document table with exact-test p-values and the BH suspect list, calibration.

    ``backend`` is the model under test (any :class:`~memaudit.backends.base.Backend` with the
    mode's capability); ``passages_per_document`` probes only the first passages of each
    document and length.
    """
    if mode not in MODES:
        raise ValueError(f"unknown DE-COP mode {mode!r} ({', '.join(MODES)})")
    items = first_passages(read_jsonl(items_path), passages_per_document)
    lengths = [int(n) for n in cfg["lengths"]]
    perms = orderings(cfg["orderings"])
    t0 = time.time()
    if mode == "blackbox":
        from memaudit.probes.decop.scoring import score_blackbox

        answers = score_blackbox(backend, items, perms, max_new_tokens=int(cfg.get("max_answer_tokens", 8)))
    elif mode == "logit":
        from memaudit.probes.decop.scoring import score_logit

        answers = score_logit(backend, items, perms, batch_size=int(cfg.get("batch_size", 24)), progress=progress)
    else:
        from memaudit.probes.decop.scoring import score_likelihood

        answers = score_likelihood(backend, items)
    progress(f"{mode} mode: {len(answers)} questions in {time.time() - t0:.1f}s")
    _check_answered(answers, mode)
    documents, table, calibration = _evaluate(answers, mode, lengths, float(cfg["fdr"]),
                                              calibration_documents=cfg.get("calibration_documents"))
    if mode in ("blackbox", "logit"):
        # per (document, length), as the table's rows: per document they summed every length into each row
        # (n_error, in every mode: analysis.document_accuracy). Logit mode: an API model's questions with no
        # letter listed (invalid) or refused by the provider; a local model's are all answered (0)
        counts = answers.groupby(["doc_id", "length"])["status"].value_counts().unstack(fill_value=0)
        rows = pd.MultiIndex.from_frame(table[["doc_id", "length"]])
        for status in ("invalid", "refusal"):
            column = counts[status] if status in counts else pd.Series(0, index=counts.index)
            table[f"n_{status}"] = column.reindex(rows, fill_value=0).to_numpy().astype(int)
    if mode == "blackbox":
        progress("answers: " + ", ".join(f"{k}={v}" for k, v in answers["parse"].value_counts().items()))
    answers.insert(0, "model", backend.name)
    answers.insert(1, "mode", mode)
    table.insert(0, "model", backend.name)
    table.insert(1, "mode", mode)
    write_csv(out_answers, answers)
    write_csv(out_table, table)
    documents = document_scores(documents, model=backend.name, dtype=backend.describe().get("dtype"))
    write_csv(out_documents, documents)
    write_json(out_calibration, {"model": backend.name, "mode": mode, "orderings": cfg["orderings"],
                                 "n_orderings": len(perms), "calibration": calibration, "seconds": time.time() - t0})
    return documents


def plan_records(config: dict, model: str, items: Sequence[dict], *, mode: str, datasets=None) -> list[dict]:
    """The requests DE-COP's ``mode`` will send to API model ``model`` (for ``memaudit estimate-cost``):
    one per (item, ordering), the items and orderings :func:`run_decop` probes. Logit mode asks for
    one answer token's top log-probabilities (``Backend.option_logprobs``), black-box mode for a short
    answer, both with Appendix C.1's closed-model prompt; likelihood mode needs token log-probabilities,
    which no API model serves."""
    from memaudit.backends import is_api_model
    from memaudit.backends.planning import plan_requests
    from memaudit.probes.decop.scoring import blackbox_params, question_params, question_prompts

    if not is_api_model(config["models"][model]) or mode == "likelihood":
        return []
    cfg = config["probes"]["decop"]
    items = first_passages(items, config["probes"][f"decop_{mode}"].get("passages_per_document"))
    perms = orderings(cfg["orderings"])
    prompts = [prompt for item in items for prompt in question_prompts(item, perms, closed=True)]
    if mode == "logit":
        return plan_requests(model, prompts, question_params(closed=True), kind="option_logprobs")
    return plan_requests(model, prompts, blackbox_params(int(cfg.get("max_answer_tokens", 8)), closed=True))
