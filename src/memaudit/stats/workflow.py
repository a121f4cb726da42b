"""Stage-level glue for the statistics rules: blind baseline, summary tables, method selection."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from memaudit.errors import InputError
from memaudit.io import read_csv, read_json, read_jsonl, read_jsonl_lines, write_csv

log = logging.getLogger(__name__)

BLIND_MODEL = "(none)"
BLIND_METHOD = "blind_bag_of_words"


def document_books(documents) -> dict[str, str]:
    """``{doc_id: book}`` of a benchmark's ``documents.jsonl`` (a path, or its records already read); a
    document without a book is its own. A file whose record lacks ``doc_id`` or a ``meta`` object (another
    table given to ``memaudit stats --books-from``) is an :class:`InputError` naming the file and line."""
    if not isinstance(documents, (str, Path)):
        return {d["doc_id"]: str(d["meta"].get("book") or d["doc_id"]) for d in documents}
    books = {}
    for line, d in read_jsonl_lines(documents):
        for key, ok in (("doc_id", "doc_id" in d), ("meta", isinstance(d.get("meta"), dict))):
            if not ok:
                raise InputError(f"{documents}, line {line}: no {key!r}{' object' if key == 'meta' else ''} (a "
                                 f"benchmark's results/datasets/<benchmark>/documents.jsonl has one on every line)")
        books[d["doc_id"]] = str(d["meta"].get("book") or d["doc_id"])
    return books


def read_document_scores(paths: Sequence[str]) -> pd.DataFrame:
    """The document-score files of one (benchmark, model), concatenated. A score that is not a finite
    number (``nan``, empty, ``inf``) is an :class:`InputError` naming the file, the line (the header is
    line 1), the column and the row's doc_id: the statistics would refuse it later naming only the
    method, not where it came from. A method whose every score in its file is empty is no error: its
    probe measured nothing there (a cloze token type no reply answered), and its row of the metrics
    table has no statistic (:func:`memaudit.stats.summary.metrics_table`)."""
    frames = []
    for path in paths:
        frame = read_csv(path)
        if "score" in frame.columns:
            unmeasured = (frame["score"].isna().groupby(frame["method"]).transform("all") if "method" in frame
                          else pd.Series(False, index=frame.index))
            bad = np.flatnonzero(~np.isfinite(pd.to_numeric(frame["score"], errors="coerce").to_numpy(dtype=float))
                                 & ~unmeasured.to_numpy(dtype=bool))
            if bad.size:
                row = frame.iloc[bad[0]]
                raise InputError(f"{path}, line {_data_line(path, bad[0])}, column score: {row['score']} is not a "
                                 f"finite number (doc_id {row.get('doc_id')!r}, method {row.get('method')!r}; "
                                 f"{bad.size} such row(s))")
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _data_line(path, index: int) -> int:
    """The line of the file where data row ``index`` (0-based, as ``pandas.read_csv`` numbers them)
    starts: counted by :func:`memaudit.datasets.rejects.csv_rows`, so a quoted field over several
    lines or a blank line before it does not shift it."""
    from memaudit.datasets.rejects import csv_rows

    starts = [line for line, _ in csv_rows(path, Path(path).read_text(encoding="utf-8"), empty_fields=True)]
    return starts[index + 1] if index + 1 < len(starts) else index + 2


def run_metrics(document_paths: Sequence[str], out_metrics, out_selection, out_named, *, benchmark: str,
                model: str, contaminated: bool, stats: dict, seed: int, benchmark_documents=None,
                per_book: bool = False) -> pd.DataFrame:
    """Every statistic of one (benchmark, model): the metrics table (one row per method, the
    conformal BH columns at ``stats.selection.q`` included) and the selection tables over the
    whole q grid: FDR and power per (method, q), and the documents named at each q.
    ``benchmark_documents`` (its ``documents.jsonl``) says each document's book, for the intervals
    of labels given per book (``per_book``: :func:`memaudit.config.labels_per_book`;
    :func:`memaudit.stats.summary.metrics_table`)."""
    from memaudit.stats import selection
    from memaudit.stats.summary import metrics_table

    docs = read_document_scores(document_paths)
    # a method with no score measured nothing (a cloze token type no reply answered): a row without statistics
    unmeasured = docs.groupby("method")["score"].apply(lambda s: bool(s.isna().all()))
    for method in unmeasured.index[unmeasured]:
        log.warning("%s/%s: method %r has no score for any of its %d documents (its probe measured nothing "
                    "there): no AUC, no statistic, no selection", benchmark, model, method,
                    int((docs["method"] == method).sum()))
    measured = docs[~docs["method"].isin(unmeasured.index[unmeasured])]
    chosen = stats["selection"]
    books = document_books(benchmark_documents) if per_book and benchmark_documents else None
    table = metrics_table(docs, benchmark=benchmark, model=model, contaminated=contaminated, seed=seed,
                          n_boot_small=stats["n_boot_small"], n_boot_ci=stats["n_boot_ci"],
                          selection_settings=chosen, books=books)
    if table["ci_books"].notna().any():
        log.info("%s/%s: intervals and t-tests over whole books (labels given per book) for %s", benchmark, model,
                 ", ".join(table.loc[table["ci_books"].notna(), "method"]))
    runs = selection.conformal_bh_runs(measured, chosen["qs"], n_splits=chosen["n_splits"],
                                       calibration_fraction=chosen["calibration_fraction"], seed=seed)
    summary = selection.summarise_runs(runs)
    # the bh_* columns' q once, with what it means for them, whether or not the grid holds it
    notes = (selection.uncalibrated_notes(measured, chosen["calibration_fraction"])
             + selection.resolution_notes(summary[~np.isclose(summary["q"], chosen["q"])])
             + selection.bh_resolution_notes(measured, chosen["q"], chosen["calibration_fraction"]))
    for note in notes:
        log.warning("%s/%s: %s", benchmark, model, note)
    named = selection.selected_documents(measured, chosen["qs"], calibration_fraction=chosen["calibration_fraction"],
                                         seed=seed)
    ids = {"benchmark": benchmark, "model": model, "contaminated": bool(contaminated)}
    write_csv(out_metrics, table)
    write_csv(out_selection, summary.assign(**ids)[[*ids, *summary.columns]])
    write_csv(out_named, named.assign(**ids)[[*ids, *named.columns]])
    return table


def run_blind_baseline(documents_path, out_scores, out_metrics, *, benchmark: str, stats: dict,
                       seed: int, per_book: bool = False) -> pd.DataFrame:
    """Cross-validated bag-of-words member classifier, no language model involved; with ``per_book``
    (labels given per book), each book in one fold and the intervals over books. The scores file's
    ``cv_fold`` says which fold's model scored each document: the AUC counts pairs within folds
    (:func:`memaudit.stats.metrics.fold_auc`)."""
    from memaudit.stats.blind import blind_baseline
    from memaudit.stats.metrics import label_groups
    from memaudit.stats.summary import metrics_table

    docs = read_jsonl(documents_path)
    texts = [d["text"] for d in docs]
    labels = [int(d["meta"]["label"]) for d in docs]
    books = document_books(docs) if per_book else None
    groups = label_groups([books[d["doc_id"]] for d in docs], labels) if books else None
    log.info("blind baseline folds on %s: %s", benchmark,
             f"by book ({len(set(groups))} books, each in one fold: the labels are given per book)" if groups
             else "by document")
    try:
        blind = blind_baseline(texts, labels, n_splits=stats["blind_folds"], seed=seed, groups=groups)
    except InputError as exc:  # which benchmark: its documents file says
        raise InputError(f"{documents_path}: {exc}") from None
    frame = pd.DataFrame({"doc_id": [d["doc_id"] for d in docs], "label": labels,
                          "method": BLIND_METHOD, "score": blind.scores, "cv_fold": blind.fold})
    write_csv(out_scores, frame)
    table = metrics_table(frame, benchmark=benchmark, model=BLIND_MODEL, contaminated=False, seed=seed,
                          n_boot_small=stats["n_boot_small"], n_boot_ci=stats["n_boot_ci"],
                          selection_settings=stats.get("selection"), books=books)
    write_csv(out_metrics, table)
    log.info("blind baseline AUC on %s: %.3f", benchmark, table["auc"].iloc[0])
    return table


def build_summary(metric_paths: Sequence[str], model_dirs: Sequence[str], out_csv, out_md, out_models,
                  selection_paths: Sequence[str] = (), out_selection=None, out_figure=None,
                  figure_methods: Sequence[str] = (), rejects: Mapping[str, str] | None = None,
                  out_rejects=None, benchmarks: Mapping[str, dict] | None = None,
                  out_benchmarks=None, api_models: Sequence[dict] = (),
                  families: Mapping[str, str] | None = None) -> pd.DataFrame:
    """``metrics.csv``/``metrics.md`` over every (benchmark, model, method) and ``models.csv``; with
    ``selection_paths``, ``selection.csv`` (every per-pair selection table) and its figure; with
    ``rejects`` (``{benchmark: its rejects.csv}``), ``rejects.csv``: the input rows each
    benchmark's loaders rejected, counted by file and reason; with ``benchmarks`` (``{benchmark:
    its label provenance}``, :func:`memaudit.jobs.label_provenance`), ``benchmarks.csv``:
    where each benchmark's labels come from, whether its base models are null controls and which
    probe families ran on it. ``api_models`` (:func:`api_model_rows`) join the local models in ``models.csv``,
    whose families are ``families``' (:func:`models_table`)."""
    from memaudit.datasets.rejects import count_rejects
    from memaudit.stats.summary import merge_metrics, write_summary

    frame = merge_metrics(metric_paths)
    write_summary(frame, out_csv, out_md)
    write_csv(out_models, models_table(model_dirs, api_models, families))
    if out_benchmarks is not None:
        write_csv(out_benchmarks, pd.DataFrame([{"benchmark": name, **origin} for name, origin in
                                                sorted((benchmarks or {}).items())],
                                               columns=["benchmark", "labels", "null_control", "families"]))
    if out_rejects is not None:
        write_csv(out_rejects, count_rejects(rejects or {}))
    if out_selection is not None:
        from memaudit.figures.plots import plot_selection

        from memaudit.figures.plots import plot_note
        from memaudit.stats.selection import SELECTION_COLUMNS

        tables = [pd.read_csv(p) for p in selection_paths]
        if not tables:  # every benchmark unlabelled (published CopyBench): nothing to select among
            write_csv(out_selection, pd.DataFrame(columns=["benchmark", "model", "contaminated", *SELECTION_COLUMNS]))
            plot_note(str(out_figure).removesuffix(".png"), "No labelled benchmark in this run: no member to name, "
                      "no conformal selection (an unlabelled benchmark has its family's own tables).")
            return frame
        selection = pd.concat(tables, ignore_index=True).sort_values(["benchmark", "model", "method", "q"],
                                                                      kind="stable")
        write_csv(out_selection, selection)
        if selection.empty:  # every pair's tables empty: too few non-members to calibrate (the metrics logs say)
            plot_note(str(out_figure).removesuffix(".png"), "No conformal selection in this run: no labelled "
                      "benchmark has non-members enough to hold out stats.selection.calibration_fraction of them "
                      "for calibration (the metrics jobs' logs name each).")
            return frame
        plot_selection(selection, str(out_figure).removesuffix(".png"), figure_methods)
    return frame


MODEL_COLUMNS = ["model", "family", "n_params", "base", "contaminated_on", "source_sha256", "backend", "model_id",
                 "revision", "base_url"]


def models_table(model_dirs: Sequence[str], api_models: Sequence[dict] = (),
                 families: Mapping[str, str] | None = None) -> pd.DataFrame:
    """``model, family, n_params, base, contaminated_on, source_sha256, backend`` from each prepared model's
    ``manifest.json``, and the rows of ``api_models`` (:func:`api_model_rows`); ``source_sha256``: the digest
    of a checkpoint given by path (its files, when the run read them), blank for the others. A model's family
    is ``families``' (the config's, :func:`memaudit.jobs.families`) where given: renaming one reruns the jobs
    that show it, not ``prepare_model``, so a manifest may hold an older one (or, since, none)."""
    rows = []
    for d in model_dirs:
        m = read_json(Path(d) / "manifest.json")
        family = (families or {}).get(m["name"], m.get("family", m["name"]))
        rows.append({"model": m["name"], "family": family, "n_params": m["n_params"],
                     "base": m.get("base") or "", "contaminated_on": ";".join(m["contaminated_on"]),
                     "source_sha256": (m.get("source_digest") or {}).get("sha256", ""),
                     "backend": m.get("backend", "hf")})
    rows += [{"n_params": "", **row} for row in api_models]  # no parameter count: blank, not 0
    # each row blank in the fields it lacks (a local model's model_id, an API model's base): filling an
    # all-NaN float column with "" afterwards is a pandas deprecation
    rows = [{**dict.fromkeys(MODEL_COLUMNS, ""), **row} for row in rows]
    return pd.DataFrame(rows, columns=MODEL_COLUMNS).sort_values("model")


def api_model_rows(config: dict) -> list[dict]:
    """A ``models.csv`` row for each API model of ``config``: which model the run asked (``api.model_id``, its
    ``revision`` and ``base_url``; blank: the provider's own API), which no prepared model's manifest records
    and the per-document tables name only by the config's name."""
    from memaudit.config import is_api_model

    return [{"model": name, "family": entry.get("family", name), "backend": entry["backend"],
             "model_id": entry["api"]["model_id"], "revision": entry["api"].get("revision") or "",
             "base_url": entry["api"].get("base_url") or ""}
            for name, entry in sorted(config["models"].items()) if is_api_model(entry)]


def select_methods(doc_scores: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """Rows of the configured headline methods plus every reference-model method (``ref_*``)."""
    keep = set(methods) | {m for m in doc_scores["method"].unique() if str(m).startswith("ref_")}
    sel = doc_scores[doc_scores["method"].isin(keep)]
    return sel if len(sel) else doc_scores
